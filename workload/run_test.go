package workload

import (
	"context"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/server"
	"github.com/leaselog/leaselog/timing"
)

// daemon is a daemon's service on an in-memory store, with the Leases
// page's timing, behind the real HTTP API; it returns a client of it (the
// API is open) and its URL.
func daemon(t *testing.T) (*api.Client, string) {
	t.Helper()
	_, svc := leasetest.Open(t, leasetest.Config(timing.Default()))
	srv := server.New(svc, server.Options{Logger: zerolog.Nop()})
	ts := httptest.NewServer(srv)
	t.Cleanup(func() {
		srv.Close() // ends long polls and sessions, so that the listener can close
		ts.Close()
	})
	c, err := api.NewClient(ts.URL, "")
	if err != nil {
		t.Fatal(err)
	}
	return c, ts.URL
}

func config(admin Admin, worker Worker, jobs, workers, enqueuers, heartbeats int) Config {
	return Config{Admin: admin, Worker: worker, Jobs: jobs, Workers: workers, Enqueuers: enqueuers, Heartbeats: heartbeats,
		Prefix: "bench-" + ulid.Make().String(), HTTP: "http1"}
}

// TestRunProtocols runs the workload in each protocol on one daemon (each
// run after the first finds the history of the others): every job is
// reported exactly once, a job takes the calls its protocol says, and every
// operation is timed.
func TestRunProtocols(t *testing.T) {
	admin, url := daemon(t)
	sessions, err := api.NewClient(url, "", api.Session())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		protocol string
		calls    [2]float64 // calls a job: at least, below
	}{
		{"classic", [2]float64{7, 7.5}}, // 4 + H, and any long poll that found nothing
		{"start", [2]float64{6, 6.5}},
		{"start,next", [2]float64{4, 6.5}}, // 5 when no job was queued at a report
		{"http", [2]float64{4, 5.5}},
		{"session", [2]float64{4, 5.5}}, // http's calls, the workers' over sessions
		{"start,session", [2]float64{6, 6.5}},
	} {
		t.Run(p.protocol, func(t *testing.T) {
			proto, err := ParseProtocol(p.protocol, 100)
			if err != nil {
				t.Fatal(err)
			}
			var worker Worker = admin
			if proto.Session {
				worker = sessions
			}
			c := config(admin, worker, 300, 8, 3, 3)
			c.Protocol = proto
			var progressed atomic.Int64
			c.Progress = func(done, _ int64) { progressed.Store(done) }
			r, err := Run(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if r.Jobs != 300 || r.Workers != 8 || r.Enqueuers != 3 || r.Heartbeats != 3 || r.Protocol != p.protocol || r.Kind != Kind {
				t.Errorf("parameters: %+v", r)
			}
			if r.CallsPerJob < p.calls[0] || r.CallsPerJob >= p.calls[1] {
				t.Errorf("%v calls a job, want %v to %v", r.CallsPerJob, p.calls[0], p.calls[1])
			}
			if !r.Checked || r.Check != "300/300 jobs reported exactly once (succeeded), each with one accepted report; 0 stale reports" {
				t.Errorf("check: %v %q", r.Checked, r.Check)
			}
			if r.Seconds <= 0 || r.JobsPerSecond <= 0 {
				t.Errorf("throughput: %v s, %v jobs/s", r.Seconds, r.JobsPerSecond)
			}
			if n := progressed.Load(); n != 300 {
				t.Errorf("the last progress said %d jobs done, want 300", n)
			}
			for name, l := range map[string]Latency{"submit": r.Submit, "acquire": r.Acquire, "heartbeat": r.Heartbeat, "report": r.Report} {
				want := 300
				switch {
				case name == "heartbeat":
					want = 900
				case name == "submit" && proto.Batch > 0:
					want = 3 // 100 jobs a call
				case name == "acquire" && proto.Next:
					want = l.Count // those its reports carried have none
				}
				if l.Count != want || l.Count == 0 || l.P50 <= 0 || l.P50 > l.P90 || l.P90 > l.P99 || l.P99 > l.Max {
					t.Errorf("%s: %+v", name, l)
				}
			}
		})
	}
}

// TestParseProtocol: each name and list of parts reads as the protocol it
// names, and prints back as its shortest name; anything else is refused,
// naming what is accepted.
func TestParseProtocol(t *testing.T) {
	for _, c := range []struct {
		in, out string
		want    Protocol
	}{
		{"classic", "classic", Protocol{}},
		{"combined", "http", Protocol{Start: true, Next: true, Batch: 50}},
		{"http", "http", Protocol{Start: true, Next: true, Batch: 50}},
		{"session", "session", Protocol{Start: true, Next: true, Batch: 50, Session: true}},
		{"next,start", "start,next", Protocol{Start: true, Next: true}},
		{"batch,next,start", "http", Protocol{Start: true, Next: true, Batch: 50}},
		{"start,session", "start,session", Protocol{Start: true, Session: true}},
	} {
		p, err := ParseProtocol(c.in, 50)
		if err != nil || p != c.want || p.String() != c.out {
			t.Errorf("ParseProtocol(%q) = %+v (%q), %v; want %+v (%q)", c.in, p, p.String(), err, c.want, c.out)
		}
	}
	for _, in := range []string{"fast", "start,,next", ""} {
		if _, err := ParseProtocol(in, 50); err == nil || !strings.Contains(err.Error(), "want session, http, combined, classic, or a comma-separated list of start, next, batch, session") {
			t.Errorf("ParseProtocol(%q): %v", in, err)
		}
	}
}

