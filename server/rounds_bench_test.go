package server_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leaselog/leaselog/api"
)

// submitBatches submits jobs j0..j(n-1), taking ids from next, 100 a call.
func submitBatches(ctx context.Context, c *api.Client, next *atomic.Int64, n int64) error {
	const per = 100
	for {
		first := next.Add(per) - per
		if first >= n {
			return nil
		}
		jobs := make([]api.Submit, 0, per)
		for i := first; i < min(first+per, n); i++ {
			jobs = append(jobs, api.Submit{ID: fmt.Sprintf("j%d", i), Kind: "run"})
		}
		res, err := c.SubmitBatch(ctx, jobs)
		if err != nil {
			return err
		}
		for _, r := range res {
			if r.Status != 201 {
				return fmt.Errorf("batch submit of %s: %d %+v", r.ID, r.Status, r.Error)
			}
		}
	}
}

// lifecycleWorkerCombined is lifecycleWorker with the calls that save round
// trips: an acquire that starts its job when it holds none, then per job
// three heartbeats and a report that takes the next job, started.
func lifecycleWorkerCombined(ctx context.Context, c *api.Client, worker string, beats *[]time.Duration, mu *sync.Mutex, finished func() bool) error {
	var gs []api.Grant
	for {
		if len(gs) == 0 {
			var err error
			if gs, err = c.AcquireStart(ctx, worker, 1, time.Second); err != nil {
				return err
			}
			continue
		}
		g := gs[0]
		if err := beatThrice(ctx, c, worker, g.Lease, beats, mu); err != nil {
			return err
		}
		rr, err := c.ReportNext(ctx, g.Lease, api.Report{Worker: worker, Outcome: "succeeded"}, api.Next{Max: 1, Start: true})
		if err != nil {
			return err
		}
		if !finished() {
			return nil
		}
		gs = nil
		if rr.Next != nil {
			gs = rr.Next.Leases
		}
	}
}
