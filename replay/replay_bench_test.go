package replay_test

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/synth"
	"github.com/leaselog/leaselog/replay"
)

// BenchmarkReplay rebuilds the lease table from a log of a million events
// (decode + fold, no snapshot) beside a raw Pebble scan of the same log that
// touches every key and value and decodes nothing.
//
//	go test -run '^$' -bench BenchmarkReplay -count 6 ./replay | tee r.txt
//	benchstat -col /impl r.txt
//
// Only eventlog imports Pebble in production; this benchmark does, for its
// baseline.
func BenchmarkReplay(b *testing.B) {
	const events = 1_000_000
	dir := b.TempDir()
	log, err := eventlog.Open(dir, eventlog.Options{Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	if err := synth.Default.Events(1, events, log.Append); err != nil {
		b.Fatal(err)
	}
	n := log.LastSeq()
	if err := log.Close(); err != nil {
		b.Fatal(err)
	}
	b.Run(fmt.Sprintf("events=%d/impl=leaselog", events), func(b *testing.B) {
		log, err := eventlog.Open(dir, eventlog.Options{ReadOnly: true, Logger: zerolog.Nop()})
		if err != nil {
			b.Fatal(err)
		}
		defer log.Close()
		measure(b, n, func() error {
			t, st, err := replay.Rebuild(log, zerolog.Nop())
			if err == nil && (t.Seq() != n || uint64(st.Events) != n) {
				err = fmt.Errorf("rebuilt to seq %d with %d events, want %d", t.Seq(), st.Events, n)
			}
			return err
		})
	})
	b.Run(fmt.Sprintf("events=%d/impl=raw", events), func(b *testing.B) {
		db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, FormatMajorVersion: pebble.FormatNewest, MemTableSize: 64 << 20, Logger: quiet{}})
		if err != nil {
			b.Fatal(err)
		}
		defer db.Close()
		measure(b, n, func() error {
			it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{'e'}, UpperBound: []byte{'f'}})
			if err != nil {
				return err
			}
			var count, bytes uint64
			for ok := it.First(); ok; ok = it.Next() {
				v, err := it.ValueAndErr()
				if err != nil {
					return err
				}
				count++
				bytes += uint64(len(it.Key()) + len(v))
			}
			if count != n || bytes == 0 {
				return fmt.Errorf("scanned %d events, want %d", count, n)
			}
			return it.Close()
		})
	})
}

// measure runs op b.N times and reports events per second and heap
// allocations per event.
func measure(b *testing.B, events uint64, op func() error) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	runtime.ReadMemStats(&after)
	total := float64(events) * float64(b.N)
	b.ReportMetric(total/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/total, "allocs/event")
}

type quiet struct{}

func (quiet) Infof(string, ...any)         {}
func (quiet) Errorf(string, ...any)        {}
func (quiet) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
