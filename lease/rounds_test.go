package lease_test

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
)

// types is what the events after seq were, in order, each with its job.
func (f *fixture) typesAfter(seq uint64) []string {
	f.t.Helper()
	var out []string
	for _, e := range eventsAfter(f.t, f.log, seq) {
		s := e.Type.String()
		if e.Job != "" {
			s += " " + e.Job
		}
		out = append(out, s)
	}
	return out
}

func (f *fixture) submit(ids ...string) {
	f.t.Helper()
	for _, id := range ids {
		_, _, err := f.svc.Submit(ctx, id, event.KindRun, nil)
		f.must(err)
	}
}

func wantTypes(t *testing.T, what string, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("%s recorded %q, want %q", what, got, want)
	}
}

func TestAcquireStart(t *testing.T) {
	f := newFixture(t)
	f.submit("r1", "r2", "r3")
	before := f.log.LastSeq()
	gs, err := f.svc.AcquireWith(ctx, "w1", lease.AcquireOptions{Max: 2, Start: true})
	f.must(err)
	if len(gs) != 2 || gs[0].Job.ID != "r1" || gs[1].Job.ID != "r2" {
		t.Fatalf("grants %+v, want r1 and r2", gs)
	}
	evs := eventsAfter(t, f.log, before)
	wantTypes(t, "acquire with start", f.typesAfter(before), "lease.acquired r1", "lease.running r1", "lease.acquired r2", "lease.running r2")
	for i, g := range gs {
		if g.Job.State != fsm.Running || evs[2*i].Lease != g.Lease || evs[2*i+1].Lease != g.Lease || g.Lease != evs[2*i].Seq {
			t.Fatalf("grant %d: job %s, lease %d; events %v", i, g.Job.State, g.Lease, evs)
		}
		l, err := f.svc.Lease(ctx, g.Lease)
		f.must(err)
		if l.State != fsm.Running || l.Worker != "w1" {
			t.Fatalf("lease %d is %s of %s, want running of w1", g.Lease, l.State, l.Worker)
		}
		// Start after it is a read, as after a Start.
		seq := f.log.LastSeq()
		if _, err := f.svc.Start(ctx, "w1", g.Lease); err != nil || f.log.LastSeq() != seq {
			t.Fatalf("start of a started lease: %v, recorded %d events", err, f.log.LastSeq()-seq)
		}
	}
	// The long poll starts what it waits for too.
	gs, err = f.svc.AcquireWaitWith(ctx, "w2", lease.AcquireOptions{Max: 5, Start: true})
	f.must(err)
	if len(gs) != 1 || gs[0].Job.ID != "r3" || gs[0].Job.State != fsm.Running {
		t.Fatalf("long poll with start got %+v", gs)
	}
}

// An acquire that starts obeys the acquire's rules: they are the only ones
// a lease it grants this instant could fail (it is live, and the worker's).
func TestAcquireStartRefusedAsAcquire(t *testing.T) {
	f := newFixture(t)
	f.submit("r1")
	for _, c := range []struct {
		worker string
		max    int
		want   error
	}{
		{"", 1, lease.ErrInvalid},
		{"w/1", 1, lease.ErrInvalid},
		{"w1", 0, lease.ErrInvalid},
		{"w1", lease.MaxAcquire + 1, lease.ErrInvalid},
	} {
		before := f.log.LastSeq()
		_, err := f.svc.AcquireWith(ctx, c.worker, lease.AcquireOptions{Max: c.max, Start: true})
		_, plain := f.svc.Acquire(ctx, c.worker, c.max)
		if !errors.Is(err, c.want) || !errors.Is(plain, c.want) || f.log.LastSeq() != before {
			t.Errorf("worker %q max %d: %v (plain acquire: %v), want %v, recording nothing", c.worker, c.max, err, plain, c.want)
		}
	}
	// An unreachable worker is reachable again first.
	_, err := f.svc.Acquire(ctx, "w0", 1)
	f.must(err)
	for range 6 {
		f.clock.Advance(time.Second)
		f.must(f.svc.Sweep())
	}
	if !f.unreachable("w0") {
		t.Fatal("w0 is not unreachable: the test tests nothing")
	}
	f.submit("r2")
	before := f.log.LastSeq()
	_, err = f.svc.AcquireWith(ctx, "w0", lease.AcquireOptions{Max: 1, Start: true})
	f.must(err)
	wantTypes(t, "acquire with start of an unreachable worker", f.typesAfter(before), "worker.reachable", "lease.acquired r2", "lease.running r2")
	f.must(f.svc.Stop(ctx, lease.CancelQueued))
	if _, err := f.svc.AcquireWith(ctx, "w1", lease.AcquireOptions{Max: 1, Start: true}); !errors.Is(err, lease.ErrStopping) {
		t.Fatalf("acquire with start while stopping: %v, want ErrStopping", err)
	}
}

