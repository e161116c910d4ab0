package lease_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/projection"
)

// An unreachable worker's long poll that finds no job records
// worker.reachable and must still wake for the next job queued: the poll
// waits on the queue's signal whether or not its first try recorded
// something.
func TestAcquireWaitWakesAfterRecordingReachable(t *testing.T) {
	f := newFixture(t)
	_, _, err := f.svc.Submit(ctx, "r1", event.KindRun, nil)
	f.must(err)
	gs, err := f.svc.Acquire(ctx, "w1", 1)
	f.must(err)
	if len(gs) != 1 {
		t.Fatalf("acquire got %d grants, want 1", len(gs))
	}
	// Silent past grace, a second at a time so the daemon is never absent.
	for range 6 {
		f.clock.Advance(time.Second)
		f.must(f.svc.Sweep())
	}
	if !f.unreachable("w1") {
		t.Fatal("w1 is not unreachable after 6 s of silence (grace 5 s): the test tests nothing")
	}

	pollCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	got := make(chan []lease.Grant, 1)
	go func() {
		gs, err := f.svc.AcquireWait(pollCtx, "w1", 1)
		if err != nil {
			t.Error(err)
		}
		got <- gs
	}()
	// The poll's first try has run once it recorded worker.reachable.
	for f.unreachable("w1") {
		runtime.Gosched()
	}
	_, _, err = f.svc.Submit(ctx, "r2", event.KindRun, nil)
	f.must(err)
	gs = <-got
	if len(gs) != 1 || gs[0].Job.ID != "r2" {
		t.Fatalf("the long poll got %v (context: %v), want the grant of r2 as soon as it was queued", gs, pollCtx.Err())
	}
}

func (f *fixture) unreachable(worker string) bool {
	f.t.Helper()
	var un bool
	f.must(f.svc.View(ctx, func(t *projection.Table) {
		w, ok := t.Worker(worker)
		un = ok && w.Unreachable
	}))
	return un
}

// An acquire whose caller went (its context done: the connection closed,
// the stream reset, the session ended) is granted nothing, whichever way
// it acquires: the job stays queued, no lease is acquired for it, and the
// next worker that asks gets it at once. A report whose caller went is
// recorded all the same; only its next acquire is not made.
func TestGoneCallerIsGrantedNothing(t *testing.T) {
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		// acquire makes w1's call whose caller went; j1 is queued.
		acquire func(f *fixture) ([]lease.Grant, error)
	}{
		{"acquire", func(f *fixture) ([]lease.Grant, error) { return f.svc.Acquire(gone, "w1", 1) }},
		{"long poll", func(f *fixture) ([]lease.Grant, error) { return f.svc.AcquireWait(gone, "w1", 1) }},
		{"report's next", func(f *fixture) ([]lease.Grant, error) {
			ls, err := f.svc.Leases(ctx, projection.LeaseFilter{Worker: "w1"})
			f.must(err)
			a, next, err := f.svc.ReportNext(gone, "w1", ls[0].ID, lease.Report{Outcome: event.OutcomeSucceeded}, lease.AcquireOptions{Max: 1})
			if err == nil && a.Seq == 0 {
				t.Errorf("the report whose caller went was not recorded: %+v", a)
			}
			return next, err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			_, _, err := f.svc.Submit(ctx, "first", event.KindRun, nil)
			f.must(err)
			_, err = f.svc.Acquire(ctx, "w1", 1) // a lease for the report to end
			f.must(err)
			_, _, err = f.svc.Submit(ctx, "j1", event.KindRun, nil)
			f.must(err)
			gs, err := tc.acquire(f)
			f.must(err)
			if len(gs) != 0 {
				t.Fatalf("a caller that went was granted %v", gs)
			}
			j, err := f.svc.Job(ctx, "j1")
			f.must(err)
			if j.State != fsm.Queued || j.Lease != 0 || j.Leases != 0 {
				t.Fatalf("j1 after the gone caller's acquire: %s, lease %d; want queued, none ever", j.State, j.Lease)
			}
			gs, err = f.svc.Acquire(ctx, "w2", 1)
			f.must(err)
			if len(gs) != 1 || gs[0].Job.ID != "j1" {
				t.Fatalf("w2's acquire after: %v, want j1", gs)
			}
		})
	}
}
