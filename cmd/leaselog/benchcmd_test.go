package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/leaselog/leaselog/api"
)

// benchConfig is a daemon with no local worker and no [auth] (an open API)
// and the default timing: the bench's leases live as in production.
const benchConfig = `
[server]
listen = "127.0.0.1:0"
[plugins.executor]
local_capacity = 0
`

// TestBenchCommand runs `leaselog bench -o json` in each protocol on one
// daemon (each run after the first finds the history of the others), and
// checks the object it prints.
func TestBenchCommand(t *testing.T) {
	dir := t.TempDir()
	d := startServeConfig(t, dir, benchConfig)
	data := filepath.Join(dir, "data")
	for _, p := range []struct {
		flag, name string
		calls      [2]float64 // calls a job: at least, below
	}{
		{"classic", "classic", [2]float64{7, 7.5}}, // 4 + H, and any long poll that found nothing
		{"start", "start", [2]float64{6, 6.5}},
		{"next,start", "start,next", [2]float64{4, 6.5}}, // 5 when no job was queued at a report
		{"", "session", [2]float64{4, 5.5}},              // the default: every part, the workers' calls over sessions
		{"http", "http", [2]float64{4, 5.5}},             // every part over HTTP
		{"combined --h2c", "http", [2]float64{4, 5.5}},   // combined is http
		{"start,session", "start,session", [2]float64{6, 6.5}},
	} {
		args := []string{"bench", "--server", d.url, "--data", data, "--jobs", "300", "--workers", "8", "--enqueuers", "3", "-o", "json"}
		if flag, h2c := strings.CutSuffix(p.flag, " --h2c"); h2c {
			args = append(args, "--protocol", flag, "--h2c")
		} else if p.flag != "" {
			args = append(args, "--protocol", p.flag)
		}
		out, err := run(t, args...)
		if err != nil {
			t.Fatalf("bench: %v\n%s", err, out)
		}
		var r struct {
			Jobs          int                `json:"jobs"`
			Workers       int                `json:"workers"`
			Enqueuers     int                `json:"enqueuers"`
			Heartbeats    int                `json:"heartbeats"`
			Protocol      string             `json:"protocol"`
			HTTP          string             `json:"http"`
			CallsPerJob   float64            `json:"calls_per_job"`
			Seconds       float64            `json:"seconds"`
			JobsPerSecond float64            `json:"jobs_per_second"`
			Submit        map[string]float64 `json:"submit_ms"`
			Acquire       map[string]float64 `json:"acquire_ms"`
			Heartbeat     map[string]float64 `json:"heartbeat_ms"`
			Report        map[string]float64 `json:"report_ms"`
			Checked       bool               `json:"checked"`
			Check         string             `json:"check"`
		}
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("not one JSON object: %v\n%s", err, out)
		}
		wantHTTP := "http1"
		if strings.HasSuffix(p.flag, "--h2c") {
			wantHTTP = "h2c"
		}
		if strings.Contains(p.name, "session") {
			wantHTTP += "+session"
		}
		if r.Jobs != 300 || r.Workers != 8 || r.Enqueuers != 3 || r.Heartbeats != 3 || r.Protocol != p.name || r.HTTP != wantHTTP {
			t.Errorf("parameters: %s", out)
		}
		if r.CallsPerJob < p.calls[0] || r.CallsPerJob >= p.calls[1] {
			t.Errorf("%s: %v calls a job, want %v to %v", p.name, r.CallsPerJob, p.calls[0], p.calls[1])
		}
		if !r.Checked || !strings.Contains(r.Check, "300/300 jobs reported exactly once") {
			t.Errorf("check: %s", out)
		}
		if r.Seconds <= 0 || r.JobsPerSecond <= 0 {
			t.Errorf("throughput: %s", out)
		}
		for name, l := range map[string]map[string]float64{"submit": r.Submit, "acquire": r.Acquire, "heartbeat": r.Heartbeat, "report": r.Report} {
			want := 300.0
			switch {
			case name == "heartbeat":
				want = 900
			case name == "submit" && (p.name == "http" || p.name == "session"):
				want = 3 // 100 jobs a call
			case name == "acquire" && (strings.Contains(p.name, "next") || p.name == "http" || p.name == "session"):
				want = l["count"] // those its reports carried have none
			}
			if l["count"] != want || l["count"] == 0 || l["p50"] <= 0 || l["p50"] > l["p90"] || l["p90"] > l["p99"] || l["p99"] > l["max"] {
				t.Errorf("%s_ms: %v", name, l)
			}
		}
	}
	// The table says the same.
	out, err := run(t, "bench", "--server", d.url, "--data", data, "--jobs", "20", "--workers", "2", "--heartbeats", "0")
	if err != nil || !strings.Contains(out, "20 jobs") || !strings.Contains(out, "heartbeat") || !strings.Contains(out, "check: 20/20 jobs reported exactly once") {
		t.Fatalf("bench: %v\n%s", err, out)
	}
}