func TestReportNext(t *testing.T) {
	f := newFixture(t)
	f.submit("r1", "r2", "r3")
	gs, err := f.svc.AcquireWith(ctx, "w1", lease.AcquireOptions{Max: 1, Start: true})
	f.must(err)
	done := lease.Report{Outcome: event.OutcomeSucceeded, Ref: "refs/a"}
	before := f.log.LastSeq()
	a, next, err := f.svc.ReportNext(ctx, "w1", gs[0].Lease, done, lease.AcquireOptions{Max: 1, Start: true})
	f.must(err)
	wantTypes(t, "report with next", f.typesAfter(before), "lease.reported r1", "lease.acquired r2", "lease.running r2")
	if a.Seq != before+1 || a.Job != "r1" || len(next) != 1 || next[0].Job.ID != "r2" || next[0].Job.State != fsm.Running {
		t.Fatalf("answer %+v, grants %+v", a, next)
	}
	// The same report again: the first answer, and no acquire.
	before = f.log.LastSeq()
	again, next2, err := f.svc.ReportNext(ctx, "w1", gs[0].Lease, done, lease.AcquireOptions{Max: 1, Start: true})
	if err != nil || again != a || next2 != nil || f.log.LastSeq() != before {
		t.Fatalf("repeated report: %+v %v %v, recorded %d events; want the first answer, no grants (nil), nothing recorded", again, next2, err, f.log.LastSeq()-before)
	}
	// Refused reports acquire nothing, and record what Report records.
	for _, c := range []struct {
		worker string
		lease  uint64
		want   error
	}{
		{"w2", next[0].Lease, lease.ErrWrongWorker},
		{"w1", 999, lease.ErrNotFound},
	} {
		before := f.log.LastSeq()
		_, gs, err := f.svc.ReportNext(ctx, c.worker, c.lease, done, lease.AcquireOptions{Max: 1})
		if !errors.Is(err, c.want) || gs != nil || f.log.LastSeq() != before {
			t.Errorf("report of %s on %d: %v, grants %v; want %v, recording nothing", c.worker, c.lease, err, gs, c.want)
		}
	}
	before = f.log.LastSeq()
	if _, _, err := f.svc.ReportNext(ctx, "w1", next[0].Lease, done, lease.AcquireOptions{Max: 0}); !errors.Is(err, lease.ErrInvalid) || f.log.LastSeq() != before {
		t.Fatalf("next max 0: %v, want ErrInvalid, recording nothing", err)
	}
	// Expired: the stale report is kept, as by Report, and acquires nothing.
	for range 17 { // a second at a time: present all along
		f.clock.Advance(time.Second)
		f.must(f.svc.Sweep())
	}
	before = f.log.LastSeq()
	a, gs, err = f.svc.ReportNext(ctx, "w1", next[0].Lease, done, lease.AcquireOptions{Max: 1, Start: true})
	if !errors.Is(err, lease.ErrStaleLease) || !a.Stale || gs != nil {
		t.Fatalf("stale report with next: %+v %v %v", a, gs, err)
	}
	wantTypes(t, "stale report with next", f.typesAfter(before), "lease.stale_report r2")
}

// A report with next names the acquire's worker: the report's. A stopping
// daemon takes the report and grants nothing; an evaluation reported lost
// goes back to the queue, and not to the worker that lost it in the same
// call.
func TestReportNextStoppingAndLost(t *testing.T) {
	f := newFixture(t)
	_, _, err := f.svc.Submit(ctx, "e1", event.KindEvaluation, nil)
	f.must(err)
	gs, err := f.svc.Acquire(ctx, "w1", 1)
	f.must(err)
	before := f.log.LastSeq()
	_, next, err := f.svc.ReportNext(ctx, "w1", gs[0].Lease, lease.Report{Outcome: event.OutcomeLost}, lease.AcquireOptions{Max: 1})
	f.must(err)
	wantTypes(t, "lost report with next", f.typesAfter(before), "lease.lost e1", "lease.queued e1")
	if next == nil || len(next) != 0 {
		t.Fatalf("grants %v, want none (empty, not nil: the acquire was made)", next)
	}
	gs, err = f.svc.Acquire(ctx, "w1", 1)
	f.must(err)
	f.submit("r1")
	f.must(f.svc.Stop(ctx, lease.CancelQueued))
	before = f.log.LastSeq()
	a, next, err := f.svc.ReportNext(ctx, "w1", gs[0].Lease, lease.Report{Outcome: event.OutcomeFailed}, lease.AcquireOptions{Max: 1})
	f.must(err)
	if next == nil || len(next) != 0 || a.Seq != before+1 {
		t.Fatalf("report with next while stopping: %+v, grants %v", a, next)
	}
	wantTypes(t, "report with next while stopping", f.typesAfter(before), "lease.reported e1")
}

