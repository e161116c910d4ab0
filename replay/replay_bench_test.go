package replay_test

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/synth"
	"github.com/leaselog/leaselog/replay"
)

// Only eventlog imports Pebble in production; these benchmarks do, for their
// raw baselines. The logs are synthetic (package synth), built once and kept
// in synth.Dir() between runs; the 10M-event sizes run only with
// LEASELOG_BENCH_LARGE=1 (`make bench-large`): building one takes minutes.

func sizes(small int, large ...int) []int {
	if os.Getenv("LEASELOG_BENCH_LARGE") == "" {
		return []int{small}
	}
	return append([]int{small}, large...)
}

func fixture(b *testing.B, s synth.Shape, history int, snapshot bool) string {
	b.Helper()
	dir, err := synth.Fixture(s, history, snapshot)
	if err != nil {
		b.Fatal(err)
	}
	return dir
}

func openLog(b *testing.B, dir string) *eventlog.Log {
	b.Helper()
	log, err := eventlog.Open(dir, eventlog.Options{ReadOnly: true, Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { log.Close() })
	return log
}

func openRaw(b *testing.B, dir string) *pebble.DB {
	b.Helper()
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, FormatMajorVersion: pebble.FormatNewest, MemTableSize: 64 << 20, Logger: quiet{}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	return db
}

// BenchmarkReplay rebuilds the lease table from a log (decode + fold, no
// snapshot) beside a raw Pebble scan of the same log that touches every key
// and value and decodes nothing.
//
//	go test -run '^$' -bench BenchmarkReplay -count 6 ./replay | tee r.txt
//	benchstat -col /impl r.txt
func BenchmarkReplay(b *testing.B) {
	for _, events := range sizes(1_000_000, 10_000_000) {
		dir := fixture(b, synth.Default, events, false)
		b.Run(fmt.Sprintf("events=%d/impl=leaselog", events), func(b *testing.B) {
			log := openLog(b, dir)
			n := log.LastSeq()
			measure(b, n, func() error {
				t, st, err := replay.Rebuild(log, zerolog.Nop())
				if err == nil && (t.Seq() != n || uint64(st.Events) != n) {
					err = fmt.Errorf("rebuilt to seq %d with %d events, want %d", t.Seq(), st.Events, n)
				}
				return err
			})
		})
		b.Run(fmt.Sprintf("events=%d/impl=raw", events), func(b *testing.B) {
			db := openRaw(b, dir)
			var n uint64
			measure(b, 0, func() error {
				var err error
				n, err = rawScan(db, func([]byte) bool { return true })
				return err
			})
			b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "events/s")
		})
	}
}

// rawScan iterates every event key and value, and counts those keep accepts.
func rawScan(db *pebble.DB, keep func(v []byte) bool) (uint64, error) {
	it, err := db.NewIter(&pebble.IterOptions{LowerBound: []byte{'e'}, UpperBound: []byte{'f'}})
	if err != nil {
		return 0, err
	}
	var n uint64
	for ok := it.First(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return 0, err
		}
		if keep(v) {
			n++
		}
	}
	return n, it.Close()
}

// BenchmarkRestart measures what a restart waits for before it serves:
// rebuilding the table, from the newest snapshot plus its tail or from the
// whole log, with 100k live leases behind a history of 100k or 10M events.
// (lease.Open adds one durable append, daemon.started, to this.)
func BenchmarkRestart(b *testing.B) {
	shape := synth.Default
	shape.Live = 100_000
	for _, history := range sizes(100_000, 10_000_000) {
		for _, snap := range []bool{true, false} {
			dir := fixture(b, shape, history, snap)
			b.Run(fmt.Sprintf("live=%d/history=%d/snapshot=%v", shape.Live, history, snap), func(b *testing.B) {
				log := openLog(b, dir)
				measure(b, log.LastSeq(), func() error {
					t, st, err := replay.Rebuild(log, zerolog.Nop())
					if err == nil && (t.Seq() != log.LastSeq() || (st.SnapshotSeq != 0) != snap) {
						err = fmt.Errorf("rebuilt to %d from snapshot %d", t.Seq(), st.SnapshotSeq)
					}
					return err
				})
			})
		}
	}
}

// BenchmarkAuditQuery asks the auditor's questions of a log with a stale
// report every 100 jobs — all lease.stale_report of one job, and of all jobs
// in a time window — through the indexes, beside a full scan that decodes
// every event and filters.
func BenchmarkAuditQuery(b *testing.B) {
	shape := synth.Default
	shape.StaleEvery = 100
	for _, events := range sizes(1_000_000, 10_000_000) {
		dir := fixture(b, shape, events, false)
		log := openLog(b, dir)
		last := log.LastSeq()
		// The job of the first lost worker past the middle of the log; the
		// window is the middle tenth of its time.
		job := synth.Job(int(last/2)/(shape.Wave*8)/100*100, 0)
		from, until := synth.TimeOf(last*45/100), synth.TimeOf(last*55/100)
		queries := []struct {
			name string
			q    eventlog.Query
		}{
			{"stale-of-job", eventlog.Query{Type: event.TypeStaleReport, Job: job}},
			{"stale-in-window", eventlog.Query{Type: event.TypeStaleReport, Since: from, Until: until}},
		}
		for _, q := range queries {
			want := count(b, log, q.q)
			if want == 0 {
				b.Fatalf("%s finds nothing: the fixture is not what the benchmark assumes", q.name)
			}
			b.Run(fmt.Sprintf("events=%d/query=%s/impl=index", events, q.name), func(b *testing.B) {
				measure(b, 0, func() error {
					if got := count(b, log, q.q); got != want {
						return fmt.Errorf("found %d, want %d", got, want)
					}
					return nil
				})
			})
			b.Run(fmt.Sprintf("events=%d/query=%s/impl=scan", events, q.name), func(b *testing.B) {
				scan := q.q
				scan.ReadAhead = true
				match := func(e *event.Event) bool {
					return e.Type == q.q.Type && (q.q.Job == "" || e.Job == q.q.Job) &&
						(q.q.Since == 0 || e.Time >= q.q.Since) && (q.q.Until == 0 || e.Time < q.q.Until)
				}
				measure(b, 0, func() error {
					it := log.Query(eventlog.Query{ReadAhead: true})
					got := 0
					for it.Next() {
						if match(it.Event()) {
							got++
						}
					}
					if err := it.Close(); err != nil {
						return err
					}
					if got != want {
						return fmt.Errorf("scan found %d, index %d", got, want)
					}
					return nil
				})
			})
		}
	}
}

func count(b *testing.B, log *eventlog.Log, q eventlog.Query) int {
	it := log.Query(q)
	n := 0
	for it.Next() {
		n++
	}
	if err := it.Close(); err != nil {
		b.Fatal(err)
	}
	return n
}

// measure runs op b.N times and reports events per second (when events is
// not 0) and heap allocations per event.
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
	if events == 0 {
		return
	}
	runtime.ReadMemStats(&after)
	total := float64(events) * float64(b.N)
	b.ReportMetric(total/b.Elapsed().Seconds(), "events/s")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/total, "allocs/event")
}

type quiet struct{}

func (quiet) Infof(string, ...any)         {}
func (quiet) Errorf(string, ...any)        {}
func (quiet) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }
