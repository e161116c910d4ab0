package projection_test

import (
	"runtime"
	"testing"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/testkit/synth"
	"github.com/leaselog/leaselog/projection"
)

// BenchmarkFold folds a synthetic log held in memory (no storage, no decode):
// the cost of Apply alone, per event, and its heap allocations per event, in
// the mode a restart folds the tail (drop: ended jobs are in the archive
// already), the daemon's (record: ended jobs encoded for the archive) and an
// offline fold's (keep). A job costs one allocation, its id and spec; the
// rest is amortised: slabs of records, buffers and map growth.
func BenchmarkFold(b *testing.B) {
	const events = 200_000
	var evs []event.Event
	if err := synth.Default.Events(1, events, func(batch []event.Event) error {
		for i := range batch {
			evs = append(evs, batch[i].Clone())
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	for _, mode := range []struct {
		name string
		m    projection.RetireMode
	}{{"drop", projection.RetireDrop}, {"record", projection.RetireRecord}, {"keep", projection.RetireKeep}} {
		b.Run("mode="+mode.name, func(b *testing.B) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t := projection.New()
				t.SetRetire(mode.m)
				for j := range evs {
					if err := t.Apply(&evs[j]); err != nil {
						b.Fatal(err)
					}
					if j%64 == 63 {
						t.TakeRetired()
					}
				}
			}
			b.StopTimer()
			runtime.ReadMemStats(&after)
			total := float64(b.N) * float64(len(evs))
			b.ReportMetric(b.Elapsed().Seconds()*1e9/total, "ns/event")
			b.ReportMetric(float64(after.Mallocs-before.Mallocs)/total, "allocs/event")
		})
	}
}
