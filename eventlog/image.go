package eventlog

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/leaselog/leaselog/event"
)

// An Image is the log as it is at one moment, once every event in it is
// durable: its events, compacted as far as they are, with the runs of seqs
// compactions removed, the compaction's cursor, and the replica's marker of
// its last batch. A replicated log's engine (package jetstream) keeps one
// beside its replica, a checkpoint, so that it can drop from the replica what
// the image holds, and loads one into an empty store
// (StageImportCompacted) to rebuild a cache the replica no longer holds
// whole. It reads the store through one Pebble snapshot: what is appended
// or compacted meanwhile is not in it.
type Image struct {
	Last      uint64 // the last event's seq; 0 for an empty log
	Marker    []byte // the replica's marker of the batch that wrote it (nil: none)
	Compacted uint64 // the compaction's cursor

	l    *Log
	snap *pebble.Snapshot
	done func()
}

// Image takes an image of the log as it is, and returns it once
// every event in it is durable (for a replicated log: acknowledged by the
// replica), or ctx ends. The caller reads it (Events) and closes it; the
// log does not close while it is open.
func (l *Log) Image(ctx context.Context) (*Image, error) {
	done, err := l.reading()
	if err != nil {
		return nil, err
	}
	c := &Image{l: l, snap: l.db.NewSnapshot(), done: done}
	if err := c.read(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func (c *Image) read(ctx context.Context) error {
	it, err := c.snap.NewIter(&pebble.IterOptions{LowerBound: []byte{prefixEvent}, UpperBound: []byte{prefixEvent + 1}})
	if err != nil {
		return fmt.Errorf("eventlog: image: %w", err)
	}
	if it.Last() {
		c.Last, err = seqSuffix(it.Key())
	} else {
		err = it.Error()
	}
	if err = errors.Join(err, it.Close()); err != nil {
		return fmt.Errorf("eventlog: image: find the last event: %w", err)
	}
	for _, m := range []struct {
		key []byte
		to  func([]byte) error
	}{
		{metaReplicaKey, func(v []byte) error { c.Marker = append([]byte(nil), v...); return nil }},
		{metaCompactedKey, func(v []byte) error {
			if len(v) != 8 {
				return fmt.Errorf("%w: key %q holds %d bytes, want 8", ErrCorrupt, metaCompactedKey, len(v))
			}
			c.Compacted = binary.BigEndian.Uint64(v)
			return nil
		}},
	} {
		v, closer, err := c.snap.Get(m.key)
		if errors.Is(err, pebble.ErrNotFound) {
			continue
		}
		if err != nil {
			return fmt.Errorf("eventlog: image: read key %q: %w", m.key, err)
		}
		err = m.to(v)
		closer.Close()
		if err != nil {
			return err
		}
	}
	// Every event in the view was staged; wait until it is durable too.
	return c.l.WaitDurable(ctx, c.Last)
}

// Events calls fn with every event of the checkpoint, in order, each after
// the run of seqs compacted away just before it, if any (ok). The event is
// valid during the call only. A gap that no compaction recorded is
// ErrCorrupt, as on every scan of the log.
func (c *Image) Events(fn func(e *event.Event, gap Compacted, ok bool) error) error {
	if c.Last == 0 {
		return nil
	}
	it := c.l.query(Query{}, c.snap, c.Last)
	for it.Next() {
		first, last, ok := it.Compacted()
		if err := fn(it.Event(), Compacted{First: first, Last: last}, ok); err != nil {
			it.Close()
			return err
		}
	}
	return it.Close()
}

// Close lets go of the checkpoint's view of the store.
func (c *Image) Close() {
	if c.snap != nil {
		c.snap.Close()
		c.snap = nil
		c.done()
	}
}
