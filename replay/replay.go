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

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/projection"
)

// Source is what Rebuild and Verify both read: the events (in order, or by
// index), the stored snapshots, and the store's format. *eventlog.Log is one;
// a test wraps one to damage what it reads.
type Source interface {
	Query(q eventlog.Query) *eventlog.Iter
	Snapshots() ([]uint64, error)
	Snapshot(seq uint64) ([]byte, error)
	Format() int
}

// Log is what Rebuild uses: a Source, its snapshots read newest first,
// each once (a snapshot's value is read only to find it), how far it is
// durable (a snapshot past that is skipped), and, to upgrade a store of an
// older format, whether it may write and the archive it writes.
type Log interface {
	Source
	EachSnapshot(fn func(seq uint64, data []byte, err error) bool) error
	DurableSeq() uint64
	ReadOnly() bool
	PutArchive(recs []eventlog.Record, upgrade bool) error
}

// Checked is what Verify uses: a Source, and the indexes, archive and
// compactions it holds against the fold.
type Checked interface {
	Source
	ScanArchive(prefix []byte, fn func(key, value []byte) error) error
	CheckTimeIndex() error
	ScanCompacted(fn func(first, last uint64) error) error
}

// Stats says what a rebuild did.
type Stats struct {
	SnapshotSeq uint64   // the snapshot restored; 0 if none
	Skipped     []uint64 // snapshots that would not restore, newest first
	Events      int      // events folded after the snapshot
	Upgraded    int      // archive records written to bring an older store to the current format
}

// Rebuild restores the newest snapshot that restores cleanly and folds the
// rest of the log onto it. A snapshot that fails (corrupt, or from another
// version) is skipped with a warning; with none left, the whole log is folded.
//
// The table it returns holds what is live; the jobs that ended are in the
// log's archive, written with the events that ended them, and the table is
// left in RetireDrop mode. A store of an older format, which has no archive,
// gets one: the fold writes the records of every job that ended and the
// store is upgraded (Stats.Upgraded). Opened read-only, such a store is
// folded in RetireKeep mode instead, and nothing is written.
func Rebuild(log Log, logger zerolog.Logger) (*projection.Table, Stats, error) {
	var st Stats
	if log.Format() < eventlog.ArchiveFormat {
		return rebuildOlder(log, logger)
	}
	t := projection.New()
	err := log.EachSnapshot(func(seq uint64, data []byte, err error) bool {
		if seq > log.DurableSeq() {
			st.Skipped = append(st.Skipped, seq)
			logger.Warn().Uint64("snapshot", seq).Uint64("durable", log.DurableSeq()).Msg("replay: snapshot is past the end of the log; skipped")
			return true
		}
		var restored *projection.Table
		if err == nil {
			restored, err = restoreData(seq, data)
		}
		if err != nil {
			st.Skipped = append(st.Skipped, seq)
			logger.Warn().Err(err).Uint64("snapshot", seq).Msg("replay: snapshot skipped; falling back to an older one or the full log")
			return true
		}
		t, st.SnapshotSeq = restored, seq
		return false
	})
	if err != nil {
		return nil, st, fmt.Errorf("replay: read snapshots: %w", err)
	}
	t.SetRetire(projection.RetireDrop) // the archive has what the tail ends
	n, err := fold(t, log.Query(eventlog.Query{After: t.Seq(), ReadAhead: true}), nil)
	st.Events = n
	if err != nil {
		return nil, st, err
	}
	return t, st, nil
}

// rebuildOlder rebuilds from a store of an older format, which has no
// archive, and whose snapshots (of an older version) this build does not
// read: it folds the whole log. Opened for writing, it writes the archive
// records of what the fold retires as it goes, then marks the store as of
// the current format; a crash before the mark leaves the upgrade to be done
// again. Opened read-only, it keeps everything in memory and writes nothing.
func rebuildOlder(log Log, logger zerolog.Logger) (*projection.Table, Stats, error) {
	var st Stats
	t := projection.New()
	var put func() error
	if !log.ReadOnly() {
		logger.Warn().Int("format", log.Format()).Int("to", eventlog.ArchiveFormat).
			Msg("replay: store written by an older build: folding the whole log to write its archive")
		t.SetRetire(projection.RetireRecord)
		put = func() error {
			recs := t.TakeRetired()
			st.Upgraded += len(recs)
			return log.PutArchive(recs, false)
		}
	}
	n, err := fold(t, log.Query(eventlog.Query{ReadAhead: true}), put)
	st.Events = n
	if err != nil {
		return nil, st, err
	}
	if put == nil {
		return t, st, nil
	}
	if err := put(); err != nil {
		return nil, st, fmt.Errorf("replay: write archive: %w", err)
	}
	if err := log.PutArchive(nil, true); err != nil {
		return nil, st, fmt.Errorf("replay: upgrade store: %w", err)
	}
	t.SetRetire(projection.RetireDrop)
	logger.Info().Int("records", st.Upgraded).Msg("replay: archive written; store upgraded")
	return t, st, nil
}

func restore(log Source, seq uint64) (*projection.Table, error) {
	b, err := log.Snapshot(seq)
	if err != nil {
		return nil, err
	}
	return restoreData(seq, b)
}

// restoreData restores b, the snapshot stored at seq.
func restoreData(seq uint64, b []byte) (*projection.Table, error) {
	t, err := projection.Restore(b)
	if err != nil {
		return nil, fmt.Errorf("snapshot at seq %d: %w", seq, err)
	}
	if t.Seq() != seq {
		return nil, fmt.Errorf("snapshot stored at seq %d holds a table at seq %d", seq, t.Seq())
	}
	return t, nil
}

