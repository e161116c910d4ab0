package lease_test

import (
	"fmt"
	"testing"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
)

// BenchmarkAcquire measures one acquire of one job, its lease.acquired
// committed (to an in-memory store), with 100,000 jobs queued: queue=fifo,
// every job alike (one class, priority 0: the queue as it was before
// routing), and queue=routed, the jobs across 100 label sets and 4
// priorities, each acquire by a worker offering one of the sets. A fixed
// count keeps the queue near 100,000 (docs/performance.md has the figures):
//
//	go test -run '^$' -bench BenchmarkAcquire -benchtime 20000x -count 6 ./lease
func BenchmarkAcquire(b *testing.B) {
	for _, tc := range []struct {
		name        string
		sets, prios int
	}{{"fifo", 1, 1}, {"routed", 100, 4}} {
		b.Run("queue="+tc.name, func(b *testing.B) {
			_, svc := leasetest.Open(b)
			sets := make([]event.Labels, tc.sets)
			for s := range sets {
				if tc.sets > 1 {
					sets[s] = event.MustLabels(map[string]string{"pool": fmt.Sprintf("p%02d", s), "zone": "eu"})
				}
			}
			items := make([]lease.SubmitItem, 0, lease.MaxSubmitBatch)
			for i := range 100_000 {
				items = append(items, lease.SubmitItem{ID: fmt.Sprintf("j%06d", i), Kind: event.KindEvaluation,
					Labels: sets[i%tc.sets], Priority: (i / tc.sets) % tc.prios})
				if len(items) == cap(items) {
					res, err := svc.SubmitBatch(ctx, items)
					if err != nil || res[0].Err != nil {
						b.Fatal(err, res[0].Err)
					}
					items = items[:0]
				}
			}
			b.ResetTimer()
			for i := range b.N {
				gs, err := svc.AcquireWith(ctx, "w", lease.AcquireOptions{Max: 1, Labels: sets[i%tc.sets]})
				if err != nil || len(gs) != 1 {
					b.Fatalf("acquire %d: %v, %v", i, gs, err)
				}
			}
		})
	}
}
