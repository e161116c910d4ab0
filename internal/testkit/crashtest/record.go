// Package crashtest is what leaselog's crash and fault tests share: a
// filesystem that counts write operations (and so can crash the store at any
// one of them), a record of what the lease service acknowledged, a driver
// that takes a real lease.Service through every transition, and a checker
// that reopens a store as a restart would and holds it to docs/design.md §7:
//
//	run:      Driver ──commands──► lease.Service ──► eventlog ──► CountWrites(MemFS)
//	              │ each command that returned: its events, read back          │ op k
//	              ▼                                                            ▼
//	          Record (acknowledged events, newest snapshot)       CrashClone(UnsyncedDataPercent)
//	                              │ Mark at op k                               │
//	                              └────────────► Check(clone, acked) ◄─────────┘
//	                                   opens, verifies, restarts, compares
//
// Acknowledged means the command returned to its caller without failing: its
// events were synced before it did, so every crash after that point must keep
// them, with the same content. Events past the acknowledged ones may survive
// a crash or not, but each must be one the service attempted, at its seq.
package crashtest

import (
	"bytes"
	"errors"
	"fmt"
	"sync"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/lease"
)

// Record is what a run acknowledged. It is safe for concurrent use: the
// driver adds to it while crash points read marks of it.
type Record struct {
	mu    sync.Mutex
	acked []event.Event // by seq; only ever appended to, so a prefix can be shared
	snap  uint64        // the newest snapshot a returned command had written
}

// Mark is a point in a Record: what had been acknowledged at one moment.
type Mark struct {
	Events   int    // the first Events acknowledged events
	Snapshot uint64 // the newest acknowledged snapshot, or 0
}

// Mark returns what is acknowledged now. A crash point takes it just before
// it clones the store: everything it counts had been synced by then.
func (r *Record) Mark() Mark {
	r.mu.Lock()
	defer r.mu.Unlock()
	return Mark{Events: len(r.acked), Snapshot: r.snap}
}

// Acked returns the events acknowledged up to m, in seq order. The slice is
// shared and must not be modified.
func (r *Record) Acked(m Mark) []event.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.acked[:m.Events:m.Events]
}

// Ack records that a command which appended the events (before, after] of
// log returned without failing. It reads them back from log, where they are
// durable by now, and records the newest snapshot the log holds (a returned
// command waited for every snapshot it wrote).
func (r *Record) Ack(log *eventlog.Log, before, after uint64) error {
	snaps, err := log.Snapshots()
	if err != nil {
		return fmt.Errorf("crashtest: acknowledged snapshots: %w", err)
	}
	var evs []event.Event
	if after > before {
		if d := log.DurableSeq(); d < after {
			return fmt.Errorf("crashtest: acknowledged seq %d..%d, but the log's durable seq is %d", before+1, after, d)
		}
		it := log.Query(eventlog.Query{After: before, Limit: int(after - before)})
		for it.Next() {
			evs = append(evs, it.Event().Clone())
		}
		if err := it.Close(); err != nil {
			return fmt.Errorf("crashtest: read back seq %d..%d: %w", before+1, after, err)
		}
		if len(evs) != int(after-before) {
			return fmt.Errorf("crashtest: read back %d events of seq %d..%d", len(evs), before+1, after)
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range evs {
		if n := len(r.acked); n > 0 && r.acked[n-1].Seq >= e.Seq {
			// Acknowledged already.
			if diff := SameEvent(e, r.acked[e.Seq-1]); diff != "" {
				return fmt.Errorf("crashtest: seq %d read back differently:\n%s", e.Seq, diff)
			}
			continue
		}
		if want := uint64(len(r.acked)) + 1; e.Seq != want {
			return fmt.Errorf("crashtest: seq %d acknowledged while seq %d was not", e.Seq, want)
		}
		r.acked = append(r.acked, e)
	}
	if len(snaps) > 0 {
		r.snap = max(r.snap, snaps[0])
	}
	return nil
}

// IsFailure reports whether err says the store failed under the command: its
// events, if any, may not be durable, and must not count as acknowledged.
func IsFailure(err error) bool {
	return errors.Is(err, lease.ErrFailed) || errors.Is(err, eventlog.ErrFailed) || errors.Is(err, eventlog.ErrClosed)
}

// SameEvent reports how got differs from want, or "" if it does not.
func SameEvent(got, want event.Event) string {
	if got.Seq == want.Seq && got.ID == want.ID && got.Type == want.Type && got.Time == want.Time &&
		got.Job == want.Job && got.Lease == want.Lease && got.Worker == want.Worker && got.Kind == want.Kind &&
		got.Outcome == want.Outcome && got.Mode == want.Mode && got.Ref == want.Ref && got.Reason == want.Reason &&
		got.Gap == want.Gap && bytes.Equal(got.Spec, want.Spec) && bytes.Equal(got.Result, want.Result) {
		return ""
	}
	return fmt.Sprintf("got  %s (id %s, time %d)\nwant %s (id %s, time %d)", got.String(), got.ID, got.Time, want.String(), want.ID, want.Time)
}
