package main

// End-to-end tests of what issue 24 asked of the queue, through the binary:
// a stop that keeps the queue, a cap on a poison evaluation's requeues, and
// failures in plain sight (jobs by outcome, counted by outcome).

import (
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// stopServe stops d with SIGTERM, gracefully, and fails t unless it exits 0.
func stopServe(t *testing.T, d *daemonProc) {
	t.Helper()
	d.signal(syscall.SIGTERM)
	if code := d.wait(); code != 0 {
		t.Fatalf("serve exited %d after SIGTERM", code)
	}
}

// replayTable is what `leaselog replay --verify` prints of dir's stopped
// daemon: the whole table, verified.
func replayTable(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command(binary, "replay", "--data", filepath.Join(dir, "data"), "--verify").CombinedOutput()
	if err != nil {
		t.Fatalf("replay: %v\n%s", err, out)
	}
	return string(out)
}

func wantLines(t *testing.T, what, text string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(text, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, text)
		}
	}
}

// A restart keeps the queue when the operator says so: SIGTERM to a daemon
// whose config says cancel_queued_on_stop = false, then to one started
// with --keep-queued, cancels nothing; the daemon started after finds the
// jobs queued, and a worker takes them. The default still cancels.
func TestE2EStopKeepsTheQueue(t *testing.T) {
	dir := t.TempDir()
	keep := strings.Replace(config(0), "[server]\n", "[server]\ncancel_queued_on_stop = false\n", 1)
	d := startServeConfig(t, dir, keep)
	submit(t, d.c, "q1", "run", "true")
	submit(t, d.c, "q2", "evaluation", "true")
	stopServe(t, d)
	wantLines(t, "the log of a stop that keeps the queue", d.output(), "queued jobs kept for the next start")

	d = startServeArgs(t, dir, config(0), "--keep-queued")
	for _, id := range []string{"q1", "q2"} {
		if j := job(t, d.c, id); j.State != "queued" {
			t.Fatalf("%s after a stop that kept the queue: %+v", id, j)
		}
	}
	submit(t, d.c, "q3", "run", "true")
	stopServe(t, d)
	wantLines(t, "the table after two stops that kept the queue", replayTable(t, dir),
		"job q1 run queued", "job q2 evaluation queued", "job q3 run queued")

	d = startServe(t, dir, 0)
	ev := d.follow(t, 0)
	for _, e := range []string{"daemon.stopping", "daemon.stopping"} {
		if got := ev.next(e, ""); got.Reason != "queued jobs kept" {
			t.Fatalf("%s %+v, want reason \"queued jobs kept\"", e, got)
		}
	}
	w := startWorker(t, d.url, "w1", filepath.Join(dir, "w1"))
	for _, id := range []string{"q1", "q2", "q3"} {
		if rep := ev.next("lease.reported", id); rep.Outcome != "succeeded" || rep.Worker != "w1" {
			t.Fatalf("report of %s: %+v", id, rep)
		}
	}
	w.signal(syscall.SIGTERM)
	w.wait()
	submit(t, d.c, "q4", "run", "true")
	stopServe(t, d)
	wantLines(t, "the table after a default stop", replayTable(t, dir),
		"job q1 run reported attempts=1 leases=1 outcome=succeeded", "job q3 run reported attempts=1",
		`job q4 run cancelled attempts=0 leases=0 reason="daemon stopped"`, "verified:")
}

