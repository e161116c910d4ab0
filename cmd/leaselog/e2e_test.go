package main

// End-to-end tests: the real leaselog binary, started as a daemon and as
// workers, driven over HTTP on loopback with timings in fractions of a
// second, killed, paused and restarted with real signals. One test per row
// of the Leases page's "What happens" table, plus self-fencing and the
// daemon's lifecycle.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testkit/testutil"
)

func TestE2EWorkerDiesDuringRun(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 0)
	ev := d.follow(t, 0)
	w := startWorker(t, d.url, "w1", filepath.Join(dir, "w1"))
	submit(t, d.c, "agent-1", "run", "sleep 60")
	running := ev.next("lease.running", "agent-1")
	w.signal(syscall.SIGKILL)
	expired := ev.next("lease.expired", "agent-1")
	if expired.Lease != running.Lease || expired.Reason != "worker lost" {
		t.Fatalf("expired %+v, want lease %d, worker lost", expired, running.Lease)
	}
	if j := job(t, d.c, "agent-1"); j.State != "failed" || j.Reason != "worker lost" || j.Attempts != 0 || j.Lease != nil {
		t.Fatalf("job after the worker died: %+v", j)
	}
}

// What happens: a worker dies during an evaluation. The evaluation is queued
// again, and the next lease carries a larger token.
func TestE2EWorkerDiesDuringEvaluation(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 0)
	ev := d.follow(t, 0)
	marker := filepath.Join(dir, "second-time")
	submit(t, d.c, "eval-1", "evaluation", fmt.Sprintf("if [ -e %q ]; then exit 0; fi; sleep 60", marker))
	w1 := startWorker(t, d.url, "w1", filepath.Join(dir, "w1"))
	first := ev.next("lease.running", "eval-1")
	w1.signal(syscall.SIGKILL)
	killRuns(filepath.Join(dir, "w1")) // the machine died with it
	if e := ev.next("lease.expired", "eval-1"); e.Reason != "lease expired" {
		t.Fatalf("expired %+v", e)
	}
	ev.next("lease.queued", "eval-1")
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	startWorker(t, d.url, "w2", filepath.Join(dir, "w2"))
	second := ev.next("lease.acquired", "eval-1")
	if second.Lease <= first.Lease || second.Worker != "w2" {
		t.Fatalf("second lease %+v after %d", second, first.Lease)
	}
	rep := ev.next("lease.reported", "eval-1")
	if rep.Lease != second.Lease || rep.Outcome != "succeeded" {
		t.Fatalf("report %+v", rep)
	}
	if j := job(t, d.c, "eval-1"); j.State != "reported" || j.Attempts != 1 || j.Leases != 2 {
		t.Fatalf("job %+v: want reported, 1 attempt, 2 leases", j)
	}
}

