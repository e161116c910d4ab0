package eventlog_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/synth"
)

// compactShapes are the logs of BenchmarkCompact: leases heartbeating as a
// daemon holding them all at once, a round every 10 s (each worker's
// heartbeats one batch, with ULIDs), then every job ended; 100 leases of
// 1,000 heartbeats, 10 of 20,000 (55 hours each: five summaries a lease),
// and, with LEASELOG_BENCH_LARGE=1, 1,000 of 1,000.
func compactShapes() []synth.Shape {
	sizes := []synth.Shape{
		{Wave: 100, Heartbeats: 1000, Workers: 10, Renew: 10 * time.Second},
		{Wave: 10, Heartbeats: 20000, Workers: 10, Renew: 10 * time.Second},
	}
	if os.Getenv("LEASELOG_BENCH_LARGE") != "" {
		sizes = append(sizes, synth.Shape{Wave: 1000, Heartbeats: 1000, Workers: 10, Renew: 10 * time.Second})
	}
	return sizes
}

// BenchmarkCompact measures what compacting heartbeats reclaims on disk and
// what it costs. The log (synth.Fixture, built once and kept) is copied,
// and its disk use measured once Pebble has flushed and compacted it (as
// its background compactions would, in their time), before and after
// CompactJob of every job. ns/op is the compaction of the whole log. The
// metrics: the bytes of the store's tables (its data) before and after;
// the bytes of its other files after (the WALs Pebble keeps for reuse,
// bounded by its memtable, whatever the data); bytes a heartbeat before,
// bytes a job after; heartbeats removed a second.
//
//	go test -run '^$' -bench BenchmarkCompact -benchtime 1x ./eventlog
//	LEASELOG_BENCH_LARGE=1 go test -run '^$' -bench 'BenchmarkCompact/leases=1000' -benchtime 1x -timeout 0 ./eventlog
func BenchmarkCompact(b *testing.B) {
	for _, s := range compactShapes() {
		b.Run(fmt.Sprintf("leases=%d/heartbeats=%d", s.Wave, s.Heartbeats), func(b *testing.B) {
			fixture, err := synth.Fixture(s, 1, false)
			if err != nil {
				b.Fatal(err)
			}
			var before, after, other int64
			var st eventlog.CompactStats
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				dir := filepath.Join(b.TempDir(), "data")
				if err := synth.CopyStore(fixture, dir); err != nil {
					b.Fatal(err)
				}
				log, err := eventlog.Open(dir, eventlog.Options{Logger: zerolog.Nop()})
				if err != nil {
					b.Fatal(err)
				}
				if err := log.Settle(); err != nil {
					b.Fatal(err)
				}
				if err := log.Close(); err != nil { // the files Pebble's compaction replaced are deleted
					b.Fatal(err)
				}
				before, _ = diskUse(b, dir)
				if log, err = eventlog.Open(dir, eventlog.Options{Logger: zerolog.Nop()}); err != nil {
					b.Fatal(err)
				}
				st = eventlog.CompactStats{}
				b.StartTimer()
				for j := range s.Wave {
					c, err := log.CompactJob(synth.Job(0, j), log.LastSeq())
					if err != nil {
						b.Fatal(err)
					}
					st.Add(c)
				}
				b.StopTimer()
				if err := log.Settle(); err != nil {
					b.Fatal(err)
				}
				if err := log.Close(); err != nil {
					b.Fatal(err)
				}
				// Opened again, as by a restart: Pebble has let go of the WALs
				// it no longer needs.
				if log, err = eventlog.Open(dir, eventlog.Options{Logger: zerolog.Nop()}); err != nil {
					b.Fatal(err)
				}
				if err := log.Close(); err != nil {
					b.Fatal(err)
				}
				after, other = diskUse(b, dir)
			}
			summaries := (s.Heartbeats + eventlog.DefaultSegmentHeartbeats - 1) / eventlog.DefaultSegmentHeartbeats
			if st.Heartbeats != s.Wave*(s.Heartbeats-summaries) {
				b.Fatalf("compacted %+v, want %d heartbeats removed", st, s.Wave*(s.Heartbeats-summaries))
			}
			b.ReportMetric(float64(before), "bytes-before")
			b.ReportMetric(float64(after), "bytes-after")
			b.ReportMetric(float64(other), "bytes-wal")
			b.ReportMetric(float64(before)/float64(s.Wave*s.Heartbeats), "B/heartbeat-before")
			b.ReportMetric(float64(after)/float64(s.Wave), "B/job-after")
			b.ReportMetric(float64(st.Heartbeats)/(b.Elapsed().Seconds()/float64(b.N)), "heartbeats/s")
		})
	}
}

// diskUse is the bytes of the tables of the store in dir, its data, and of
// its other files: Pebble's WALs (preallocated, some of 4 MiB kept for
// reuse), its manifest, options and markers.
func diskUse(b *testing.B, dir string) (tables, other int64) {
	b.Helper()
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if strings.HasSuffix(path, ".sst") {
			tables += info.Size()
		} else {
			other += info.Size()
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return tables, other
}
