package eventlog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/leaselog/leaselog/event"
)

// A replicated log keeps its events first in another engine (package
// jetstream: a NATS JetStream stream), which is then the source of truth, and
// keeps this store as its cache: the same keyspace, indexes, archive and
// snapshots, rebuilt from the replica when lost. Two paths write it:
//
//   - Stage, for events this log appends: each batch is handed to the
//     replica under the log's mutex, in log order, as well as to Pebble, and
//     Commit.Wait returns once the replica has acknowledged it and Pebble
//     has synced it. A refusal by the replica fails the log like a failed
//     fsync (ErrFailed, wrapping the replica's error).
//   - StageImport, for events another daemon appended, read back from the
//     replica: written with the sequence numbers they already have.
//
// Each batch carries the replica's marker (its position in the replica, the
// replica's own encoding) under one meta key, so that the cache knows how
// far it holds the replica.

// Replica is the engine a replicated log appends to first. See Options.Replica.
type Replica interface {
	// Publish is called under the log's mutex, in log order, with each
	// batch of events as numbered by Stage. It starts making them durable
	// in the replica and returns the marker stored with the batch in this
	// store and a wait that returns once the replica has them durably, or
	// why not. An error (or a wait's) fails the log.
	Publish(evs []event.Event) (marker []byte, wait func() error, err error)
}

var metaReplicaKey = []byte{prefixMeta, 'r', 'e', 'p', 'l', 'i', 'c', 'a'}

// ReplicaMarker returns the marker of the last batch written with one
// (Stage with a Replica, or StageImport), or nil if there is none.
func (l *Log) ReplicaMarker() ([]byte, error) {
	v, closer, err := l.db.Get(metaReplicaKey)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("eventlog: read key %q: %w", metaReplicaKey, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// Fail fails the log with err, as a failed append would: every later
// append, and the service's Err, return it (wrapped in ErrFailed). A
// replica's holder calls it when the source of truth says this log may no
// longer append (its daemon was deposed), so that the daemon refuses every
// call from that moment, reads included, rather than at its next append.
func (l *Log) Fail(err error) error { return l.fail(err, false) }

// StageImport writes evs, numbered already (by the daemon that appended
// them to the replica), with the archive records derived from them and the
// replica's marker, as one batch. The first must be the log's next sequence
// number and the rest follow it without a gap; an acquired event's lease
// must be its own seq. Nothing is handed to the Replica. The batch enters
// Pebble's commit pipeline, visible to Get at once, and the caller calls
// Wait on the result before relying on it being durable: a catch-up stages
// many batches before it waits, so that they share fsyncs as concurrent
// appends do.
func (l *Log) StageImport(evs []event.Event, recs []Record, marker []byte) (*Commit, error) {
	return l.StageImportCompacted(evs, nil, recs, marker)
}

// StageImportCompacted is StageImport for the events of a compacted log (a
// checkpoint's, LoadCheckpoint): compacted are the runs of seqs compacted
// away before and among evs, in order, each before the event it precedes;
// the batch records them as a compaction does (compact.go), and so makes
// the store of format 3. The events may hold lease.heartbeats summaries.
func (l *Log) StageImportCompacted(evs []event.Event, compacted []Compacted, recs []Record, marker []byte) (*Commit, error) {
	if len(evs) == 0 {
		return nil, errors.New("eventlog: import of no events")
	}
	next, gi := evs[0].Seq, 0
	if len(compacted) > 0 {
		next = min(next, compacted[0].First)
	}
	for i := range evs {
		e := &evs[i]
		if err := validate(e); err != nil {
			return nil, err
		}
		for ; gi < len(compacted) && compacted[gi].First == next; gi++ {
			if compacted[gi].Last < next {
				return nil, fmt.Errorf("%w: import: compacted seqs %d..%d", ErrCorrupt, compacted[gi].First, compacted[gi].Last)
			}
			next = compacted[gi].Last + 1
		}
		if e.Seq != next {
			return nil, fmt.Errorf("%w: import: seq %d where %d was expected", ErrCorrupt, e.Seq, next)
		}
		next++
		if e.Type == event.TypeAcquired && e.Lease != e.Seq {
			return nil, fmt.Errorf("%w: import: acquired event seq %d holds lease %d", ErrCorrupt, e.Seq, e.Lease)
		}
	}
	if gi != len(compacted) {
		return nil, fmt.Errorf("%w: import: compacted seqs %d..%d come after the batch's events", ErrCorrupt, compacted[gi].First, compacted[gi].Last)
	}
	b := l.db.NewBatch()
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.importLocked(b, evs, compacted, recs, marker)
}

// Compacted is a run of seqs a compaction removed, first..last.
type Compacted struct{ First, Last uint64 }

func (l *Log) importLocked(b *pebble.Batch, evs []event.Event, compacted []Compacted, recs []Record, marker []byte) (*Commit, error) {
	if l.mu.closed {
		b.Close()
		return nil, ErrClosed
	}
	if err := l.Err(); err != nil {
		b.Close()
		return nil, err
	}
	first := evs[0].Seq
	if len(compacted) > 0 {
		first = min(first, compacted[0].First)
	}
	if first != l.mu.next {
		b.Close()
		return nil, fmt.Errorf("eventlog: import of seq %d: the log's next is %d", first, l.mu.next)
	}
	for _, g := range compacted {
		// Each run is whole (a checkpoint's runs are), and the log's
		// before it ends at an event: nothing to join.
		err := errors.Join(b.Set(gapKey(nil, g.First), binary.BigEndian.AppendUint64(nil, g.Last), nil),
			b.Set(gapEndKey(nil, g.Last), binary.BigEndian.AppendUint64(nil, g.First), nil))
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("eventlog: import of compacted seqs %d..%d: %w", g.First, g.Last, err)
		}
	}
	if len(compacted) > 0 && l.format.Load() < compactedFormat {
		l.format.Store(compactedFormat) // before the batch, as a compaction does
		if err := b.Set(metaFormatKey, []byte{compactedFormat}, nil); err != nil {
			b.Close()
			return nil, err
		}
	}
	run := l.mu.run
	for i := range evs {
		if err := l.addLocked(b, &evs[i], &run); err != nil {
			b.Close()
			return nil, fmt.Errorf("eventlog: import seq %d: %w", evs[i].Seq, err)
		}
	}
	what := span{first: first, last: evs[len(evs)-1].Seq, imported: true}
	err := l.addArchiveLocked(b, recs)
	if err == nil {
		err = b.Set(metaReplicaKey, marker, nil)
	}
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("eventlog: %s: %w", what, err)
	}
	if err := l.applyLocked(b, what); err != nil {
		return nil, err
	}
	l.mu.next, l.mu.run = what.last+1, run
	l.inflight.Add(1)
	return &Commit{log: l, batch: b, first: first, last: what.last}, nil
}

// publishLocked hands a staged batch to the Replica, if there is one, and
// records its marker in b. The caller holds mu. An error fails the log: the
// events may have reached the replica, and the caller may have folded them.
func (l *Log) publishLocked(b *pebble.Batch, evs []event.Event, what span) (wait func() error, err error) {
	if l.opts.Replica == nil {
		return nil, nil
	}
	marker, wait, err := l.opts.Replica.Publish(evs)
	if err == nil {
		err = b.Set(metaReplicaKey, marker, nil)
	}
	if err != nil {
		b.Close()
		return nil, l.fail(fmt.Errorf("eventlog: replicate %s: %w", what, err), false)
	}
	return wait, nil
}
