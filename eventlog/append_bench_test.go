package eventlog

import (
	"fmt"
	"github.com/leaselog/leaselog/event"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/internal/testkit/testutil"
)

// BenchmarkAppend measures durable appends, one event per call, from 1, 16,
// 64 and 256 concurrent appenders, beside a raw Pebble baseline that writes the
// same bytes (the record and its three index keys) with the same sync but
// none of the ordering: each raw writer takes a sequence number from an
// atomic counter and commits whenever Pebble lets it. impl=raw is Pebble as
// it comes; impl=raw-sized has the log's WALs, sized ahead of their writes
// (sizedWALs), so that leaselog ÷ raw-sized is the cost of the ordering and
// raw-sized ÷ raw the gain of the sizing.
//
//	go test -run '^$' -bench BenchmarkAppend -count 6 ./eventlog | tee a.txt
//	benchstat -col /impl a.txt
//
// The store is on the OS filesystem (a temp dir), because fsync is the cost.
func BenchmarkAppend(b *testing.B) {
	for _, impl := range []string{"leaselog", "raw", "raw-sized"} {
		for _, n := range []int{1, 16, 64, 256} {
			b.Run(fmt.Sprintf("impl=%s/appenders=%d", impl, n), func(b *testing.B) {
				switch impl {
				case "raw":
					benchRawAppend(b, n, vfs.Default)
				case "raw-sized":
					benchRawAppend(b, n, sizedWALs{vfs.Default})
				default:
					benchAppend(b, n)
				}
			})
		}
	}
}

func benchEvent(i int) event.Event {
	return event.Event{Type: event.TypeHeartbeat, Time: 1_767_225_600_000_000_000 + int64(i), Job: fmt.Sprintf("job-%06d", i%1000),
		Lease: uint64(i), Worker: fmt.Sprintf("worker-%02d", i%64)}
}

// parallel runs b.N appends over n goroutines and reports events/s.
func parallel(b *testing.B, n int, op func(i int) error) {
	testutil.Parallel(b, n, func(_, i int) error { return op(i) })
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "events/s")
}

func benchAppend(b *testing.B, n int) {
	l, err := Open(b.TempDir(), Options{Logger: zerolog.Nop()})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	parallel(b, n, func(i int) error {
		evs := [1]event.Event{benchEvent(i)}
		return l.Append(evs[:])
	})
}

func benchRawAppend(b *testing.B, n int, fs vfs.FS) {
	db, err := pebble.Open(b.TempDir(), &pebble.Options{
		FS: fs, Logger: pebbleLogger{l: zerolog.Nop()}, FormatMajorVersion: pebble.FormatNewest, MemTableSize: 64 << 20,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var seq atomic.Uint64
	parallel(b, n, func(i int) error {
		e := benchEvent(i)
		e.Seq = seq.Add(1)
		batch := db.NewBatch()
		defer batch.Close()
		k := eventKey(nil, e.Seq)
		if err := batch.Set(k, event.AppendRecord(nil, &e), nil); err != nil {
			return err
		}
		for _, k := range [][]byte{typeIndexKey(nil, e.Type, e.Seq), stringIndexKey(nil, prefixJob, e.Job, e.Seq), stringIndexKey(nil, prefixWorker, e.Worker, e.Seq)} {
			if err := batch.Set(k, nil, nil); err != nil {
				return err
			}
		}
		return db.Apply(batch, pebble.Sync)
	})
}