func TestSubmitBatch(t *testing.T) {
	f := newFixture(t)
	_, _, err := f.svc.Submit(ctx, "old", event.KindRun, []byte(`{"a":1}`))
	f.must(err)
	items := []lease.SubmitItem{
		{ID: "j1", Kind: event.KindRun},
		{ID: "bad id", Kind: event.KindRun},
		{ID: "j2", Kind: event.KindEvaluation, Spec: []byte(`{"b": 2, "a": 1}`)},
		{ID: "j3", Kind: 0},
		{ID: "j4", Kind: event.KindRun, Spec: []byte(`[1]`)},
		{ID: "old", Kind: event.KindRun, Spec: []byte(`{"a": 1}`)},
		{ID: "old", Kind: event.KindEvaluation},
		{ID: "j1", Kind: event.KindRun},
		{ID: "j2", Kind: event.KindRun},
		{ID: "j5", Kind: event.KindRun},
	}
	before := f.log.LastSeq()
	out, err := f.svc.SubmitBatch(ctx, items)
	f.must(err)
	wantTypes(t, "batch", f.typesAfter(before), "lease.queued j1", "lease.queued j2", "lease.queued j5")
	want := []struct {
		created bool
		err     error
	}{{true, nil}, {false, lease.ErrInvalid}, {true, nil}, {false, lease.ErrInvalid}, {false, lease.ErrInvalid},
		{false, nil}, {false, lease.ErrJobExists}, {false, nil}, {false, lease.ErrJobExists}, {true, nil}}
	for i, w := range want {
		o := out[i]
		if o.Created != w.created || !errors.Is(o.Err, w.err) || (w.err != nil) != (o.Err != nil) {
			t.Errorf("item %d (%s): created %v, error %v; want %v, %v", i, items[i].ID, o.Created, o.Err, w.created, w.err)
		}
		if o.Err == nil && (o.ID != items[i].ID || o.State != fsm.Queued) {
			t.Errorf("item %d: job %+v", i, o.Job)
		}
	}
	if string(out[2].Spec) != `{"a":1,"b":2}` {
		t.Errorf("spec stored %s, want it canonical", out[2].Spec)
	}
	// The batch again: every job exists, nothing is recorded.
	before = f.log.LastSeq()
	again, err := f.svc.SubmitBatch(ctx, items)
	f.must(err)
	for i, o := range again {
		if o.Created {
			t.Errorf("item %d created again", i)
		}
	}
	if f.log.LastSeq() != before {
		t.Fatalf("the same batch again recorded %d events", f.log.LastSeq()-before)
	}
	// An ended job is answered from the archive, with the same rule.
	gs, err := f.svc.Acquire(ctx, "w1", 1)
	f.must(err)
	_, err = f.svc.Report(ctx, "w1", gs[0].Lease, lease.Report{Outcome: event.OutcomeSucceeded})
	f.must(err)
	out, err = f.svc.SubmitBatch(ctx, []lease.SubmitItem{{ID: "old", Kind: event.KindRun, Spec: []byte(`{"a":1}`)}, {ID: "old", Kind: event.KindRun}})
	f.must(err)
	if out[0].Err != nil || out[0].State != fsm.Reported || !errors.Is(out[1].Err, lease.ErrJobExists) {
		t.Fatalf("batch naming an ended job: %+v", out)
	}
}

