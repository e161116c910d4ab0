// Package replay turns a log back into a lease table and checks that a log
// is one leaselog could have written.
//
// Rebuild is what a restart does: restore the newest snapshot that restores
// cleanly, then fold the events after it. Verify is what `leaselog replay
// --verify` and the tests do: fold the whole log from nothing, checking every
// invariant that can be checked offline, and compare every stored snapshot
// with the fold at its sequence number.
package replay

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/projection"
)

// Log is what replay reads: the event log's iteration and snapshots.
type Log interface {
	Iter(from uint64) *eventlog.Iter
	Query(q eventlog.Query) *eventlog.Iter
	Snapshots() ([]uint64, error)
	Snapshot(seq uint64) ([]byte, error)
	DurableSeq() uint64
}

// Stats says what a rebuild did.
type Stats struct {
	SnapshotSeq uint64   // the snapshot restored; 0 if none
	Skipped     []uint64 // snapshots that would not restore, newest first
	Events      int      // events folded after the snapshot
}

// Rebuild restores the newest snapshot that restores cleanly and folds the
// rest of the log onto it. A snapshot that fails (corrupt, or from another
// version) is skipped with a warning; with none left, the whole log is folded.
func Rebuild(log Log, logger zerolog.Logger) (*projection.Table, Stats, error) {
	var st Stats
	seqs, err := log.Snapshots()
	if err != nil {
		return nil, st, fmt.Errorf("replay: list snapshots: %w", err)
	}
	t := projection.New()
	for _, seq := range seqs {
		if seq > log.DurableSeq() {
			st.Skipped = append(st.Skipped, seq)
			logger.Warn().Uint64("snapshot", seq).Uint64("durable", log.DurableSeq()).Msg("replay: snapshot is past the end of the log; skipped")
			continue
		}
		restored, err := restore(log, seq)
		if err != nil {
			st.Skipped = append(st.Skipped, seq)
			logger.Warn().Err(err).Uint64("snapshot", seq).Msg("replay: snapshot skipped; falling back to an older one or the full log")
			continue
		}
		t, st.SnapshotSeq = restored, seq
		break
	}
	n, err := fold(t, log.Query(eventlog.Query{After: t.Seq(), ReadAhead: true}))
	st.Events = n
	if err != nil {
		return nil, st, err
	}
	return t, st, nil
}

func restore(log Log, seq uint64) (*projection.Table, error) {
	b, err := log.Snapshot(seq)
	if err != nil {
		return nil, err
	}
	t, err := projection.Restore(b)
	if err != nil {
		return nil, fmt.Errorf("snapshot at seq %d: %w", seq, err)
	}
	if t.Seq() != seq {
		return nil, fmt.Errorf("snapshot stored at seq %d holds a table at seq %d", seq, t.Seq())
	}
	return t, nil
}

// fold applies every event of it to t, in order. It fails on the first event
// that cannot be decoded or applied, naming its sequence number.
func fold(t *projection.Table, it *eventlog.Iter) (int, error) {
	n := 0
	for it.Next() {
		if err := t.Apply(it.Event()); err != nil {
			it.Close()
			return n, fmt.Errorf("replay: %w", err)
		}
		n++
	}
	if err := it.Close(); err != nil {
		return n, fmt.Errorf("replay: after seq %d: %w", t.Seq(), err)
	}
	return n, nil
}

// Report is what Verify found on a log that passed.
type Report struct {
	Events    int
	Snapshots int               // snapshots compared with the fold
	Table     *projection.Table // the full fold
}

// ErrMismatch is returned by Verify when a snapshot differs from the fold.
var ErrMismatch = errors.New("replay: snapshot differs from the full fold")

// Verify folds the whole log from nothing and checks: sequence numbers run
// from 1 without a gap; every event decodes and is a legal transition of the
// lease state machine, with fencing tokens growing per job (Apply refuses
// anything else); every type index names exactly the events of its type; and
// every stored snapshot equals the fold at its sequence number.
func Verify(log Log) (Report, error) {
	var rep Report
	snaps, err := log.Snapshots()
	if err != nil {
		return rep, fmt.Errorf("replay: list snapshots: %w", err)
	}
	at := make(map[uint64]bool, len(snaps))
	for _, s := range snaps {
		at[s] = true
	}
	t := projection.New()
	it := log.Query(eventlog.Query{ReadAhead: true})
	for it.Next() {
		e := it.Event()
		if e.Seq != t.Seq()+1 {
			it.Close()
			return rep, fmt.Errorf("replay: gap: seq %d follows seq %d", e.Seq, t.Seq())
		}
		if err := t.Apply(e); err != nil {
			it.Close()
			return rep, fmt.Errorf("replay: %w", err)
		}
		rep.Events++
		if at[e.Seq] {
			if err := compareSnapshot(log, t); err != nil {
				it.Close()
				return rep, err
			}
			rep.Snapshots++
		}
	}
	if err := it.Close(); err != nil {
		return rep, fmt.Errorf("replay: after seq %d: %w", t.Seq(), err)
	}
	if err := checkTypeIndexes(log, t); err != nil {
		return rep, err
	}
	rep.Table = t
	return rep, nil
}

func compareSnapshot(log Log, t *projection.Table) error {
	snap, err := restore(log, t.Seq())
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if !bytes.Equal(snap.Snapshot(), t.Snapshot()) {
		return fmt.Errorf("%w at seq %d:\n--- snapshot\n%s--- fold\n%s", ErrMismatch, t.Seq(), snap, t)
	}
	return nil
}

func checkTypeIndexes(log Log, t *projection.Table) error {
	for _, typ := range eventlog.Types() {
		it := log.Query(eventlog.Query{Type: typ})
		var n uint64
		for it.Next() {
			n++
		}
		if err := it.Close(); err != nil {
			return fmt.Errorf("replay: type index %s: %w", typ, err)
		}
		if want := t.Count(typ); n != want {
			return fmt.Errorf("replay: type index %s names %d events, the log holds %d", typ, n, want)
		}
	}
	return nil
}