// faultyWorker is a worker client that loses one job's report (it answers
// accepted without sending it) and sends another's twice.
type faultyWorker struct {
	benchWorker
	lose, twice string
	mu          sync.Mutex
	jobs        map[uint64]string // lease -> job
}

func (w *faultyWorker) Acquire(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error) {
	gs, err := w.benchWorker.Acquire(ctx, worker, max, wait)
	w.mu.Lock()
	for _, g := range gs {
		w.jobs[g.Lease] = g.Job.ID
	}
	w.mu.Unlock()
	return gs, err
}

func (w *faultyWorker) Report(ctx context.Context, lease uint64, r api.Report) (api.ReportReply, error) {
	w.mu.Lock()
	job := w.jobs[lease]
	w.mu.Unlock()
	switch job {
	case w.lose:
		return api.ReportReply{Accepted: true, Job: job, Lease: lease}, nil
	case w.twice:
		if _, err := w.benchWorker.Report(ctx, lease, r); err != nil {
			return api.ReportReply{}, err
		}
	}
	return w.benchWorker.Report(ctx, lease, r)
}

// TestBenchCheckFails: a job whose report never reached the daemon fails the
// check, which names it; one whose report was sent twice does not (the
// daemon answers the repeat as the first, and logs one lease.reported).
func TestBenchCheckFails(t *testing.T) {
	d := startServeConfig(t, t.TempDir(), benchConfig)
	b := &bench{admin: d.c, jobs: 40, workers: 4, enqueuers: 2, heartbeats: 1, prefix: "bench-" + ulid.Make().String()}
	b.worker = &faultyWorker{benchWorker: d.c, lose: b.jobID(7), twice: b.jobID(21), jobs: map[uint64]string{}}
	ctx := context.Background()
	if _, err := b.run(ctx); err != nil {
		t.Fatal(err)
	}
	_, err := b.check(ctx)
	if err == nil {
		t.Fatal("the check passed")
	}
	// Job 7's report was "accepted" by the lying client, so the run counted
	// it: only the log read back shows that the daemon never had it.
	// Job 21's repeated report was answered as the first, and the log holds
	// one lease.reported: it passes.
	if want := "bench: check failed: 1 jobs with no lease.reported: " + b.jobID(7); err.Error() != want {
		t.Errorf("check: %v\nwant %q", err, want)
	}
}

// TestBenchCheckCounts: a job with two lease.reported events, one reported
// failed, a stale report, refused reports and lost heartbeats each fail the
// check; a clean run passes.
func TestBenchCheckCounts(t *testing.T) {
	b := &bench{jobs: 3, prefix: "bench-x"}
	b.accepted = make([]atomic.Int32, 3)
	for i := range b.accepted {
		b.accepted[i].Store(1)
	}
	if _, err := checkCounts(b, []int{1, 1, 1}, nil, nil); err != nil {
		t.Fatal(err)
	}
	_, err := checkCounts(b, []int{1, 2, 1}, []string{"bench-x-0"}, []string{"bench-x-2 (failed)"})
	for _, want := range []string{"more than one lease.reported: bench-x-1 (2)", "1 stale reports: bench-x-0", "outcome other than succeeded: bench-x-2 (failed)"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("check: %v\nwant %q in it", err, want)
		}
	}
	b.accepted[1].Store(2)
	b.accepted[2].Store(0)
	_, err = checkCounts(b, []int{1, 1, 1}, nil, nil)
	if want := "2 jobs whose accepted reports in this run were not one: bench-x-1 (2), bench-x-2 (0)"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("check: %v\nwant %q in it", err, want)
	}
	b.accepted[1].Store(1)
	b.accepted[2].Store(1)
	b.rejected.Store(1)
	b.lost.Store(2)
	_, err = checkCounts(b, []int{1, 1, 1}, nil, nil)
	if err == nil || !strings.Contains(err.Error(), "1 reports refused by the token check") || !strings.Contains(err.Error(), "2 heartbeats not answered continue") {
		t.Errorf("check: %v", err)
	}
}

