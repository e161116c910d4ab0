package worker

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
)

// roundsDaemon is a fakeDaemon that saves round trips (Rounder): a report
// takes the next grant from the queue (running, if asked so). With
// loseNext set, the first report that takes a grant loses its answer: the
// grant is the worker's on the daemon (its lease list has it), and the
// worker's retry is answered as a repeat, without Next.
type roundsDaemon struct {
	*fakeDaemon
	loseNext bool

	rmu      sync.Mutex
	acquires int        // Acquire calls
	plain    int        // Report calls without next
	nexts    []api.Next // the next of each ReportNext, in order
	answered map[uint64]bool
	gave     chan uint64 // leases a report handed out
}

func newRoundsDaemon() *roundsDaemon {
	return &roundsDaemon{fakeDaemon: newFakeDaemon(), answered: map[uint64]bool{}, gave: make(chan uint64, 16)}
}

func running(g api.Grant) api.Grant {
	g.Job.Lease = &api.Lease{Lease: g.Lease, Job: g.Job.ID, State: "running"}
	g.Job.State = "running"
	return g
}

func (d *roundsDaemon) Acquire(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error) {
	d.rmu.Lock()
	d.acquires++
	d.rmu.Unlock()
	return d.fakeDaemon.Acquire(ctx, worker, max, wait)
}

func (d *roundsDaemon) Report(ctx context.Context, id uint64, r api.Report) (api.ReportReply, error) {
	d.rmu.Lock()
	d.plain++
	d.rmu.Unlock()
	return d.fakeDaemon.Report(ctx, id, r)
}

func (d *roundsDaemon) ReportNext(ctx context.Context, id uint64, r api.Report, next api.Next) (api.ReportReply, error) {
	d.rmu.Lock()
	d.nexts = append(d.nexts, next)
	repeat := d.answered[id]
	d.answered[id] = true
	d.rmu.Unlock()
	reply, err := d.fakeDaemon.Report(ctx, id, r)
	if err != nil || repeat {
		return reply, err // a repeat acquires nothing: no Next
	}
	d.mu.Lock()
	n := min(next.Max, len(d.queue))
	gs := append([]api.Grant(nil), d.queue[:n]...)
	d.queue = d.queue[n:]
	for i := range gs {
		if next.Start {
			gs[i] = running(gs[i])
		}
		d.live = append(d.live, gs[i])
	}
	d.mu.Unlock()
	for _, g := range gs {
		d.gave <- g.Lease
	}
	d.rmu.Lock()
	lose := d.loseNext && len(gs) > 0
	d.loseNext = d.loseNext && !lose
	d.rmu.Unlock()
	if lose {
		return api.ReportReply{}, errors.New("connection reset by peer")
	}
	reply.Next = &api.Grants{Leases: gs}
	return reply, nil
}

// TestWorkerSavesRoundTrips: a worker whose daemon saves round trips takes
// its first job with an acquire, and every next one with the report of the
// job before; it says each job started once its executor started it.
func TestWorkerSavesRoundTrips(t *testing.T) {
	d, e := newRoundsDaemon(), newFakeExecutor()
	d.queue = []api.Grant{grant(3, "j1"), grant(4, "j2"), grant(5, "j3")}
	newTestWorker(t, d, e, nil, nextInReport)

	for i, want := range []uint64{3, 4, 5} {
		r := receive(t, e.started, "a job to start")
		if i > 0 {
			if got := receive(t, d.gave, "a report's grant"); got != want {
				t.Fatalf("the report handed out lease %d, want %d", got, want)
			}
		}
		r.finish(Outcome{Outcome: "succeeded"})
		receive(t, d.reports, "its report")
	}
	var starts []uint64 // each from its own goroutine: in any order
	for range 3 {
		starts = append(starts, receive(t, d.started, "a start call"))
	}
	if slices.Sort(starts); !slices.Equal(starts, []uint64{3, 4, 5}) {
		t.Fatalf("start calls for leases %v, want 3, 4 and 5", starts)
	}
	d.rmu.Lock()
	defer d.rmu.Unlock()
	if d.plain != 0 || d.acquires < 1 || len(d.nexts) != 3 {
		t.Fatalf("%d plain reports, %d acquires, %d reports with next", d.plain, d.acquires, len(d.nexts))
	}
	for _, n := range d.nexts {
		if n.Max != 1 || n.Start {
			t.Fatalf("a report asked for %+v, want the one slot it frees, not started", n)
		}
	}
}

// TestReportNextLostAnswerIsAdopted: the answer of a report that took the
// next job is lost; the report sent again is answered as a repeat, without
// Next, and the worker finds the grant it never heard of in its lease list
// and runs it once a heartbeat renews it.
func TestReportNextLostAnswerIsAdopted(t *testing.T) {
	d, e := newRoundsDaemon(), newFakeExecutor()
	d.loseNext = true
	d.queue = []api.Grant{grant(3, "j1"), grant(4, "j2")}
	w, _, _ := newTestWorker(t, d, e, nil, nextInReport)

	receive(t, e.started, "the first job").finish(Outcome{Outcome: "succeeded"})
	if got := receive(t, d.gave, "the report's grant, answer lost"); got != 4 {
		t.Fatalf("gave lease %d", got)
	}
	receive(t, d.reports, "the report")
	receive(t, e.started, "the orphan's job, adopted")
	e.mu.Lock()
	_, ran := e.runs[4]
	e.mu.Unlock()
	if !ran {
		t.Fatal("the job started is not lease 4's")
	}
	if l := w.Leases(); len(l) != 1 || l[0] != 4 {
		t.Fatalf("the worker holds %v, want the adopted lease 4", l)
	}
}