// Poison jobs are capped: an evaluation whose supervisor dies every time (a
// job that kills it: `kill -9 $PPID`) is reported lost by the daemon's own
// worker each time, queued again as often as its cap allows, and then
// fails "lost N times": as an event, on the CLI's list of failed jobs and
// in the metrics. The cap is the submission's (--max-requeues) or the
// daemon's (plugins.executor.max_requeues).
func TestE2EPoisonEvaluationIsCapped(t *testing.T) {
	dir := t.TempDir()
	cfg := strings.Replace(config(1), "[plugins.executor]\n", "[plugins.executor]\nmax_requeues = 2\n", 1)
	d := startServeConfig(t, dir, cfg)
	ev := d.follow(t, 0)
	data := filepath.Join(dir, "data")
	if out, code := cli(t, "", nil, "submit", "--server", d.url, "--data", data, "--id", "poison", "--kind", "evaluation",
		"--max-requeues", "1", "--", "kill -9 $PPID"); code != 0 {
		t.Fatalf("submit: %d %s", code, out)
	}
	submit(t, d.c, "poison-default", "evaluation", "kill -9 $PPID")
	ev.next("lease.failed", "")
	ev.next("lease.failed", "")
	for _, tc := range []struct {
		id, reason string
		losses     int
	}{{"poison", "lost 2 times", 2}, {"poison-default", "lost 3 times", 3}} {
		if j := job(t, d.c, tc.id); j.State != "failed" || j.Reason != tc.reason || j.Attempts != 0 || j.Leases != tc.losses {
			t.Fatalf("%s: %+v, want failed %q with no attempt, %d leases", tc.id, j, tc.reason, tc.losses)
		}
		var got []string
		for _, typ := range history(t, d.c, tc.id) {
			if typ == "lease.queued" || typ == "lease.lost" || typ == "lease.failed" {
				got = append(got, strings.TrimPrefix(typ, "lease."))
			}
		}
		want := "queued" + strings.Repeat(" lost queued", tc.losses-1) + " lost failed"
		if strings.Join(got, " ") != want {
			t.Errorf("%s's history: %q, want %q", tc.id, got, want)
		}
	}
	out, code := cli(t, "", nil, "jobs", "--server", d.url, "--data", data, "--state", "failed")
	if code != 0 {
		t.Fatalf("jobs --state failed: %d %s", code, out)
	}
	wantLines(t, "leaselog jobs --state failed", out, "poison ", "lost 2 times", "poison-default", "lost 3 times")
	wantLines(t, "the metrics", metrics(t, d), `leaselog_events_total{type="lease.failed"} 2`, `leaselog_jobs{state="failed"} 2`)
}

// Failures in plain sight: a job whose run failed is reported, with outcome
// failed: `leaselog jobs --outcome failed` lists it (and --state failed,
// the jobs whose worker was lost, does not), and the metrics count it by
// outcome, the same after a restart.
func TestE2EFailuresInPlainSight(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 1)
	ev := d.follow(t, 0)
	data := filepath.Join(dir, "data")
	submit(t, d.c, "ok", "run", "true")
	submit(t, d.c, "bad", "run", "exit 3")
	ev.next("lease.reported", "ok")
	if e := ev.next("lease.reported", "bad"); e.Outcome != "failed" {
		t.Fatalf("bad reported %+v", e)
	}
	list := func(args ...string) string {
		t.Helper()
		out, code := cli(t, "", nil, append([]string{"jobs", "--server", d.url, "--data", data, "-o", "json"}, args...)...)
		if code != 0 {
			t.Fatalf("jobs %v: %d %s", args, code, out)
		}
		return strings.Join(keys(t, out, "id"), " ")
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--outcome", "failed"}, "bad"},
		{[]string{"--outcome", "succeeded"}, "ok"},
		{[]string{"--state", "reported"}, "bad ok"},
		{[]string{"--state", "failed"}, ""},
	} {
		if got := list(tc.args...); got != tc.want {
			t.Errorf("jobs %v: %q, want %q", tc.args, got, tc.want)
		}
	}
	out, code := cli(t, "", nil, "jobs", "--server", d.url, "--data", data, "--outcome", "lost")
	if code == 0 || !strings.Contains(out, `outcome "lost"`) {
		t.Errorf("jobs --outcome lost: %d %s, want a refusal naming it", code, out)
	}
	counted := []string{`leaselog_jobs_reported_total{outcome="failed"} 1`, `leaselog_jobs_reported_total{outcome="succeeded"} 1`,
		`leaselog_jobs_reported_total{outcome="killed"} 0`}
	wantLines(t, "the metrics", metrics(t, d), counted...)
	stopServe(t, d)
	d = startServe(t, dir, 1)
	wantLines(t, "the metrics after a restart", metrics(t, d), counted...)
}

// metrics scrapes d's /metrics, with the token its user's clients find.
func metrics(t *testing.T, d *daemonProc) string {
	t.Helper()
	token, err := clientToken(d.url, filepath.Join(d.dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	rq, err := http.NewRequest("GET", d.url+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		rq.Header.Set("Authorization", "Bearer "+token)
	}
	rs, err := http.DefaultClient.Do(rq)
	if err != nil {
		t.Fatal(err)
	}
	defer rs.Body.Close()
	b, err := io.ReadAll(rs.Body)
	if err != nil || rs.StatusCode != http.StatusOK {
		t.Fatalf("metrics: %d %v", rs.StatusCode, err)
	}
	return string(b)
}
