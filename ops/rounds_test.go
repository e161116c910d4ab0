package ops_test

import (
	"context"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/ops"
	"github.com/leaselog/leaselog/worker"
)

// Both of the worker's Daemons save round trips, and take heartbeats'
// details (the local worker's jobs' progress goes through ops.Daemon).
var (
	_ worker.Rounder  = (*api.Client)(nil)
	_ worker.Rounder  = (*ops.Daemon)(nil)
	_ worker.Daemon   = (*ops.Daemon)(nil)
	_ worker.Detailer = (*api.Client)(nil)
	_ worker.Detailer = (*ops.Daemon)(nil)
)

// TestInProcessRounds: the adapter saves round trips as the server does (the
// local worker relies on it): grants that come running, a report that takes
// the next job, no next in a repeated answer, and a stale report's seq.
func TestInProcessRounds(t *testing.T) {
	_, svc := leasetest.Open(t)
	d, ok := worker.Daemon(ops.NewDaemon(svc)).(interface {
		worker.Rounder
		AcquireStart(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error)
	})
	if !ok {
		t.Fatal("the in-process adapter is no worker.Rounder, or has no AcquireStart")
	}
	ctx := context.Background()
	for _, id := range []string{"j1", "j2"} {
		if _, _, err := svc.Submit(ctx, id, event.KindRun, nil); err != nil {
			t.Fatal(err)
		}
	}
	gs, err := d.AcquireStart(ctx, "w1", 1, 0)
	if err != nil || len(gs) != 1 || !worker.Running(gs[0]) {
		t.Fatalf("acquire with start: %+v %v", gs, err)
	}
	r := api.Report{Worker: "w1", Outcome: "succeeded"}
	rr, err := d.ReportNext(ctx, gs[0].Lease, r, api.Next{Max: 1, Start: true})
	if err != nil || rr.Next == nil || len(rr.Next.Leases) != 1 || !worker.Running(rr.Next.Leases[0]) || rr.Next.Leases[0].Job.ID != "j2" {
		t.Fatalf("report with next: %+v %v", rr, err)
	}
	again, err := d.ReportNext(ctx, gs[0].Lease, r, api.Next{Max: 1, Start: true})
	if err != nil || again.Next != nil || again.Seq != rr.Seq {
		t.Fatalf("the same report again: %+v %v, want the first answer without next", again, err)
	}
	// Report with Next set is the same call.
	rr2, err := ops.NewDaemon(svc).Report(ctx, rr.Next.Leases[0].Lease, api.Report{Worker: "w1", Outcome: "failed", Next: &api.Next{}})
	if err != nil || rr2.Next == nil || len(rr2.Next.Leases) != 0 {
		t.Fatalf("report carrying next, nothing queued: %+v %v", rr2, err)
	}
}