// rawReport posts a report and returns the status and the body as bytes.
func rawReport(t *testing.T, url string, lease uint64, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(fmt.Sprintf("%s/v1/leases/%d/report", url, lease), "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// What happens: a late report is refused (409), and kept as a
// lease.stale_report with the ref of its commits; auditors find it.
func TestE2ELateReport(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 0)
	ev := d.follow(t, 0)
	ctx := context.Background()
	submit(t, d.c, "j1", "run", "true")
	gs, err := d.c.Acquire(ctx, "w1", 1, time.Second)
	if err != nil || len(gs) != 1 {
		t.Fatalf("acquire: %v %v", gs, err)
	}
	ev.next("lease.expired", "j1") // w1 (this test) never heartbeats
	body := `{"worker":"w1","outcome":"succeeded","ref":"refs/leaselog/j1/late"}`
	status, first := rawReport(t, d.url, gs[0].Lease, body)
	var stale api.ErrorBody
	if err := json.Unmarshal(first, &stale); err != nil || status != http.StatusConflict || stale.Error.Code != api.CodeStaleLease || stale.StaleReportSeq == 0 {
		t.Fatalf("late report: %d %s", status, first)
	}
	if status, again := rawReport(t, d.url, gs[0].Lease, body); status != http.StatusConflict || !bytes.Equal(again, first) {
		t.Fatalf("the same late report again: %d %s, first %s", status, again, first)
	}
	out, err := exec.Command(binary, "audit", "stale-reports", "--server", d.url, "--job", "j1", "-o", "json").CombinedOutput()
	if err != nil {
		t.Fatalf("audit: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	var e api.Event
	if len(lines) != 1 || json.Unmarshal([]byte(lines[0]), &e) != nil || e.Seq != stale.StaleReportSeq || e.Ref != "refs/leaselog/j1/late" {
		t.Fatalf("audit stale-reports printed %q, want the one stale report (seq %d) with its ref", out, stale.StaleReportSeq)
	}
	if j := job(t, d.c, "j1"); j.State != "failed" || j.Attempts != 0 {
		t.Fatalf("the stale report changed the job: %+v", j)
	}
}

// What happens: the same report twice. The second gets the first's answer,
// byte for byte, and nothing is counted twice.
func TestE2ESameReportTwice(t *testing.T) {
	d := startServe(t, t.TempDir(), 0)
	ctx := context.Background()
	submit(t, d.c, "e1", "evaluation", "true")
	gs, err := d.c.Acquire(ctx, "w1", 1, time.Second)
	if err != nil || len(gs) != 1 {
		t.Fatalf("acquire: %v %v", gs, err)
	}
	body := `{"worker":"w1","outcome":"succeeded","result":{"score":0.9}}`
	s1, b1 := rawReport(t, d.url, gs[0].Lease, body)
	s2, b2 := rawReport(t, d.url, gs[0].Lease, body)
	if s1 != http.StatusOK || s2 != http.StatusOK || !bytes.Equal(b1, b2) {
		t.Fatalf("reports answered %d %s, then %d %s", s1, b1, s2, b2)
	}
	if j := job(t, d.c, "e1"); j.Attempts != 1 || j.State != "reported" {
		t.Fatalf("job %+v", j)
	}
	if h := history(t, d.c, "e1"); strings.Count(strings.Join(h, " "), "lease.reported") != 1 {
		t.Fatalf("history %v", h)
	}
}

// What happens: the machine sleeps. The daemon is paused (SIGSTOP) past
// toleration, then continued: the gap is its own absence, nothing expires,
// and the job its local worker runs finishes and is reported.
func TestE2EDaemonPausedPastToleration(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 1)
	t.Cleanup(func() { killRuns(filepath.Join(dir, "data", "work")) })
	ev := d.follow(t, 0)
	gate := filepath.Join(dir, "go")
	submit(t, d.c, "agent-1", "run", fmt.Sprintf("while [ ! -e %q ]; do sleep 0.02; done", gate))
	running := ev.next("lease.running", "agent-1")
	// The whole machine sleeps: the job and its supervisor too.
	runDir := filepath.Join(dir, "data", "work", fmt.Sprintf("agent-1-%d", running.Lease))
	supervisor := readPid(t, filepath.Join(runDir, ".leaselog", "pid"))

	d.signal(syscall.SIGSTOP)
	if err := syscall.Kill(-supervisor, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * toleration) // not synchronisation: this is the absence under test
	d.signal(syscall.SIGCONT)
	// A real sleep stops CLOCK_MONOTONIC, the local worker's fence clock, and
	// the supervisor wakes before its deadline whatever the order; a
	// SIGSTOP does not stop the clock, so the supervisor is woken only once
	// the worker has renewed its deadline past now.
	waitFenceRenewed(t, runDir)
	if err := syscall.Kill(-supervisor, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}

	resumed := ev.next("daemon.resumed", "")
	if resumed.GapSeconds < (2 * toleration).Seconds() {
		t.Fatalf("resumed after a gap of %.2fs, want at least %.2fs", resumed.GapSeconds, (2 * toleration).Seconds())
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rep := ev.next("lease.reported", "agent-1")
	if rep.Lease != running.Lease || rep.Outcome != "succeeded" {
		t.Fatalf("report %+v, want lease %d succeeded", rep, running.Lease)
	}
	for _, typ := range history(t, d.c, "agent-1") {
		if typ == "lease.expired" {
			t.Fatal("a lease expired because the daemon was paused")
		}
	}
}

// What happens: leaselog serve restarts. The daemon is SIGKILLed with an
// agent running; restarted, its table is the one it had, the local worker
// re-attaches to the agent, the agent finishes and its report is accepted.
func TestE2EDaemonKilledAndRestarted(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() { killRuns(filepath.Join(dir, "data", "work")) })
	d := startServe(t, dir, 1)
	ev := d.follow(t, 0)
	gate := filepath.Join(dir, "go")
	submit(t, d.c, "agent-1", "run", fmt.Sprintf("while [ ! -e %q ]; do sleep 0.02; done; echo finished", gate))
	submit(t, d.c, "queued-1", "evaluation", "true")
	running := ev.next("lease.running", "agent-1")
	before := tableOf(t, d.c)

	d.signal(syscall.SIGKILL)
	d.wait()
	d2 := startServe(t, dir, 1)
	if after := tableOf(t, d2.c); after != before {
		t.Fatalf("table after restart:\n%s\nbefore:\n%s", after, before)
	}
	// A second daemon on the same data directory is refused, clearly.
	third := startProc(t, "second serve", "serve", "--data", filepath.Join(dir, "data"), "--listen", "127.0.0.1:0")
	if code := third.wait(); code == 0 || !strings.Contains(third.output(), "in use by another leaselog") {
		t.Fatalf("second serve on the same data: exit %d\n%s", code, third.output())
	}

	ev2 := d2.follow(t, running.Seq)
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rep := ev2.next("lease.reported", "agent-1")
	if rep.Lease != running.Lease || rep.Outcome != "succeeded" || rep.Worker != "local" {
		t.Fatalf("report after restart %+v, want lease %d succeeded by local", rep, running.Lease)
	}
	if j := job(t, d2.c, "agent-1"); j.Attempts != 1 || j.Leases != 1 {
		t.Fatalf("job %+v", j)
	}
}

// tableOf renders the jobs and leases the daemon serves, without the times
// that a heartbeat moves.
func tableOf(t *testing.T, c *api.Client) string {
	t.Helper()
	ctx := context.Background()
	js, err := c.Jobs(ctx, "", "")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, j := range js {
		lease := uint64(0)
		if j.Lease != nil {
			lease = j.Lease.Lease
		}
		fmt.Fprintf(&b, "job %s %s %s attempts=%d leases=%d lease=%d outcome=%s reason=%q\n", j.ID, j.Kind, j.State, j.Attempts, j.Leases, lease, j.Outcome, j.Reason)
	}
	ls, err := c.Leases(ctx, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range ls {
		fmt.Fprintf(&b, "lease %d %s %s %s revoke=%s\n", l.Lease, l.Job, l.Worker, l.State, l.Revoke)
	}
	return b.String()
}

// Edge: queued --> cancelled, the daemon stops first. SIGTERM cancels queued
// jobs, records daemon.stopping, and exits 0.
func TestE2EStopWithQueuedJobs(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 0)
	submit(t, d.c, "q1", "run", "true")
	submit(t, d.c, "q2", "evaluation", "true")
	d.signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM", code)
	}
	out, err := exec.Command(binary, "replay", "--data", filepath.Join(dir, "data"), "--verify").CombinedOutput()
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	for _, want := range []string{`job q1 run cancelled attempts=0 leases=0 reason="daemon stopped"`, `job q2 evaluation cancelled attempts=0 leases=0 reason="daemon stopped"`, "verified:"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("replay after stop lacks %q:\n%s", want, out)
		}
	}
}

