package eventlog

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// The archive is state derived from the log that its reader chose to keep
// on disk rather than in memory: the lease table's finished jobs, which no
// event can change any more but which callers still ask about. The log does
// not interpret records; it keeps them under their own prefix, writes them
// in the batch of the events they are derived from (Stage), and reads them
// back. Like a snapshot, the archive can always be derived again from the
// events; unlike a snapshot, it is complete: a reader of a store of the
// current format may rely on finding in it every record derived from a
// durable event.

// Record is one key and value of the archive. The key is the reader's own;
// the log stores it under the archive's prefix. It is an alias of a plain
// struct so that a reader (projection.Record) names the same type without
// importing the log.
type Record = struct{ Key, Value []byte }

// MaxArchiveKeyLen bounds an archive record's key.
const MaxArchiveKeyLen = 1024

func archiveKey(dst, key []byte) []byte { return append(append(dst, prefixArchive), key...) }

// addArchive writes recs into b, with scratch for the keys; it returns the
// scratch, grown.
func addArchive(b *pebble.Batch, recs []Record, scratch []byte) ([]byte, error) {
	for _, r := range recs {
		if len(r.Key) == 0 || len(r.Key) > MaxArchiveKeyLen {
			return scratch, fmt.Errorf("archive key of %d bytes (1 to %d)", len(r.Key), MaxArchiveKeyLen)
		}
		scratch = archiveKey(scratch[:0], r.Key)
		if err := b.Set(scratch, r.Value, nil); err != nil {
			return scratch, err
		}
	}
	return scratch, nil
}

func (l *Log) addArchiveLocked(b *pebble.Batch, recs []Record) (err error) {
	l.mu.scratch, err = addArchive(b, recs, l.mu.scratch)
	return err
}

// Format is the format of the store: CurrentFormat once this build opened
// it for writing (a store older than ArchiveFormat once PutArchive upgraded
// it); as it was, read-only. A store older than ArchiveFormat lacks the
// archive records of its events; whoever derives them writes them with
// PutArchive(recs, true).
func (l *Log) Format() int { return int(l.format.Load()) }

// ArchiveFormat is the first store format whose archive holds the record of
// every event.
const ArchiveFormat = archiveFormat

// CurrentFormat is the newest store format this build reads, and the one it
// writes: a store it opens for writing is raised to it.
const CurrentFormat = storeFormat

// PutArchive durably writes recs, in one batch ordered after every staged
// event, and, if upgrade is set, records that the store is of the current
// format: every archive record of every event is in it. An upgrade is how
// a store written by an older build gets its archive.
func (l *Log) PutArchive(recs []Record, upgrade bool) error {
	if l.opts.ReadOnly {
		return errors.New("eventlog: archive write to a store opened read-only")
	}
	b := l.db.NewBatch()
	_, err := addArchive(b, recs, nil)
	upgrade = upgrade && l.Format() < archiveFormat
	if err == nil && upgrade {
		err = b.Set(metaFormatKey, []byte{storeFormat}, nil)
	}
	if err != nil {
		b.Close()
		return fmt.Errorf("eventlog: archive write: %w", err)
	}
	if err := l.writeSynced(b, fmt.Sprintf("archive write of %d records", len(recs))); err != nil {
		return err
	}
	if upgrade {
		l.format.Store(storeFormat)
	}
	return nil
}

// Archived returns a copy of the archive record under key, or ErrNotFound. A
// record is visible once the batch that wrote it is staged; callers that
// answer from it wait, as for the events, until what they read is durable.
func (l *Log) Archived(key []byte) ([]byte, error) {
	done, err := l.reading()
	if err != nil {
		return nil, err
	}
	defer done()
	k := archiveKey(nil, key)
	v, closer, err := l.db.Get(k)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("eventlog: read archive key %q: %w", k, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), nil
}

// ScanArchive calls fn, in key order, on every archive record whose key
// starts with prefix. key and value are valid only during the call. An error
// from fn stops the scan and is returned.
func (l *Log) ScanArchive(prefix []byte, fn func(key, value []byte) error) error {
	return l.ScanArchiveFrom(prefix, nil, fn)
}

// ScanArchiveFrom is ScanArchive from the first key at or after from (nil:
// the prefix's first), seeking to it: a paged read costs its page, not what
// sorts before it. from is a whole key, its prefix included.
func (l *Log) ScanArchiveFrom(prefix, from []byte, fn func(key, value []byte) error) error {
	done, err := l.reading()
	if err != nil {
		return err
	}
	defer done()
	lower := archiveKey(nil, prefix)
	it, err := l.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: prefixEnd(lower)})
	if err != nil {
		return fmt.Errorf("eventlog: scan archive %q: %w", lower, err)
	}
	start := it.First
	if from != nil {
		start = func() bool { return it.SeekGE(archiveKey(nil, from)) }
	}
	for ok := start(); ok; ok = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			it.Close()
			return fmt.Errorf("eventlog: read archive key %q: %w", it.Key(), err)
		}
		if err := fn(it.Key()[1:], v); err != nil {
			it.Close()
			return err
		}
	}
	if err := it.Error(); err != nil {
		it.Close()
		return fmt.Errorf("eventlog: scan archive %q: %w", lower, err)
	}
	return it.Close()
}

// ReadOnly reports whether the log was opened read-only.
func (l *Log) ReadOnly() bool { return l.opts.ReadOnly }

// reading admits a read of Pebble, which panics once closed: it refuses one
// on a closed log, and makes Close wait for one under way.
func (l *Log) reading() (done func(), err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return nil, ErrClosed
	}
	l.inflight.Add(1)
	return l.inflight.Done, nil
}