func TestSubmitBatchLimits(t *testing.T) {
	f := newFixture(t)
	before := f.log.LastSeq()
	for _, n := range []int{0, lease.MaxSubmitBatch + 1} {
		items := make([]lease.SubmitItem, n)
		for i := range items {
			items[i] = lease.SubmitItem{ID: fmt.Sprintf("j%d", i), Kind: event.KindRun}
		}
		_, err := f.svc.SubmitBatch(ctx, items)
		if !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), "1 to 1000 jobs") {
			t.Errorf("batch of %d: %v, want ErrInvalid naming the limit", n, err)
		}
	}
	if f.log.LastSeq() != before {
		t.Fatal("a refused batch recorded events")
	}
	items := make([]lease.SubmitItem, lease.MaxSubmitBatch)
	for i := range items {
		items[i] = lease.SubmitItem{ID: fmt.Sprintf("j%d", i), Kind: event.KindRun}
	}
	out, err := f.svc.SubmitBatch(ctx, items)
	f.must(err)
	if len(out) != lease.MaxSubmitBatch || f.log.LastSeq() != before+lease.MaxSubmitBatch {
		t.Fatalf("a full batch: %d answers, %d events", len(out), f.log.LastSeq()-before)
	}
	// Stopping: new jobs are refused one by one; known ones answered.
	f.must(f.svc.Stop(ctx, lease.CancelQueued))
	out, err = f.svc.SubmitBatch(ctx, []lease.SubmitItem{{ID: "j0", Kind: event.KindRun}, {ID: "new", Kind: event.KindRun}})
	f.must(err)
	if out[0].Err != nil || !errors.Is(out[1].Err, lease.ErrStopping) {
		t.Fatalf("batch while stopping: %+v", out)
	}
}

// TestRoundsCommitOnce: each combined call is one commit of the log — one
// batch, one fsync — however many events it writes.
func TestRoundsCommitOnce(t *testing.T) {
	var commits atomic.Int64
	_, svc := leasetest.Open(t, leasetest.Clock(clocktest.New(clocktest.Epoch)),
		leasetest.Store(func(o *eventlog.Options) { o.OnCommit = func(time.Duration) { commits.Add(1) } }))
	once := func(what string, f func() error) {
		t.Helper()
		before := commits.Load()
		if err := f(); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if n := commits.Load() - before; n != 1 {
			t.Fatalf("%s: %d commits, want 1", what, n)
		}
	}
	once("a batch of three", func() error {
		_, err := svc.SubmitBatch(ctx, []lease.SubmitItem{{ID: "j1", Kind: event.KindRun}, {ID: "j2", Kind: event.KindRun}, {ID: "j3", Kind: event.KindRun}})
		return err
	})
	var gs []lease.Grant
	once("an acquire of two, started", func() (err error) {
		gs, err = svc.AcquireWith(ctx, "w1", lease.AcquireOptions{Max: 2, Start: true})
		return err
	})
	once("a report taking the next, started", func() error {
		_, next, err := svc.ReportNext(ctx, "w1", gs[0].Lease, lease.Report{Outcome: event.OutcomeSucceeded}, lease.AcquireOptions{Max: 1, Start: true})
		if err == nil && len(next) != 1 {
			err = fmt.Errorf("grants %v", next)
		}
		return err
	})
}

// TestSubmitBatchAllocates: a batch of 1,000 new jobs that share a spec
// allocates under 1,700 bytes a job (it was over 3,500): the spec is made
// canonical once, and the events are gathered in one slice made to size.
// The least of three batches is taken: Pebble's own goroutines allocate
// beside them (the WAL's blocks, when its writer lags).
func TestSubmitBatchAllocates(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector empties Pebble's pools at random: the bytes allocated are not the copies made")
	}
	_, svc := leasetest.Open(t, leasetest.Disk(t.TempDir()))
	batch := func(from int) []lease.SubmitItem {
		items := make([]lease.SubmitItem, 0, lease.MaxSubmitBatch)
		for i := from; i < from+lease.MaxSubmitBatch; i++ {
			items = append(items, lease.SubmitItem{ID: fmt.Sprintf("job-%06d", i), Kind: event.KindRun, Spec: []byte(`{"run": "train", "args": ["--epochs", 3]}`)})
		}
		return items
	}
	for from := 0; from < 5*lease.MaxSubmitBatch; from += lease.MaxSubmitBatch { // warms the pools
		if _, err := svc.SubmitBatch(ctx, batch(from)); err != nil {
			t.Fatal(err)
		}
	}
	least := uint64(math.MaxUint64)
	for from := 5 * lease.MaxSubmitBatch; from < 8*lease.MaxSubmitBatch; from += lease.MaxSubmitBatch {
		items := batch(from)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		res, err := svc.SubmitBatch(ctx, items)
		runtime.ReadMemStats(&after)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil || !r.Created || string(r.Job.Spec) != `{"args":["--epochs",3],"run":"train"}` {
				t.Fatalf("submitted %+v, want a job created with the spec canonical", r)
			}
		}
		least = min(least, (after.TotalAlloc-before.TotalAlloc)/uint64(len(items)))
	}
	t.Logf("%d bytes a job", least)
	if least > 1700 {
		t.Errorf("a batch of %d jobs allocated %d bytes a job, want at most 1,700", lease.MaxSubmitBatch, least)
	}
}
