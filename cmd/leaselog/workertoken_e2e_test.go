package main

import (
	"context"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// What happens: `leaselog serve` with its generated tokens (no [auth], as
// `make run`), and `leaselog worker` started on the same host with no token
// given. The worker finds the workers' token in DATA/worker-token, runs a
// job and reports it; stopped, it says so and exits 0. With the admin token
// (which may not act as a worker) or an unknown one, it stops at once,
// exits non-zero, and its error names the token and the daemon.
func TestE2EWorkerFindsItsToken(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 1)
	data := filepath.Join(dir, "data")
	// The local worker (capacity 1) is kept busy: the next job is the
	// remote worker's.
	submit(t, d.c, "busy", "run", "sleep 60")
	waitFor(t, "the local worker to take busy", func() bool { return job(t, d.c, "busy").State != "queued" })
	t.Cleanup(func() { _, _ = d.c.Kill(context.Background(), "busy") })

	work := filepath.Join(dir, "work")
	t.Cleanup(func() { killRuns(work) })
	args := []string{"worker", "--server", d.url, "--id", "w1", "--data", data, "--workdir", work, "--capacity", "1", "--log-format", "json"}
	w := startProcIn(t, "worker w1", "", childEnv(), args...)
	submit(t, d.c, "j1", "run", "true")
	waitFor(t, "j1 reported", func() bool { return job(t, d.c, "j1").State == "reported" })
	es, err := d.c.History(context.Background(), "j1")
	if err != nil {
		t.Fatal(err)
	}
	if last := es[len(es)-1]; last.Type != "lease.reported" || last.Worker != "w1" {
		t.Fatalf("j1's last event %+v; want w1's report", last)
	}
	w.signal(syscall.SIGTERM)
	if code := w.wait(); code != 0 || !strings.Contains(w.output(), `"message":"worker stopped;`) {
		t.Fatalf("stopped worker: exit %d; want 0 and a line saying it stopped:\n%s", code, w.output())
	}

	admin, err := clientToken(d.url, data)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, token, code string }{
		{"the admin token", admin, "forbidden"},
		{"an unknown token", "not-a-token-of-this-daemon", "unauthorized"},
	} {
		p := startProcIn(t, "worker w2", "", childEnv("LEASELOG_TOKEN="+tc.token), "worker", "--server", d.url, "--id", "w2",
			"--workdir", filepath.Join(dir, "work2"), "--log-format", "json")
		code := p.wait() // a worker that retried would not exit
		out := p.output()
		if code == 0 || !strings.Contains(out, "the daemon at "+d.url+" refuses $LEASELOG_TOKEN") || !strings.Contains(out, tc.code) {
			t.Fatalf("worker with %s: exit %d; want non-zero and an error naming $LEASELOG_TOKEN, %s and %q:\n%s", tc.name, code, d.url, tc.code, out)
		}
	}
}
