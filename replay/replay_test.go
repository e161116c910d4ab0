package replay_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/replay"
	"github.com/leaselog/leaselog/timing"
)

var ctx = context.Background()

// damaged is a log whose newest snapshot reads back as garbage, as a snapshot
// written by a buggy or older build would.
type damaged struct {
	*eventlog.Log
	bad uint64
}

func (d damaged) Snapshot(seq uint64) ([]byte, error) {
	if seq == d.bad {
		return []byte("not a snapshot"), nil
	}
	return d.Log.Snapshot(seq)
}

func (d damaged) EachSnapshot(fn func(seq uint64, data []byte, err error) bool) error {
	return d.Log.EachSnapshot(func(seq uint64, data []byte, err error) bool {
		if seq == d.bad {
			data = []byte("not a snapshot")
		}
		return fn(seq, data, err)
	})
}

// TestRebuildFallsBackPastABadSnapshot: a snapshot that does not restore is
// skipped, with a warning, for the one before it; the table comes out the
// same as a full fold.
func TestRebuildFallsBackPastABadSnapshot(t *testing.T) {
	log, svc := leasetest.Open(t, leasetest.Config(timing.Default()), leasetest.Clock(clocktest.New(clocktest.Epoch)))
	snapshotAfter := func(id string) {
		if _, _, err := svc.Submit(ctx, id, event.KindRun, nil); err != nil {
			t.Fatal(err)
		}
		if err := svc.Close(); err != nil { // Close writes a snapshot
			t.Fatal(err)
		}
	}
	snapshotAfter("j1")
	snapshotAfter("j2")
	if _, _, err := svc.Submit(ctx, "j3", event.KindRun, nil); err != nil {
		t.Fatal(err)
	}
	seqs, err := log.Snapshots()
	if err != nil || len(seqs) != 2 {
		t.Fatalf("snapshots %v, %v", seqs, err)
	}
	full, err := replay.Verify(log)
	if err != nil {
		t.Fatal(err)
	}

	tab, st, err := replay.Rebuild(damaged{log, seqs[0]}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if st.SnapshotSeq != seqs[1] || len(st.Skipped) != 1 || st.Skipped[0] != seqs[0] {
		t.Fatalf("rebuilt from %d skipping %v; want %d skipping [%d]", st.SnapshotSeq, st.Skipped, seqs[1], seqs[0])
	}
	if tab.String() != full.Table.String() {
		t.Fatalf("rebuilt table:\n%s\nfull fold:\n%s", tab, full.Table)
	}
	// Verify does not let a damaged snapshot pass.
	if _, err := replay.Verify(damaged{log, seqs[0]}); err == nil {
		t.Fatal("Verify accepted a damaged snapshot")
	}
	// With every snapshot bad, the whole log is folded.
	tab, st, err = replay.Rebuild(allBad{log}, zerolog.Nop())
	if err != nil || st.SnapshotSeq != 0 || len(st.Skipped) != 2 || tab.String() != full.Table.String() {
		t.Fatalf("rebuild with no good snapshot: %v %+v", err, st)
	}
}

type allBad struct{ *eventlog.Log }

func (allBad) Snapshot(uint64) ([]byte, error) { return nil, errors.New("checksum mismatch") }

func (b allBad) EachSnapshot(fn func(seq uint64, data []byte, err error) bool) error {
	return b.Log.EachSnapshot(func(seq uint64, _ []byte, _ error) bool {
		return fn(seq, nil, errors.New("checksum mismatch"))
	})
}

// listless is a log that refuses to list its snapshots or read one by its
// seq, and counts the snapshots its walk reads.
type listless struct {
	*eventlog.Log
	read *int
}

func (listless) Snapshots() ([]uint64, error) { return nil, errors.New("listed the snapshots") }
func (listless) Snapshot(uint64) ([]byte, error) {
	return nil, errors.New("read a snapshot by its seq")
}

func (l listless) EachSnapshot(fn func(seq uint64, data []byte, err error) bool) error {
	return l.Log.EachSnapshot(func(seq uint64, data []byte, err error) bool {
		*l.read++
		return fn(seq, data, err)
	})
}

// snapshottedStore is compactedStore opened, with the seqs of its
// snapshots, newest first: two or more.
func snapshottedStore(t *testing.T) (vfs.FS, *eventlog.Log, []uint64) {
	t.Helper()
	fs, _ := compactedStore(t)
	log := openStore(t, fs)
	seqs, err := log.Snapshots()
	if err != nil || len(seqs) < 2 {
		t.Fatalf("snapshots %v, %v: the store is not what the test assumes", seqs, err)
	}
	return fs, log, seqs
}

// TestRebuildReadsOneSnapshot: a restart reads the newest snapshot once,
// from the walk that finds it, and no other: it neither lists the
// snapshots nor reads one again by its key (at a million jobs each read
// decompresses tens of MB).
func TestRebuildReadsOneSnapshot(t *testing.T) {
	_, log, seqs := snapshottedStore(t)
	read := 0
	tab, st, err := replay.Rebuild(listless{log, &read}, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if st.SnapshotSeq != seqs[0] || read != 1 || tab.Seq() != log.LastSeq() {
		t.Fatalf("rebuilt to %d from snapshot %d, reading %d snapshots; want %d from %d, reading 1", tab.Seq(), st.SnapshotSeq, read, log.LastSeq(), seqs[0])
	}
}

// TestRebuildPastACorruptSnapshot: the newest snapshot damaged on disk (its
// checksum fails) is skipped with a warning naming its key, for the one
// before it; the table comes out as the rebuild from the newest did.
func TestRebuildPastACorruptSnapshot(t *testing.T) {
	fs, log, seqs := snapshottedStore(t)
	want, _, err := replay.Rebuild(log, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	key := binary.BigEndian.AppendUint64([]byte{'s'}, seqs[0]) // eventlog's snapshot key, written under directly as a bad disk would
	db, err := pebble.Open(leasetest.Dir, &pebble.Options{FS: fs, Logger: quiet{}})
	if err != nil {
		t.Fatal(err)
	}
	v, closer, err := db.Get(key)
	if err != nil {
		t.Fatal(errors.Join(err, db.Close()))
	}
	bad := append([]byte(nil), v...)
	closer.Close()
	bad[len(bad)-1] ^= 1
	if err := errors.Join(db.Set(key, bad, pebble.Sync), db.Close()); err != nil {
		t.Fatal(err)
	}

	log = openStore(t, fs)
	var warned bytes.Buffer
	tab, st, err := replay.Rebuild(log, zerolog.New(&warned))
	if err != nil {
		t.Fatal(err)
	}
	if st.SnapshotSeq != seqs[1] || len(st.Skipped) != 1 || st.Skipped[0] != seqs[0] {
		t.Fatalf("rebuilt from %d skipping %v; want %d skipping [%d]", st.SnapshotSeq, st.Skipped, seqs[1], seqs[0])
	}
	if tab.String() != want.String() {
		t.Fatalf("rebuilt table:\n%s\nfrom the newest snapshot:\n%s", tab, want)
	}
	if w := warned.String(); !strings.Contains(w, fmt.Sprintf("snapshot key %x: checksum mismatch", key)) || !strings.Contains(w, fmt.Sprintf(`"snapshot":%d`, seqs[0])) {
		t.Fatalf("warning %q does not name the snapshot's key and seq", w)
	}
}
