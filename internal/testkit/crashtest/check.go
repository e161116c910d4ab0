package crashtest

import (
	"bytes"
	"context"
	"fmt"
	"math/rand"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/replay"
)

// Dir is where the tests keep the store on their filesystems.
const Dir = leasetest.Dir

// Checked is what Check found in a store.
type Checked struct {
	Events int // events the store held when reopened
	// Tail is the events past the acknowledged ones: each must be one the run
	// attempted, which may be known only once the run is over (CheckAttempted).
	Tail []event.Event
}

// How Check opens a store.
type Mode int

const (
	// Offline opens the store read-only, as `leaselog replay --verify` does,
	// verifies it and rebuilds the table from its newest snapshot.
	Offline Mode = iota
	// Restart opens the store as the daemon does after a crash: read-write
	// (Pebble replays and flushes its WAL), then a lease.Service on it, which
	// rebuilds the table from the newest snapshot and appends daemon.started.
	Restart
)

func (m Mode) String() string {
	if m == Restart {
		return "restart"
	}
	return "offline"
}

// Check opens the store in Dir on fs, and checks what docs/design.md §7 promises of
// it after a crash (2, 3):
//
//   - it opens; replay.Verify passes: seqs from 1 without a gap, every event
//     decodes and is a legal transition, tokens grow, every snapshot equals
//     the fold at its seq, the type indexes name exactly the events;
//   - every acknowledged event is there, at its seq, with the same content;
//   - the newest snapshot is no older than the newest acknowledged one;
//   - the table rebuilt from the newest snapshot and the tail equals the full
//     fold: offline, replay.Rebuild's; on a restart, the service's live
//     table, with daemon.started, against the fold of the log it then holds.
func Check(fs vfs.FS, acked []event.Event, ackedSnapshot uint64, mode Mode) (Checked, error) {
	var c Checked
	if mode == Offline {
		if ok, err := eventlog.Exists(Dir, fs); err != nil || !ok {
			// A crash before the store was first created: nothing can have
			// been acknowledged.
			if len(acked) > 0 || err != nil {
				return c, fmt.Errorf("no store (%v), but seq 1..%d were acknowledged", err, len(acked))
			}
			return c, nil
		}
	}
	log, err := eventlog.Open(Dir, eventlog.Options{FS: fs, Logger: zerolog.Nop(), OnFatal: func(string) {}, ReadOnly: mode == Offline})
	if err != nil {
		return c, fmt.Errorf("reopen: %w", err)
	}
	defer log.Close()
	n := log.LastSeq()
	if len(acked) > int(n) {
		return c, fmt.Errorf("acknowledged events lost: the store ends at seq %d; seq %d..%d were acknowledged", n, n+1, len(acked))
	}
	it := log.Iter(1)
	for it.Next() {
		e := it.Event()
		c.Events++
		switch i := int(e.Seq) - 1; {
		case i < len(acked):
			if diff := SameEvent(e.Clone(), acked[i]); diff != "" {
				it.Close()
				return c, fmt.Errorf("acknowledged seq %d differs:\n%s", e.Seq, diff)
			}
		default:
			c.Tail = append(c.Tail, e.Clone())
		}
	}
	if err := it.Close(); err != nil {
		return c, fmt.Errorf("read: %w", err)
	}
	snaps, err := log.Snapshots()
	if err != nil {
		return c, fmt.Errorf("snapshots: %w", err)
	}
	if ackedSnapshot > 0 && (len(snaps) == 0 || snaps[0] < ackedSnapshot) {
		return c, fmt.Errorf("acknowledged snapshot at seq %d lost: the store holds snapshots %v", ackedSnapshot, snaps)
	}
	if mode == Restart {
		return c, checkRestart(log)
	}
	rep, err := replay.Verify(log)
	if err != nil {
		return c, fmt.Errorf("verify: %w", err)
	}
	rebuilt, _, err := replay.Rebuild(log, zerolog.Nop())
	if err != nil {
		return c, fmt.Errorf("rebuild: %w", err)
	}
	if !bytes.Equal(rebuilt.Snapshot(), rep.Table.Snapshot()) {
		return c, fmt.Errorf("rebuild (snapshot + tail) differs from the full fold:\n--- rebuild\n%s--- fold\n%s", rebuilt, rep.Table)
	}
	return c, nil
}

// checkRestart opens a service on log, as the daemon would, and checks that
// it appends daemon.started alone, that the log then verifies, and that the
// service's table (rebuilt from the newest snapshot and the tail) is the full
// fold of the log.
func checkRestart(log *eventlog.Log) error {
	before := log.LastSeq()
	svc, err := lease.Open(log, lease.Options{Config: leasetest.Timing(), Clock: clocktest.New(clocktest.Epoch.Add(time.Hour)),
		Entropy: rand.New(rand.NewSource(1)), SnapshotEvery: -1})
	if err != nil {
		return fmt.Errorf("restart: %w", err)
	}
	if got := log.LastSeq(); got != before+1 {
		return fmt.Errorf("restart appended seq %d..%d, want daemon.started alone", before+1, got)
	}
	var live []byte
	if err := svc.View(context.Background(), func(t *projection.Table) { live = t.Snapshot() }); err != nil {
		return err
	}
	rep, err := replay.Verify(log)
	if err != nil {
		return fmt.Errorf("verify after restart: %w", err)
	}
	if !bytes.Equal(live, rep.Table.Snapshot()) {
		return fmt.Errorf("after restart, the live table differs from the full fold:\n--- fold\n%s", rep.Table)
	}
	return nil
}

// CheckAttempted checks that every event of tail is the one attempted at its
// seq: attempted[i] has seq i+1.
func CheckAttempted(tail, attempted []event.Event) error {
	for _, e := range tail {
		i := int(e.Seq) - 1
		if i >= len(attempted) {
			return fmt.Errorf("seq %d is in the store, but the run attempted only seq 1..%d: %s", e.Seq, len(attempted), e.String())
		}
		if diff := SameEvent(e, attempted[i]); diff != "" {
			return fmt.Errorf("seq %d is not the event attempted at it:\n%s", e.Seq, diff)
		}
	}
	return nil
}

// Attempted returns every event log holds or was handed, durable or not, in
// seq order: what the run attempted. It reads events one by one (Get sees
// staged events too), so it works on a log that has failed.
func Attempted(log *eventlog.Log) ([]event.Event, error) {
	last := log.LastSeq()
	out := make([]event.Event, 0, last)
	for seq := uint64(1); seq <= last; seq++ {
		e, err := log.Get(seq)
		if err != nil {
			return nil, fmt.Errorf("attempted seq %d: %w", seq, err)
		}
		out = append(out, e)
	}
	return out, nil
}
