package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

// TestE2ECompaction: a daemon that keeps heartbeats 0.5 s after their job
// ended runs jobs of a second and more under its own worker (a heartbeat
// every 0.1 s); once they end, `leaselog events --job` shows each lease's
// heartbeats as one lease.heartbeats summary where they were, the daemon
// logs what it compacted, and the stopped daemon's data passes `leaselog
// replay --verify`.
func TestE2ECompaction(t *testing.T) {
	dir := t.TempDir()
	d := startServeConfig(t, dir, config(2)+"[store]\nheartbeat_retention_seconds = 0.5\n")
	for _, id := range []string{"j1", "j2"} {
		submit(t, d.c, id, "run", "sleep 1.2")
	}
	waitFor(t, "j1 and j2 reported", func() bool {
		return job(t, d.c, "j1").State == "reported" && job(t, d.c, "j2").State == "reported"
	})
	waitFor(t, "j1 and j2 compacted", func() bool {
		return strings.Contains(strings.Join(history(t, d.c, "j1"), " "), "lease.heartbeats") &&
			strings.Contains(strings.Join(history(t, d.c, "j2"), " "), "lease.heartbeats")
	})
	out, err := exec.Command(binary, "events", "--server", d.url, "--data", filepath.Join(dir, "data"), "--job", "j1").CombinedOutput()
	if err != nil {
		t.Fatalf("events: %v\n%s", err, out)
	}
	if strings.Contains(string(out), "lease.heartbeat ") {
		t.Errorf("a heartbeat of j1 left after its compaction:\n%s", out)
	}
	// A second's run at renew 0.1 s: ten heartbeats or so, in one summary.
	sum := regexp.MustCompile(`lease\.heartbeats .* heartbeats=([0-9]+) first_seq=[0-9]+ first="`).FindStringSubmatch(string(out))
	if sum == nil || len(sum[1]) < 1 || sum[1] == "1" || sum[1] == "2" {
		t.Fatalf("leaselog events --job j1 shows no summary of its heartbeats:\n%s", out)
	}
	waitFor(t, "the compaction's log line", func() bool {
		return strings.Contains(d.output(), `"message":"heartbeats compacted"`)
	})
	// The daemon goes on: a job after the compaction runs as before.
	submit(t, d.c, "j3", "run", "true")
	waitFor(t, "j3 reported", func() bool { return job(t, d.c, "j3").State == "reported" })
	if _, err := d.c.Job(context.Background(), "j1"); err != nil {
		t.Fatal(err)
	}
	d.signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("serve exited %d", code)
	}
	out, err = exec.Command(binary, "replay", "--data", filepath.Join(dir, "data"), "--verify").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "verified:") {
		t.Fatalf("replay --verify of the compacted store: %v\n%s", err, out)
	}
	for _, want := range []string{"job j1 run reported", "job j2 run reported", "job j3 run reported"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("replay lacks %q:\n%s", want, out)
		}
	}
}
