package lease_test

import (
	"fmt"
	"math"
	"runtime"
	"testing"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
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
