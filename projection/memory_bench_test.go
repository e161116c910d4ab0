package projection_test

import (
	"runtime"
	"testing"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/testkit/synth"
	"github.com/leaselog/leaselog/projection"
)

// BenchmarkMemory measures the heap the lease table holds: per live lease
// (jobs acquired and running, as a busy daemon holds them), and per job of
// history (jobs that ended), in the daemon's mode (record: ended jobs leave
// for the archive) and in the mode of an offline fold (keep: they stay).
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
		for _, mode := range []struct {
			name string
			m    projection.RetireMode
		}{{"record", projection.RetireRecord}, {"keep", projection.RetireKeep}} {
			b.Run(tc.name+"/mode="+mode.name, func(b *testing.B) {
				memory(b, tc.history, tc.live, tc.per, tc.unit, mode.m)
			})
		}
	}
}

func memory(b *testing.B, history, live, per int, unit string, mode projection.RetireMode) {
	shape := synth.Default
	shape.Live = live
	for i := 0; i < b.N; i++ {
		before := heap()
		t := projection.New()
		t.SetRetire(mode)
		err := shape.Events(1, history, func(batch []event.Event) error {
			for j := range batch {
				if err := t.Apply(&batch[j]); err != nil {
					return err
				}
			}
			t.TakeRetired()
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		after := heap()
		runtime.KeepAlive(t)
		b.ReportMetric((float64(after)-float64(before))/float64(per), unit)
		b.ReportMetric((float64(after)-float64(before))/(1<<20), "heap-MB")
	}
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