// faultyWorker is a worker client that loses one job's report (it answers
// accepted without sending it) and sends another's twice.
type faultyWorker struct {
	Worker
	lose, twice string
	mu          sync.Mutex
	jobs        map[uint64]string // lease -> job
}

func (w *faultyWorker) Acquire(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error) {
	gs, err := w.Worker.Acquire(ctx, worker, max, wait)
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
		if _, err := w.Worker.Report(ctx, lease, r); err != nil {
			return api.ReportReply{}, err
		}
	}
	return w.Worker.Report(ctx, lease, r)
}

// TestCheckFindsALostReport: a job whose report never reached the daemon
// fails the check, which names it; one whose report was sent twice does not
// (the daemon answers the repeat as the first, and logs one
// lease.reported).
func TestCheckFindsALostReport(t *testing.T) {
	d, _ := daemon(t)
	c := config(d, nil, 40, 4, 2, 1)
	b := &bench{Config: c}
	c.Worker = &faultyWorker{Worker: d, lose: b.jobID(7), twice: b.jobID(21), jobs: map[uint64]string{}}
	r, err := Run(context.Background(), c)
	if r == nil {
		t.Fatalf("the run failed: %v", err)
	}
	// Job 7's report was "accepted" by the lying client, so the run counted
	// it: only the log read back shows that the daemon never had it.
	// Job 21's repeated report was answered as the first, and the log holds
	// one lease.reported: it passes.
	want := "check failed: 1 jobs with no lease.reported: " + b.jobID(7)
	if err == nil || err.Error() != want {
		t.Errorf("check: %v\nwant %q", err, want)
	}
	if r.Checked || r.Check != want {
		t.Errorf("result: checked %v, %q", r.Checked, r.Check)
	}
}

// TestCheckCounts: a job with two lease.reported events, one reported
// failed, a stale report, refused reports and lost heartbeats each fail the
// check; a clean run passes.
func TestCheckCounts(t *testing.T) {
	b := &bench{Config: Config{Jobs: 3, Prefix: "bench-x"}}
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
	return w.Worker.Start(ctx, worker, lease)
}

// TestFailedRunCleansUp: a call that fails stops the run with its error and
// no result; the leases the run holds are reported failed and its jobs left
// queued are cancelled, so that the next run finds none queued.
func TestFailedRunCleansUp(t *testing.T) {
	d, _ := daemon(t)
	ctx := context.Background()
	c := config(d, nil, 200, 2, 2, 1)
	b := &bench{Config: c}
	c.Worker = &failingStart{faultyWorker: faultyWorker{Worker: d, jobs: map[uint64]string{}}, fail: b.jobID(5)}
	r, err := Run(ctx, c)
	if r != nil || err == nil || !strings.Contains(err.Error(), "injected") || !strings.Contains(err.Error(), "cancelled the run's") {
		t.Fatalf("run: %+v, %v", r, err)
	}
	for _, state := range []string{"queued", "acquired", "running"} {
		if js, err := d.Jobs(ctx, state, ""); err != nil || len(js) != 0 {
			t.Errorf("%d jobs %s (%v)", len(js), state, err)
		}
	}
	if r, err := Run(ctx, config(d, d, 20, 2, 2, 1)); err != nil || !r.Checked {
		t.Fatalf("the next run: %+v, %v", r, err)
	}
}

// TestRunRefusesAQueue: a daemon with jobs queued by others is refused
// before anything is written, for its workers would take them.
func TestRunRefusesAQueue(t *testing.T) {
	d, _ := daemon(t)
	ctx := context.Background()
	if _, _, err := d.Submit(ctx, api.Submit{ID: "other", Kind: "run", Spec: []byte(`{"run":"true"}`)}); err != nil {
		t.Fatal(err)
	}
	r, err := Run(ctx, config(d, d, 10, 1, 1, 0))
	if r != nil || err == nil || !strings.Contains(err.Error(), "the daemon has 1 queued jobs (other first)") {
		t.Fatalf("run: %+v, %v", r, err)
	}
	if js, err := d.Jobs(ctx, "", ""); err != nil || len(js) != 1 {
		t.Fatalf("%d jobs (%v), want the other one alone", len(js), err)
	}
}
