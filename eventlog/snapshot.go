package eventlog

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"slices"
	"sync"

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
	var gone []uint64
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
		gone = append(gone, s)
	}
	if err := l.writeSynced(b, fmt.Sprintf("snapshot at seq %d", seq)); err != nil {
		l.snaps.forget()
		return err
	}
	l.snaps.update(seq, gone)
	return nil
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
//
// The list is read from the store once and then kept as the log writes and
// deletes snapshots: a snapshot's key shares its block with its value, tens
// of MB at a million jobs, so that every listing from the store would
// decompress each snapshot whole (CompactJob lists them for every job).
func (l *Log) Snapshots() ([]uint64, error) {
	l.snaps.Lock()
	defer l.snaps.Unlock()
	if !l.snaps.known {
		seqs, err := l.listSnapshots()
		if err != nil {
			return nil, err
		}
		l.snaps.seqs, l.snaps.known = seqs, true
	}
	return slices.Clone(l.snaps.seqs), nil
}

// snapList is the log's list of its snapshots' seqs, newest first, once
// known. Writes that add or delete snapshots update it once durable; a
// write that failed makes it unknown again, to be read from the store.
type snapList struct {
	sync.Mutex
	known bool
	seqs  []uint64
}

// update records that a snapshot at put (0: none) was written and those at
// gone deleted.
func (s *snapList) update(put uint64, gone []uint64) {
	s.Lock()
	defer s.Unlock()
	if !s.known {
		return
	}
	s.seqs = slices.DeleteFunc(s.seqs, func(q uint64) bool { return q == put || slices.Contains(gone, q) })
	if put != 0 {
		s.seqs = append(s.seqs, put)
		slices.SortFunc(s.seqs, func(a, b uint64) int { return cmp.Compare(b, a) })
	}
}

// forget makes the list unknown: the store's is read again when next asked.
func (s *snapList) forget() {
	s.Lock()
	s.known = false
	s.Unlock()
}

// listSnapshots reads the seqs of the snapshots from the store.
func (l *Log) listSnapshots() ([]uint64, error) {
	it, err := l.db.NewIter(snapshotRange())
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
	data, err := checkSnapshot(key, v)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), data...), nil
}

// EachSnapshot calls fn with the stored snapshots, newest first, until fn
// returns false: with each one's data, valid until fn returns, or with the
// error reading it (wrapping ErrCorrupt and naming its key if it is
// damaged), after which the walk goes on to an older one if fn returns
// true. It is what a restart reads to find the newest snapshot that
// restores, reading each value once, from the iterator that finds its key:
// positioning an iterator on a snapshot's key decompresses the block its
// value fills (tens of MB for a table of a million jobs, more than Pebble's
// block cache keeps), so that Snapshots then Snapshot read the newest twice,
// and read every other one. The error it returns is the walk's own: a key
// that names no seq, or a read that stops the iterator.
func (l *Log) EachSnapshot(fn func(seq uint64, data []byte, err error) bool) error {
	it, err := l.db.NewIter(snapshotRange())
	if err != nil {
		return fmt.Errorf("eventlog: read snapshots: %w", err)
	}
	defer it.Close()
	for ok := it.Last(); ok; ok = it.Prev() {
		seq, err := seqSuffix(it.Key())
		if err != nil {
			return err
		}
		v, err := it.ValueAndErr()
		var data []byte
		if err != nil {
			err = fmt.Errorf("eventlog: read snapshot key %x: %w", it.Key(), err)
		} else {
			data, err = checkSnapshot(it.Key(), v)
		}
		if !fn(seq, data, err) {
			return nil
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("eventlog: read snapshots: %w", err)
	}
	return nil
}

// snapshotRange bounds an iterator to the snapshots' keys.
func snapshotRange() *pebble.IterOptions {
	return &pebble.IterOptions{LowerBound: []byte{prefixSnapshot}, UpperBound: []byte{prefixSnapshot + 1}}
}

// checkSnapshot returns the data of v, the value stored under the snapshot
// key key, once its checksum holds.
func checkSnapshot(key, v []byte) ([]byte, error) {
	if len(v) < 4 {
		return nil, fmt.Errorf("%w: snapshot key %x: %d bytes is shorter than its checksum", ErrCorrupt, key, len(v))
	}
	if got, want := crc32.Checksum(v[4:], castagnoli), binary.LittleEndian.Uint32(v); got != want {
		return nil, fmt.Errorf("%w: snapshot key %x: checksum mismatch (stored %08x, computed %08x)", ErrCorrupt, key, want, got)
	}
	return v[4:], nil
}
