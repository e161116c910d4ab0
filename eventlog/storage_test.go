package eventlog

import (
	"context"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/leaselog/leaselog/event"
)

// TestCompactStorage: the whole keyspace ends in tables below level 0 and
// the memtable is empty, every event still there; a read-only log refuses.
func TestCompactStorage(t *testing.T) {
	fs := vfs.NewMem()
	l := openForTest(t, fs)
	for i := range 200 {
		if err := l.Append([]event.Event{{Type: event.TypeHeartbeat, Job: "j", Worker: "w", Lease: uint64(i + 1)}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.CompactStorage(context.Background()); err != nil {
		t.Fatal(err)
	}
	m := l.db.Metrics()
	var below int64
	for level := 1; level < len(m.Levels); level++ {
		below += m.Levels[level].TablesCount
	}
	if m.Levels[0].TablesCount != 0 || below == 0 {
		t.Errorf("after CompactStorage: %d tables in L0, %d below; want none in L0, some below", m.Levels[0].TablesCount, below)
	}
	if e, err := l.Get(200); err != nil || e.Lease != 200 {
		t.Errorf("seq 200 after CompactStorage: %+v, %v", e, err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	ro, err := Open("data", Options{FS: fs, ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer ro.Close()
	if err := ro.CompactStorage(context.Background()); err == nil {
		t.Error("CompactStorage of a read-only log: no error")
	}
}
