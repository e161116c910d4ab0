package eventlog_test

import (
	"bytes"
	"math"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
)

// putBigSnapshots opens a store on disk in dir (an in-memory one keeps the
// WAL's bytes on the heap) and stores the same 8 MB snapshot at seqs 1 and
// 2, measuring the bytes the second PutSnapshot allocates. The test closes
// the store.
func putBigSnapshots(t *testing.T, dir string) (l *eventlog.Log, data []byte, allocated uint64) {
	t.Helper()
	l = openDisk(t, dir, false)
	if err := l.Append([]event.Event{{Type: event.TypeDaemonStarted}, {Type: event.TypeDaemonStarted}}); err != nil {
		t.Fatal(err)
	}
	data = bytes.Repeat([]byte("snapshot"), 1<<20)
	if err := l.PutSnapshot(1, data); err != nil { // and warms Pebble's pools
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := l.PutSnapshot(2, data); err != nil {
		t.Fatal(err)
	}
	runtime.ReadMemStats(&after)
	if got, err := l.Snapshot(2); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("Snapshot(2): %d bytes, %v; want the %d put", len(got), err, len(data))
	}
	return l, data, after.TotalAlloc - before.TotalAlloc
}

// TestPutSnapshotCopiesItOnce: storing a snapshot of 8 MB allocates the one
// copy the batch holds, and up to about one more in the WAL's blocks (as
// many as Pebble's pool lacks); it used to allocate four (a value built
// beside the batch, a batch grown by doubling, the last snapshot copied to
// list them).
func TestPutSnapshotCopiesItOnce(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector empties Pebble's pools at random: the bytes allocated are not the copies made")
	}
	l, data, got := putBigSnapshots(t, filepath.Join(t.TempDir(), "data"))
	defer l.Close()
	if limit := uint64(len(data)) * 5 / 2; got > limit {
		t.Errorf("PutSnapshot of %d bytes allocated %d, want at most %d", len(data), got, limit)
	}
}

// TestSnapshotsReadsNoSnapshot: the first listing of a store's snapshots
// (the log keeps the list after it) reads their keys, not a copy of one (a
// step backwards in Pebble copies the value it leaves). The least of three
// opens is taken: Pebble's own goroutines allocate beside the listing.
func TestSnapshotsReadsNoSnapshot(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	l, data, _ := putBigSnapshots(t, dir)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	least := uint64(math.MaxUint64)
	for range 3 {
		l := openDisk(t, dir, true)
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		have, err := l.Snapshots()
		runtime.ReadMemStats(&after)
		if err != nil || !slices.Equal(have, []uint64{2, 1}) {
			t.Fatalf("Snapshots() = %v, %v; want [2 1]", have, err)
		}
		least = min(least, after.TotalAlloc-before.TotalAlloc)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if limit := uint64(len(data)) / 8; least > limit {
		t.Errorf("listing two snapshots of %d bytes allocated %d, want at most %d", len(data), least, limit)
	}
}

// TestPutSnapshotLeavesBatchesSmall: after a snapshot of 8 MB, an append of
// one event allocates a batch of its own size, not the snapshot's (a batch
// Pebble pools keeps the initial size it was given).
func TestPutSnapshotLeavesBatchesSmall(t *testing.T) {
	l, _, _ := putBigSnapshots(t, filepath.Join(t.TempDir(), "data"))
	defer l.Close()
	for range 3 { // each from Pebble's pool, if it holds them
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		if err := l.Append([]event.Event{{Type: event.TypeDaemonStarted}}); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
			t.Fatalf("an append of one event after a snapshot of 8 MB allocated %d bytes", got)
		}
	}
}