// TestBenchFlags: bad flags are refused with a message, before any call.
func TestBenchFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		env  string
		want string
	}{
		{[]string{"--jobs", "0"}, "", "--jobs 0: want 1 to"},
		{[]string{"--workers", "-1"}, "", "--workers -1: want 1 to"},
		{[]string{"--enqueuers", "-2"}, "", "--enqueuers -2"},
		{[]string{"--heartbeats", "-1"}, "", "--heartbeats -1"},
		{[]string{"-o", "yaml"}, "", "-o yaml: want table or json"},
		{[]string{"--worker-id", "a b"}, "", "--worker-id"},
		{nil, "worker-token-0123456789", "give its --worker-id"},
		{[]string{"--worker-token-file", "/nonexistent/token"}, "", "--worker-token-file"},
		{[]string{"--jobs", "x"}, "", `invalid argument "x"`},
		{[]string{"--protocol", "fast"}, "", `--protocol "fast": want session, http, combined, classic, or a comma-separated list of start, next, batch, session`},
		{[]string{"--protocol", "start,,next"}, "", `--protocol "start,,next"`},
		{[]string{"--batch", "1001"}, "", "--batch 1001: want 1 to 1000"},
	} {
		if c.env != "" {
			t.Setenv("LEASELOG_WORKER_TOKEN", c.env)
		}
		out, err := run(t, append([]string{"bench", "--server", "http://127.0.0.1:1"}, c.args...)...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("bench %v: %v, want %q\n%s", c.args, err, c.want, out)
		}
	}
}

// TestBenchAuth: with [auth], the submits go with the admin token and the
// workers' calls with one worker's token (all workers act as its id); with
// the admin token alone the bench stops before it writes anything, saying
// why.
func TestBenchAuth(t *testing.T) {
	d := startServeConfig(t, t.TempDir(), benchConfig+`
[auth]
admin = ["admin-token-0123456789"]
[auth.workers]
wb = "wb-worker-token-0123456789"
`)
	t.Setenv("LEASELOG_TOKEN", "admin-token-0123456789")
	out, err := run(t, "bench", "--server", d.url, "--jobs", "20", "--workers", "2")
	if err == nil || !strings.Contains(err.Error(), "an admin token cannot act as a worker") {
		t.Fatalf("bench with the admin token alone: %v\n%s", err, out)
	}
	t.Setenv("LEASELOG_WORKER_TOKEN", "wb-worker-token-0123456789")
	out, err = run(t, "bench", "--server", d.url, "--jobs", "100", "--workers", "4", "--worker-id", "wb", "-o", "json")
	if err != nil || !strings.Contains(out, `"checked":true`) {
		t.Fatalf("bench with a worker token: %v\n%s", err, out)
	}
	c, err := api.NewClient(d.url, "admin-token-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	if js, err := c.Jobs(context.Background(), "", ""); err != nil || len(js) != 100 {
		t.Fatalf("%d jobs (%v), want the 100 of the second run only", len(js), err)
	}
}

// failingStart is a worker client whose start of one job fails.
type failingStart struct {
	faultyWorker
	fail string // the job whose start fails
}

func (w *failingStart) Start(ctx context.Context, worker string, lease uint64) (api.Lease, error) {
	w.mu.Lock()
	job := w.jobs[lease]
	w.mu.Unlock()
	if job == w.fail {
		return api.Lease{}, &api.Error{Status: 503, Code: api.CodeUnavailable, Message: "injected"}
	}
	return w.benchWorker.Start(ctx, worker, lease)
}

// TestBenchFailedRunCleansUp: a call that fails stops the run with its error;
// the leases the run holds are reported failed and its jobs left queued are
// cancelled, so that the next run finds none queued.
func TestBenchFailedRunCleansUp(t *testing.T) {
	d := startServeConfig(t, t.TempDir(), benchConfig)
	b := &bench{admin: d.c, jobs: 200, workers: 2, enqueuers: 2, heartbeats: 1, prefix: "bench-" + ulid.Make().String()}
	b.worker = &failingStart{faultyWorker: faultyWorker{benchWorker: d.c, jobs: map[uint64]string{}}, fail: b.jobID(5)}
	_, err := b.run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "injected") || !strings.Contains(err.Error(), "cancelled the run's") {
		t.Fatalf("run: %v", err)
	}
	for _, state := range []string{"queued", "acquired", "running"} {
		if js, err := d.c.Jobs(context.Background(), state, ""); err != nil || len(js) != 0 {
			t.Errorf("%d jobs %s (%v)", len(js), state, err)
		}
	}
	out, err := run(t, "bench", "--server", d.url, "--jobs", "20", "--workers", "2", "-o", "json")
	if err != nil || !strings.Contains(out, `"checked":true`) {
		t.Fatalf("the next run: %v\n%s", err, out)
	}
}
