package projection_test

import (
	"runtime"
	"testing"

	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/synth"
	"github.com/leaselog/leaselog/projection"
)

// BenchmarkMemory measures the heap the lease table holds: per live lease
// (jobs acquired and running, as a busy daemon holds them), and per job of
// history (finished jobs, which the table keeps for their stored answers).
// The figure is the live heap after a GC, with the events themselves freed.
//
//	go test -run '^$' -bench BenchmarkMemory ./projection
func BenchmarkMemory(b *testing.B) {
	for _, tc := range []struct {
		name          string
		history, live int
		per           int
		unit          string
	}{
		{"live=100000", 0, 100_000, 100_000, "bytes/live-lease"},
		{"jobs=1000000", 8_000_000, 0, 1_000_000, "bytes/finished-job"},
	} {
		b.Run(tc.name, func(b *testing.B) {
			shape := synth.Default
			shape.Live = tc.live
			for i := 0; i < b.N; i++ {
				before := heap()
				t := projection.New()
				err := shape.Events(1, tc.history, func(batch []eventlog.Event) error {
					for j := range batch {
						if err := t.Apply(&batch[j]); err != nil {
							return err
						}
					}
					return nil
				})
				if err != nil {
					b.Fatal(err)
				}
				after := heap()
				runtime.KeepAlive(t)
				b.ReportMetric(float64(after-before)/float64(tc.per), tc.unit)
				b.ReportMetric(float64(after-before)/(1<<20), "heap-MB")
			}
		})
	}
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
