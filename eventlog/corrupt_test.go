package eventlog

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/leaselog/leaselog/event"
)

// TestCorruptStorageIsNamed writes damaged bytes where the log keeps its
// records and snapshots, as a bad disk or a bug could, and checks that every
// reader returns ErrCorrupt naming the place, never a panic or wrong data.
func TestCorruptStorageIsNamed(t *testing.T) {
	l, err := Open("data", Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	evs := []event.Event{{Type: event.TypeQueued, Job: "j1", Kind: event.KindRun}, {Type: event.TypeAcquired, Job: "j1", Worker: "w1"}, {Type: event.TypeDaemonStopping}}
	if err := l.Append(evs); err != nil {
		t.Fatal(err)
	}
	if err := l.PutSnapshot(3, []byte("table")); err != nil {
		t.Fatal(err)
	}
	set := func(key, val []byte) {
		t.Helper()
		if err := l.db.Set(key, val, pebble.Sync); err != nil {
			t.Fatal(err)
		}
	}

	// A record whose bytes were damaged.
	good, closer, err := l.db.Get(eventKey(nil, 2))
	if err != nil {
		t.Fatal(err)
	}
	bad := append([]byte(nil), good...)
	closer.Close()
	bad[len(bad)-1] ^= 1
	set(eventKey(nil, 2), bad)

	it := l.Iter(1)
	n := 0
	for it.Next() {
		n++
	}
	if err := it.Close(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "seq 2") || n != 1 {
		t.Fatalf("scan: %d events then %v; want 1 event then ErrCorrupt naming seq 2", n, err)
	}
	// The same through an index.
	it = l.Query(Query{Job: "j1"})
	for it.Next() {
	}
	if err := it.Close(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "seq 2") {
		t.Fatalf("index scan: %v", err)
	}
	if _, err := l.Get(2); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get: %v", err)
	}

	// An index entry naming an event that is not there.
	set(stringIndexKey(nil, prefixWorker, "ghost", 3), nil)
	if err := l.db.Delete(eventKey(nil, 3), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	it = l.Query(Query{Worker: "ghost"})
	for it.Next() {
	}
	if err := it.Close(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "seq 3") {
		t.Fatalf("dangling index: %v", err)
	}

	// A damaged snapshot.
	set(snapshotKey(nil, 3), []byte{1, 2, 3, 4, 't', 'a', 'b', 'l', 'e'})
	if _, err := l.Snapshot(3); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "snapshot key") {
		t.Fatalf("snapshot: %v", err)
	}
	set(snapshotKey(nil, 3), []byte{1})
	if _, err := l.Snapshot(3); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("short snapshot: %v", err)
	}
	// The walk of the snapshots names the damaged one and goes on to the
	// one before it.
	if err := l.PutSnapshot(2, []byte("older")); err != nil {
		t.Fatal(err)
	}
	var read []string
	err = l.EachSnapshot(func(seq uint64, data []byte, err error) bool {
		if seq == 3 && (!errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("snapshot key %x", snapshotKey(nil, 3)))) {
			t.Errorf("damaged snapshot read as %q, %v; want ErrCorrupt naming its key", data, err)
		}
		read = append(read, fmt.Sprint(seq, "=", string(data)))
		return err != nil
	})
	if err != nil || !slices.Equal(read, []string{"3=", "2=older"}) {
		t.Fatalf("EachSnapshot read %q, %v; want the damaged 3, then 2", read, err)
	}
}