// Self-fencing: the network between a worker and the daemon is cut. The
// worker stops its job before the daemon expires the lease.
func TestE2ESelfFencingStopsTheJobBeforeExpiry(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 0)
	ev := d.follow(t, 0)
	proxy := testutil.NewPartition(t, strings.TrimPrefix(d.url, "http://"))
	wdir := filepath.Join(dir, "w1")
	startWorker(t, "http://"+proxy.Addrs()[0], "w1", wdir)
	submit(t, d.c, "agent-1", "run", "sleep 60")
	running := ev.next("lease.running", "agent-1")
	pid := readPid(t, filepath.Join(wdir, fmt.Sprintf("agent-1-%d", running.Lease), ".leaselog", "pid"))

	died := make(chan time.Time, 1)
	go func() { // watch the job's process until it is dead (gone, or a zombie)
		for alive(pid) {
			time.Sleep(2 * time.Millisecond)
		}
		died <- time.Now()
	}()
	proxy.SetCut(true)
	expired := ev.next("lease.expired", "agent-1")
	var diedAt time.Time
	select {
	case diedAt = <-died:
	default:
		t.Fatalf("the job still runs after its lease expired at %v", expired.Time)
	}
	if !diedAt.Before(expired.Time) {
		t.Fatalf("the job stopped at %v, after its lease expired at %v", diedAt, expired.Time)
	}
	t.Logf("job stopped %v before its lease expired", expired.Time.Sub(diedAt))
}

// alive reports whether process pid exists and is not a zombie.
