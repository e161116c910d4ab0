package replay_test

import (
	"context"
	"errors"
	"testing"

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
