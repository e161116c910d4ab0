package lease_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/leaselog/leaselog/event"
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