// fold applies every event of it to t, in order, skipping the seqs
// compactions removed (the iterator checks each gap). It fails on the first
// event that cannot be decoded or applied, naming its sequence number. put,
// if not nil, is called every so many events, to write what the fold
// retired.
func fold(t *projection.Table, it *eventlog.Iter, put func() error) (int, error) {
	n := 0
	for it.Next() {
		if err := apply(t, it); err != nil {
			it.Close()
			return n, fmt.Errorf("replay: %w", err)
		}
		n++
		if put != nil && n%65536 == 0 {
			if err := put(); err != nil {
				it.Close()
				return n, fmt.Errorf("replay: write archive: %w", err)
			}
		}
	}
	if err := it.Close(); err != nil {
		return n, fmt.Errorf("replay: after seq %d: %w", t.Seq(), err)
	}
	return n, nil
}

// apply folds the iterator's event into t, after the seqs compacted away
// before it.
func apply(t *projection.Table, it *eventlog.Iter) error {
	if first, last, ok := it.Compacted(); ok {
		if err := t.Skip(first, last); err != nil {
			return err
		}
	}
	return t.Apply(it.Event())
}

// Report is what Verify found on a log that passed.
type Report struct {
	Events    int
	Snapshots int               // snapshots compared with the fold
	Older     int               // snapshots of another version, which this build does not read
	Table     *projection.Table // the full fold
}

// ErrMismatch is returned by Verify when a snapshot differs from the fold.
var ErrMismatch = errors.New("replay: snapshot differs from the full fold")

// Verify folds the whole log from nothing and checks: sequence numbers run
// from 1 without a gap but those compactions removed, which they recorded
// (compacted below); every event decodes and is a legal transition of the
// lease state machine, with fencing tokens growing per job (Apply refuses
// anything else); every type index names exactly the events of its type;
// every stored snapshot equals the fold at its sequence number; the time
// index names exactly the runs of the events; and the archive holds exactly
// the records of what the fold retired. Nothing may compact the log while
// it runs.
func Verify(log Checked) (Report, error) {
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
	var c compacted
	it := log.Query(eventlog.Query{ReadAhead: true})
	for it.Next() {
		e := it.Event()
		first, last, gap := it.Compacted()
		if gap {
			c.gap(first, last)
		} else if e.Seq != t.Seq()+1 {
			it.Close()
			return rep, fmt.Errorf("replay: gap: seq %d follows seq %d", e.Seq, t.Seq())
		}
		if err := apply(t, it); err != nil {
			it.Close()
			return rep, fmt.Errorf("replay: %w", err)
		}
		c.event(e)
		rep.Events++
		if at[e.Seq] {
			err := compareSnapshot(log, t)
			switch {
			case errors.Is(err, projection.ErrSnapshotVersion):
				rep.Older++
			case err != nil:
				it.Close()
				return rep, err
			default:
				rep.Snapshots++
			}
		}
	}
	if err := it.Close(); err != nil {
		return rep, fmt.Errorf("replay: after seq %d: %w", t.Seq(), err)
	}
	if err := c.check(log); err != nil {
		return rep, err
	}
	if err := checkTypeIndexes(log, t, &c); err != nil {
		return rep, err
	}
	if err := log.CheckTimeIndex(); err != nil {
		return rep, fmt.Errorf("replay: %w", err)
	}
	if log.Format() >= eventlog.ArchiveFormat {
		if err := checkArchive(log, t); err != nil {
			return rep, err
		}
	}
	rep.Table = t
	return rep, nil
}

func compareSnapshot(log Source, t *projection.Table) error {
	snap, err := restore(log, t.Seq())
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	if !bytes.Equal(snap.Snapshot(), t.Snapshot()) {
		return fmt.Errorf("%w at seq %d:\n--- snapshot\n%s--- fold\n%s", ErrMismatch, t.Seq(), snap, t)
	}
	return nil
}

// checkTypeIndexes checks that each type index names as many events as the
// log holds of its type: the fold's count, but that a summary of heartbeats
// is counted as the heartbeats it stands for, and is an event of its own type.
func checkTypeIndexes(log Source, t *projection.Table, c *compacted) error {
	for _, typ := range event.Types() {
		it := log.Query(eventlog.Query{Type: typ})
		var n uint64
		for it.Next() {
			n++
		}
		if err := it.Close(); err != nil {
			return fmt.Errorf("replay: type index %s: %w", typ, err)
		}
		want := t.Count(typ)
		switch typ {
		case event.TypeHeartbeat:
			want -= c.beats
		case event.TypeHeartbeats:
			want = c.summaries
		}
		if n != want {
			return fmt.Errorf("replay: type index %s names %d events, the log holds %d", typ, n, want)
		}
	}
	return nil
}

// ErrArchiveMismatch is returned by Verify when the archive differs from what
// the fold retired.
var ErrArchiveMismatch = errors.New("replay: archive differs from the full fold")

func checkArchive(log Checked, t *projection.Table) error {
	want := make(map[string][]byte)
	for _, r := range t.RetiredRecords() {
		want[string(r.Key)] = r.Value
	}
	err := log.ScanArchive(nil, func(key, value []byte) error {
		v, ok := want[string(key)]
		switch {
		case !ok:
			return fmt.Errorf("%w: archive key %q names nothing the fold retired", ErrArchiveMismatch, key)
		case !bytes.Equal(v, value):
			return fmt.Errorf("%w: archive key %q holds %x, the fold %x", ErrArchiveMismatch, key, value, v)
		}
		delete(want, string(key))
		return nil
	})
	if err != nil {
		return err
	}
	for k := range want {
		return fmt.Errorf("%w: the fold retired %q (and %d more), the archive lacks it", ErrArchiveMismatch, k, len(want)-1)
	}
	return nil
}
