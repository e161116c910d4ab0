package projection_test

import (
	"fmt"
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

// BenchmarkQueueMemory measures the heap the lease table holds per queued
// job, 100,000 of them: queue=fifo, every job alike (as before routing), and
// queue=routed, the jobs across 100 label sets and 4 priorities.
//
//	go test -run '^$' -bench BenchmarkQueueMemory -count 6 ./projection
func BenchmarkQueueMemory(b *testing.B) {
	const n = 100_000
	for _, tc := range []struct {
		name        string
		sets, prios int
	}{{"fifo", 1, 1}, {"routed", 100, 4}} {
		b.Run("queue="+tc.name, func(b *testing.B) {
			sets := make([]event.Labels, tc.sets)
			for s := range sets {
				if tc.sets > 1 {
					sets[s] = event.MustLabels(map[string]string{"pool": fmt.Sprintf("p%02d", s), "zone": "eu"})
				}
			}
			for range b.N {
				before := heap()
				t := projection.New()
				for i := range n {
					e := event.Event{Seq: uint64(i + 1), Type: event.TypeQueued, Time: int64(i), Job: fmt.Sprintf("j%06d", i),
						Kind: event.KindEvaluation, Spec: []byte("{}"), Labels: sets[i%tc.sets], Priority: int32((i / tc.sets) % tc.prios)}
					if err := t.Apply(&e); err != nil {
						b.Fatal(err)
					}
				}
				after := heap()
				runtime.KeepAlive(t)
				b.ReportMetric((float64(after)-float64(before))/n, "bytes/queued-job")
			}
		})
	}
}
