package lease_test

import (
	"fmt"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/timing"
)

// TestSnapshotIsMadeInRoom: a sweep's snapshot of a table of 42,000 jobs,
// after one of 40,000, allocates about twice the snapshot (the snapshot,
// made in the room the last one's length gave, and the batch that stores
// it) and up to once more in the WAL's blocks; appended to from nothing, it
// allocated over six times the snapshot. The least of three sweeps, 2,000
// jobs apart, is taken: Pebble's own goroutines allocate beside them.
func TestSnapshotIsMadeInRoom(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector empties Pebble's pools at random: the bytes allocated are not the copies made")
	}
	log, svc := leasetest.Open(t, leasetest.Disk(t.TempDir()), leasetest.Service(func(o *lease.Options) { o.SnapshotEvery = 1 }))
	submit := func(from, to int) {
		t.Helper()
		for i := from; i < to; i += lease.MaxSubmitBatch {
			items := make([]lease.SubmitItem, 0, lease.MaxSubmitBatch)
			for j := i; j < min(i+lease.MaxSubmitBatch, to); j++ {
				items = append(items, lease.SubmitItem{ID: fmt.Sprintf("job-%06d", j), Kind: event.KindRun, Spec: []byte(`{"run":"x"}`)})
			}
			if _, err := svc.SubmitBatch(ctx, items); err != nil {
				t.Fatal(err)
			}
		}
	}
	submit(0, 40_000)
	if err := svc.Sweep(); err != nil {
		t.Fatal(err)
	}
	least := math.Inf(1)
	for from := 40_000; from < 46_000; from += 2_000 {
		submit(from, from+2_000)
		var before, after runtime.MemStats
		runtime.GC() // Pebble's pools emptied: the WAL's blocks are made anew, every sweep alike
		runtime.ReadMemStats(&before)
		if err := svc.Sweep(); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		snaps, err := log.Snapshots()
		if err != nil || len(snaps) < 2 {
			t.Fatalf("snapshots %v, %v; want two or more", snaps, err)
		}
		snap, err := log.Snapshot(snaps[0])
		if err != nil {
			t.Fatal(err)
		}
		least = min(least, float64(after.TotalAlloc-before.TotalAlloc)/float64(len(snap)))
	}
	t.Logf("the sweep allocated %.2f times its snapshot", least)
	if least > 4 {
		t.Errorf("a sweep allocated %.2f times its snapshot, want at most 4", least)
	}
}

// TestSnapshotCadenceFollowsTableSize: with SnapshotPerItem, a sweep writes a
// snapshot once the events since the last reach SnapshotPerItem times the
// table's jobs and leases, or SnapshotEvery if that is more — not before, as
// SnapshotEvery alone did — and SnapshotInterval still writes one in time.
// One lease heartbeated is one event: the sweeps step through every seq.
func TestSnapshotCadenceFollowsTableSize(t *testing.T) {
	const every, perItem, interval = 10, 4, 10 * time.Second
	for _, tc := range []struct {
		jobs int
		need uint64 // events between snapshots
	}{
		{jobs: 1, need: every},             // 2 items: 8 events, less than SnapshotEvery
		{jobs: 30, need: perItem * 2 * 30}, // 60 items: 240 events
	} {
		t.Run(fmt.Sprintf("jobs=%d", tc.jobs), func(t *testing.T) {
			clock := clocktest.New(clocktest.Epoch)
			log, svc := leasetest.Open(t, leasetest.Clock(clock),
				leasetest.Config(timing.Config{Renew: time.Second, Grace: time.Minute, Toleration: 2 * time.Minute}),
				leasetest.Service(func(o *lease.Options) {
					o.SnapshotEvery, o.SnapshotPerItem, o.SnapshotInterval = every, perItem, interval
				}))
			items := make([]lease.SubmitItem, tc.jobs)
			for i := range items {
				items[i] = lease.SubmitItem{ID: fmt.Sprintf("job-%02d", i), Kind: event.KindRun, Spec: []byte(`{"run":"x"}`)}
			}
			if _, err := svc.SubmitBatch(ctx, items); err != nil {
				t.Fatal(err)
			}
			grants, err := svc.Acquire(ctx, "w1", tc.jobs)
			if err != nil || len(grants) != tc.jobs {
				t.Fatalf("acquired %d leases, %v; want %d", len(grants), err, tc.jobs)
			}
			var seq uint64
			var size int
			look := func() {
				t.Helper()
				if err := svc.View(ctx, func(tab *projection.Table) { seq, size = tab.Seq(), tab.Size() }); err != nil {
					t.Fatal(err)
				}
			}
			newest := func() uint64 {
				t.Helper()
				snaps, err := log.Snapshots()
				if err != nil {
					t.Fatal(err)
				}
				if len(snaps) == 0 {
					return 0
				}
				return snaps[0]
			}
			// Two snapshots by count, each need events after the last.
			look()
			last, prev := uint64(0), seq
			for written := 0; written < 2; {
				if seq > last+3*tc.need {
					t.Fatalf("no snapshot by seq %d, the last at %d; want one every %d events", seq, last, tc.need)
				}
				if _, err := svc.Heartbeat(ctx, "w1", []uint64{grants[int(seq)%len(grants)].Lease}); err != nil {
					t.Fatal(err)
				}
				if err := svc.Sweep(); err != nil {
					t.Fatal(err)
				}
				look()
				if seq != prev+1 || size != 2*tc.jobs {
					t.Fatalf("a heartbeat and a sweep took seq %d to %d, table size %d; want one event, size %d (the jobs and their leases)", prev, seq, size, 2*tc.jobs)
				}
				prev = seq
				got := newest()
				if seq-last < tc.need {
					if got != last {
						t.Fatalf("snapshot at seq %d, %d events after the last (%d); want none before %d", got, seq-last, last, tc.need)
					}
					continue
				}
				if got != seq {
					t.Fatalf("newest snapshot %d at seq %d, %d events after the last (%d); want one at %d", got, seq, seq-last, last, seq)
				}
				last = seq
				written++
			}
			// SnapshotInterval is not held back: one event, the interval
			// passed, and the sweep writes a snapshot.
			last = newest()
			if _, err := svc.Heartbeat(ctx, "w1", []uint64{grants[0].Lease}); err != nil {
				t.Fatal(err)
			}
			clock.Advance(interval)
			if err := svc.Sweep(); err != nil {
				t.Fatal(err)
			}
			look()
			if got := newest(); got != seq || seq-last >= tc.need {
				t.Fatalf("after the interval, newest snapshot %d at seq %d (%d events after %d); want one at %d by time", got, seq, seq-last, last, seq)
			}
		})
	}
}
