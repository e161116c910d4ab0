package replay_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/replay"
)

// compactedStore runs jobs through a service, each with some heartbeats,
// with snapshots along the way (the service's Close writes one), leaves one
// job live, and returns the store's filesystem, closed, with the seq that
// ended each job that ended.
func compactedStore(t *testing.T) (vfs.FS, map[string]uint64) {
	t.Helper()
	fs := vfs.NewMem()
	clock := clocktest.New(clocktest.Epoch)
	open := func() (*eventlog.Log, *lease.Service) {
		return leasetest.Open(t, leasetest.FS(fs), leasetest.Clock(clock))
	}
	log, svc := open()
	for i := range 6 {
		id := fmt.Sprint("j", i)
		if _, _, err := svc.Submit(ctx, id, event.KindEvaluation, nil); err != nil {
			t.Fatal(err)
		}
		gs, err := svc.AcquireWith(ctx, "w", lease.AcquireOptions{Max: 1, Start: true})
		if err != nil || len(gs) != 1 {
			t.Fatalf("acquire: %v %v", gs, err)
		}
		for b := range 3 + i {
			clock.Advance(300 * time.Millisecond)
			if _, err := svc.Heartbeat(ctx, "w", []uint64{gs[0].Lease}); err != nil {
				t.Fatal(err)
			}
			if b == 1 && i%2 == 0 { // a snapshot between two heartbeats
				if err := svc.Close(); err != nil {
					t.Fatal(err)
				}
			}
		}
		if i == 5 {
			break // live: its heartbeats stay
		}
		if _, err := svc.Report(ctx, "w", gs[0].Lease, lease.Report{Outcome: event.OutcomeSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	ends := map[string]uint64{}
	it := log.Query(eventlog.Query{Type: event.TypeReported})
	for it.Next() {
		ends[strings.Clone(it.Event().Job)] = it.Event().Seq
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	return fs, ends
}

func openStore(t *testing.T, fs vfs.FS) *eventlog.Log {
	t.Helper()
	log, err := eventlog.Open(leasetest.Dir, eventlog.Options{FS: fs, Logger: zerolog.Nop(), SegmentHeartbeats: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { log.Close() })
	return log
}

// TestVerifyCompacted: the store of jobs whose heartbeats were compacted
// passes Verify, folds to the same table as before, and rebuilds to it
// from every snapshot left, and from none.
func TestVerifyCompacted(t *testing.T) {
	fs, ends := compactedStore(t)
	log := openStore(t, fs)
	before, err := replay.Verify(log)
	if err != nil {
		t.Fatal(err)
	}
	var st eventlog.CompactStats
	for job, end := range ends {
		s, err := log.CompactJob(job, end)
		if err != nil {
			t.Fatal(err)
		}
		st.Add(s)
	}
	if st.Heartbeats == 0 || st.Summaries == 0 || st.Snapshots == 0 {
		t.Fatalf("compaction did %+v: the store should have heartbeats to remove and snapshots among them", st)
	}
	after, err := replay.Verify(log)
	if err != nil {
		t.Fatal(err)
	}
	if after.Events != before.Events-st.Heartbeats {
		t.Errorf("%d events folded, want %d less %d compacted", after.Events, before.Events, st.Heartbeats)
	}
	if !slices.Equal(after.Table.Snapshot(), before.Table.Snapshot()) || after.Table.String() != before.Table.String() {
		t.Fatalf("fold of the compacted log:\n%s\nbefore:\n%s", after.Table, before.Table)
	}
	live, _, err := replay.Rebuild(log, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	full, _, err := replay.Rebuild(allBad{log}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(live.Snapshot(), full.Snapshot()) {
		t.Fatalf("rebuilt from a snapshot:\n%s\nfrom the log alone:\n%s", live, full)
	}
}

// TestVerifyCompactedDamage damages a compacted store as a bad disk or a
// bug could, and Verify names what is wrong: a seq missing that no
// compaction removed, a summary no compaction wrote, a summary claiming
// other seqs than those missing, a run of compacted seqs over an event
// still there.
func TestVerifyCompactedDamage(t *testing.T) {
	for _, tc := range []struct {
		name string
		hurt func(db *pebble.DB, sum event.Event, other uint64) error
		want func(sum event.Event, other uint64) string
	}{
		{"an event lost", func(db *pebble.DB, _ event.Event, other uint64) error {
			return db.Delete(eventKey(other), pebble.Sync)
		}, func(_ event.Event, other uint64) string {
			return fmt.Sprintf("seq %d missing from the log, and no compaction removed them", other)
		}},
		{"a summary of one heartbeat", func(db *pebble.DB, sum event.Event, _ uint64) error {
			sum.Beats.Count = 1
			return db.Set(eventKey(sum.Seq), event.AppendRecord(nil, &sum), pebble.Sync)
		}, func(sum event.Event, _ uint64) string {
			return fmt.Sprintf("seq %d lease.heartbeats: summarises 1 heartbeats", sum.Seq)
		}},
		{"a summary claiming other seqs", func(db *pebble.DB, sum event.Event, _ uint64) error {
			sum.Beats.Claim++
			return db.Set(eventKey(sum.Seq), event.AppendRecord(nil, &sum), pebble.Sync)
		}, func(event.Event, uint64) string { return "are not those its" }},
		{"a run over an event", func(db *pebble.DB, _ event.Event, other uint64) error {
			// A run of compacted seqs is kept under its first seq and its last.
			seq := eventKey(other)[1:]
			return errors.Join(db.Set(append([]byte{'g'}, seq...), seq, pebble.Sync), db.Set(append([]byte{'G'}, seq...), seq, pebble.Sync))
		}, func(event.Event, uint64) string { return "runs of compacted seqs name" }},
		{"a run under one key", func(db *pebble.DB, _ event.Event, other uint64) error {
			seq := eventKey(other)[1:]
			return db.Set(append([]byte{'g'}, seq...), seq, pebble.Sync)
		}, func(_ event.Event, other uint64) string {
			return fmt.Sprintf("names seqs %d..%d, key", other, other)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs, ends := compactedStore(t)
			log := openStore(t, fs)
			for job, end := range ends {
				if _, err := log.CompactJob(job, end); err != nil {
					t.Fatal(err)
				}
			}
			it := log.Query(eventlog.Query{Type: event.TypeHeartbeats})
			if !it.Next() {
				t.Fatalf("no summary: %v", it.Close())
			}
			sum := it.Event().Clone()
			it.Close()
			other := ends["j1"] // a report: no compaction removes it
			if err := log.Close(); err != nil {
				t.Fatal(err)
			}
			db, err := pebble.Open(leasetest.Dir, &pebble.Options{FS: fs})
			if err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(tc.hurt(db, sum, other), db.Close()); err != nil {
				t.Fatal(err)
			}
			log = openStore(t, fs)
			_, err = replay.Verify(log)
			if want := tc.want(sum, other); err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("verify: %v; want an error saying %q", err, want)
			}
		})
	}
}

// eventKey is the log's key of seq: 'e' seq(8), as eventlog lays it out (the
// damage above writes under it directly, as a bad disk would).
func eventKey(seq uint64) []byte {
	return []byte{'e', byte(seq >> 56), byte(seq >> 48), byte(seq >> 40), byte(seq >> 32), byte(seq >> 24), byte(seq >> 16), byte(seq >> 8), byte(seq)}
}