// TestNextAfter: a report asks for the slot its lease frees, and none while
// the worker is fenced or for a lease it does not hold.
func TestNextAfter(t *testing.T) {
	now := time.Unix(1000, 0)
	c := NewCore(2, ConfigOf(daemonTiming), now)
	h, ok := c.Take(running(grant(3, "j1")), now, now) // a grant that came running
	if !ok || !Running(h.Grant()) || Running(grant(3, "j1")) {
		t.Fatalf("take: %v; running %v", ok, Running(h.Grant()))
	}
	if n := c.NextAfter(h); n != 1 {
		t.Fatalf("next after a held lease: %d, want 1", n)
	}
	c.Fence(now.Add(time.Hour))
	if n := c.NextAfter(h); n != 0 || !c.Fenced() {
		t.Fatalf("next after, fenced: %d, want 0", n)
	}
	c2 := NewCore(1, ConfigOf(daemonTiming), now)
	if n := c2.NextAfter(h); n != 0 {
		t.Fatalf("next after a lease not held: %d, want 0", n)
	}
}

// oldDaemon refuses a report's next as a daemon from before it would: an
// unknown field.
type oldDaemon struct{ *roundsDaemon }

func (d oldDaemon) ReportNext(ctx context.Context, id uint64, r api.Report, next api.Next) (api.ReportReply, error) {
	d.rmu.Lock()
	d.nexts = append(d.nexts, next)
	d.rmu.Unlock()
	return api.ReportReply{}, &api.Error{Status: 400, Code: api.CodeBadRequest, Message: `body: json: unknown field "next"`}
}

// TestReportNextRefusedByAnOldDaemon: the worker reports without next to a
// daemon that refuses it, the report whole (not cut down as for a refused
// content), and takes jobs with its acquire loop from then on.
func TestReportNextRefusedByAnOldDaemon(t *testing.T) {
	d := oldDaemon{newRoundsDaemon()}
	e := newFakeExecutor()
	d.queue = []api.Grant{grant(3, "j1"), grant(4, "j2")}
	newTestWorker(t, d, e, nil, nextInReport)
	for range 2 {
		receive(t, e.started, "a job").finish(Outcome{Outcome: "succeeded", Ref: "refs/x"})
		if rep := receive(t, d.reports, "its report"); rep.Outcome != "succeeded" || rep.Ref != "refs/x" || rep.Next != nil {
			t.Fatalf("report %+v, want the whole report without next", rep)
		}
	}
	d.rmu.Lock()
	defer d.rmu.Unlock()
	if len(d.nexts) != 1 {
		t.Fatalf("%d reports with next, want the one refused", len(d.nexts))
	}
}

// TestReportNextRefusedReportKeepsNext: a daemon that takes next but refuses
// the report's content (400) is not taken for one that predates next: the
// probe without next is refused too, the report goes again cut down, with
// next, and the worker keeps saving round trips.
func TestReportNextRefusedReportKeepsNext(t *testing.T) {
	d := newRoundsDaemon()
	e := newFakeExecutor()
	bad := &api.Error{Status: 400, Code: api.CodeBadRequest, Message: "result: too deep"}
	d.reportErr = []error{bad, bad} // the report with next, then the probe without
	d.queue = []api.Grant{grant(3, "j1"), grant(4, "j2")}
	w, _, _ := newTestWorker(t, d, e, nil, nextInReport)

	receive(t, e.started, "j1").finish(Outcome{Outcome: "succeeded", Ref: "refs/x", Result: []byte(`{"deep":1}`)})
	if rep := receive(t, d.reports, "j1's report"); rep.Result != nil {
		t.Fatalf("report %+v, want it sent again without its result", rep)
	}
	d.rmu.Lock()
	nexts, plain := len(d.nexts), d.plain
	d.rmu.Unlock()
	if nexts != 2 || plain != 1 {
		t.Fatalf("%d reports with next and %d without, want 2 (refused, then taken) and 1 (the probe)", nexts, plain)
	}
	if w.noNext.Load() {
		t.Fatal("the worker took a refused report for a daemon without next")
	}
	receive(t, e.started, "j2, granted by j1's report").finish(Outcome{Outcome: "succeeded"})
	receive(t, d.reports, "j2's report")
	d.rmu.Lock()
	defer d.rmu.Unlock()
	if len(d.nexts) != 3 {
		t.Fatalf("%d reports with next, want 3: j2's carries next too", len(d.nexts))
	}
}

// nextInReport runs a worker of one slot, which by default takes its next
// job in its reports.
func nextInReport(o *Options) { o.Capacity = 1 }

// TestNoNextInReport: told so, a worker whose daemon saves round trips
// takes every job with an acquire and reports without next.
func TestNoNextInReport(t *testing.T) {
	d, e := newRoundsDaemon(), newFakeExecutor()
	d.queue = []api.Grant{grant(3, "j1"), grant(4, "j2")}
	newTestWorker(t, d, e, nil, func(o *Options) { o.Capacity, o.NoNextInReport = 1, true })
	for range 2 {
		receive(t, e.started, "a job").finish(Outcome{Outcome: "succeeded"})
		receive(t, d.reports, "its report")
	}
	d.rmu.Lock()
	defer d.rmu.Unlock()
	if len(d.nexts) != 0 || d.acquires < 2 {
		t.Fatalf("%d reports with next and %d acquires, want none and one a job", len(d.nexts), d.acquires)
	}
}
