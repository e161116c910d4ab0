package eventlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// A snapshot is an opaque serialisation of the projection as of a sequence
// number, stored beside the log so that a restart replays only the tail. The
// log does not interpret it; it only guards it with a checksum and keeps the
// newest few.

// PutSnapshot durably stores data as the snapshot at seq, which must be
// durable already, and deletes all but the newest Options.KeepSnapshots.
func (l *Log) PutSnapshot(seq uint64, data []byte) error {
	if d := l.DurableSeq(); seq > d {
		return fmt.Errorf("eventlog: snapshot at seq %d is past the durable seq %d", seq, d)
	}
	if err := l.Err(); err != nil {
		return err
	}
	have, err := l.Snapshots()
	if err != nil {
		return err
	}
	// data is copied once, into a batch made to its size: a snapshot of a
	// large table is tens of megabytes, and a value built beside the batch
	// and a batch grown by doubling would hold three times that while it is
	// written. Pebble makes a new buffer for a batch's first record unless
	// the one it has is a power of two above it (Batch.init), so the first
	// is an empty record for the WAL alone. (Not WithInitialSizeBytes: the
	// batch goes back to Pebble's pool with it, and every batch taken after
	// would be made that large.)
	key := snapshotKey(nil, seq)
	b := l.db.NewBatchWithSize(snapshotBatchSize(len(key), len(data), len(have)))
	if err := b.LogData(nil, nil); err != nil {
		b.Close()
		return err
	}
	op := b.SetDeferred(len(key), 4+len(data))
	copy(op.Key, key)
	binary.LittleEndian.PutUint32(op.Value, crc32.Checksum(data, castagnoli))
	copy(op.Value[4:], data)
	if err := op.Finish(); err != nil {
		b.Close()
		return err
	}
	keep := l.opts.KeepSnapshots - 1
	for _, s := range have {
		if s == seq {
			continue
		}
		if keep > 0 {
			keep--
			continue
		}
		if err := b.Delete(snapshotKey(nil, s), nil); err != nil {
			b.Close()
			return err
		}
	}
	return l.writeSynced(b, fmt.Sprintf("snapshot at seq %d", seq))
}

// snapshotBatchSize is the size of a batch that holds an empty log record,
// sets a snapshot of n bytes under a key of k bytes and deletes up to old
// snapshots: Pebble's header of 12 bytes, and a record each of a kind byte,
// the lengths as uvarints (at most 5 bytes each), the key and, for the set,
// the checksum and data.
func snapshotBatchSize(k, n, old int) int {
	const header, record = 12, 1 + 5 + 5
	return header + (2+old)*record + (1+old)*k + 4 + n
}

// writeSynced writes b, which is not a batch of events, and waits for its
// sync. It shares the WAL with the events: it enters the pipeline under mu
// like a Stage, so that nothing reaches Pebble's write path once the log has
// failed, and a failure here fails the log. what names b in errors.
func (l *Log) writeSynced(b *pebble.Batch, what string) error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		b.Close()
		return ErrClosed
	}
	if err := l.Err(); err != nil {
		l.mu.Unlock()
		b.Close()
		return err
	}
	err := l.applyLocked(b, span{other: what})
	if err == nil {
		l.inflight.Add(1) // Close waits for the sync
	}
	l.mu.Unlock()
	if err != nil {
		return err // b is left to Pebble (see applyLocked)
	}
	defer l.inflight.Done()
	defer b.Close()
	if err := b.SyncWait(); err != nil {
		return l.fail(fmt.Errorf("eventlog: sync %s: %w", what, err), false)
	}
	return l.Err()
}

// Snapshots lists the sequence numbers of the stored snapshots, newest first.
func (l *Log) Snapshots() ([]uint64, error) {
	it, err := l.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{prefixSnapshot},
		UpperBound: []byte{prefixSnapshot + 1},
	})
	if err != nil {
		return nil, fmt.Errorf("eventlog: list snapshots: %w", err)
	}
	defer it.Close()
	// Forward, then reversed: a step backwards copies the value the
	// iterator leaves (Pebble's findPrevEntry), a whole snapshot; a step
	// forward copies none.
	var seqs []uint64
	for ok := it.First(); ok; ok = it.Next() {
		seq, err := seqSuffix(it.Key())
		if err != nil {
			return nil, err
		}
		seqs = append(seqs, seq)
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("eventlog: list snapshots: %w", err)
	}
	slices.Reverse(seqs)
	return seqs, nil
}

// Snapshot returns a copy of the snapshot stored at seq. A damaged snapshot
// gives an error wrapping ErrCorrupt that names its key.
func (l *Log) Snapshot(seq uint64) ([]byte, error) {
	key := snapshotKey(nil, seq)
	v, closer, err := l.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, fmt.Errorf("eventlog: snapshot at seq %d: %w", seq, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("eventlog: read snapshot key %x: %w", key, err)
	}
	defer closer.Close()
	if len(v) < 4 {
		return nil, fmt.Errorf("%w: snapshot key %x: %d bytes is shorter than its checksum", ErrCorrupt, key, len(v))
	}
	if got, want := crc32.Checksum(v[4:], castagnoli), binary.LittleEndian.Uint32(v); got != want {
		return nil, fmt.Errorf("%w: snapshot key %x: checksum mismatch (stored %08x, computed %08x)", ErrCorrupt, key, want, got)
	}
	return append([]byte(nil), v[4:]...), nil
}
