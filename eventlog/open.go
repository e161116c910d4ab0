package eventlog

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Open opens (creating if needed) the log stored in dir.
func Open(dir string, opts Options) (*Log, error) {
	if opts.FS == nil {
		opts.FS = vfs.Default
	}
	if opts.KeepSnapshots <= 0 {
		opts.KeepSnapshots = 3
	}
	if opts.OnFatal == nil {
		opts.OnFatal = defaultOnFatal(opts.Logger, dir)
	}
	if opts.memTableSize == 0 {
		// The log is write-once: a larger memtable means fewer flushes of
		// short-lived heartbeat records and fewer L0 files to compact.
		opts.memTableSize = 64 << 20
	}
	release, err := claimStore(opts.FS, dir)
	if err != nil {
		return nil, err
	}
	l := &Log{opts: opts, dir: dir, waitCh: make(chan struct{}), release: release}
	popts := &pebble.Options{
		FS:                 sizedWALs{opts.FS},
		Logger:             pebbleLogger{l: opts.Logger, fatal: l.fatal},
		ReadOnly:           opts.ReadOnly,
		FormatMajorVersion: pebble.FormatNewest,
		MemTableSize:       opts.memTableSize,
		CacheSize:          opts.CacheSize,
	}
	if bg := opts.Background; bg != nil {
		popts.EventListener = &pebble.EventListener{
			FlushBegin:      func(pebble.FlushInfo) { bg.Enter() },
			FlushEnd:        func(pebble.FlushInfo) { bg.Leave() },
			CompactionBegin: func(pebble.CompactionInfo) { bg.Enter() },
			CompactionEnd:   func(pebble.CompactionInfo) { bg.Leave() },
		}
	}
	db, err := openPebble(dir, popts)
	if err != nil {
		release()
		if errors.Is(err, syscall.EAGAIN) || errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w by another process: %s (%v)", ErrLocked, dir, err)
		}
		return nil, fmt.Errorf("eventlog: open %s: %w", dir, err)
	}
	l.db = db
	if err := l.Err(); err != nil {
		// Pebble called Fatalf while opening and carried on: the store is not
		// to be trusted, nor closed (see wedged), and stays claimed.
		return nil, fmt.Errorf("eventlog: open %s: %w", dir, err)
	}
	if err := l.checkFormat(); err != nil {
		l.closeDB()
		return nil, err
	}
	last, err := l.lastEventSeq()
	if err != nil {
		l.closeDB()
		return nil, err
	}
	if l.mu.run, l.timeIndexed, err = l.openTimeIndex(last); err != nil {
		l.closeDB()
		return nil, err
	}
	l.mu.next = last + 1
	l.durable.Store(last)
	return l, nil
}

// openPebble is pebble.Open, with its panics turned into errors: Pebble
// panics when a sync of the store's directory fails (atomicfs.Marker.Move:
// "fsync errors are unrecoverable"), after cleaning up what it opened. A store
// that cannot be opened is an error to report, not a crash.
func openPebble(dir string, opts *pebble.Options) (db *pebble.DB, err error) {
	defer func() {
		if r := recover(); r != nil {
			db, err = nil, fmt.Errorf("pebble panicked: %v", r)
		}
	}()
	return pebble.Open(dir, opts)
}

func (l *Log) checkFormat() error {
	v, closer, err := l.db.Get(metaFormatKey)
	switch {
	case errors.Is(err, pebble.ErrNotFound):
		l.format.Store(archiveFormat)
		if l.opts.ReadOnly {
			return nil // an empty store read offline
		}
		// A new store starts with a time index, empty and whole.
		b := l.db.NewBatch()
		defer b.Close()
		if err := errors.Join(b.Set(metaFormatKey, []byte{archiveFormat}, nil), b.Set(metaTimeIndexKey, []byte{1}, nil),
			l.db.Apply(b, pebble.Sync)); err != nil {
			return fmt.Errorf("eventlog: write key %q: %w", metaFormatKey, err)
		}
		return l.Err() // a Fatalf during the write
	case err != nil:
		return fmt.Errorf("eventlog: read key %q: %w", metaFormatKey, err)
	}
	defer closer.Close()
	if len(v) != 1 {
		return fmt.Errorf("%w: key %q holds %d bytes, want 1", ErrCorrupt, metaFormatKey, len(v))
	}
	if v[0] > storeFormat {
		return fmt.Errorf("eventlog: store format %d (this build reads up to %d): %w", v[0], storeFormat, ErrNewerFormat)
	}
	l.format.Store(int32(v[0]))
	return nil
}

func (l *Log) lastEventSeq() (uint64, error) {
	it, err := l.db.NewIter(&pebble.IterOptions{
		LowerBound: []byte{prefixEvent},
		UpperBound: []byte{prefixEvent + 1},
	})
	if err != nil {
		return 0, fmt.Errorf("eventlog: find last event: %w", err)
	}
	defer it.Close()
	if !it.Last() {
		return 0, it.Error()
	}
	return seqSuffix(it.Key())
}

// Close waits for staged commits to be waited on, then closes the store. On a
// failed log it returns the failure; if Pebble's write path may be unusable
// (after its Fatalf, or a panic), the store is not closed but left as a crash
// would leave it, lock included: the process is expected to exit, and the
// next open recovers the durable prefix.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.mu.closed = true
	l.mu.Unlock()
	l.inflight.Wait()
	aerr := l.closeAlive()
	wedged := l.wedged.Load()
	failure := l.Err()
	if wedged {
		return fmt.Errorf("eventlog: close: store left open after a fatal storage error: %w", failure)
	}
	err := l.db.Close()
	l.release()
	if err != nil {
		return errors.Join(failure, fmt.Errorf("eventlog: close: %w", err), aerr)
	}
	if aerr != nil {
		return errors.Join(failure, aerr)
	}
	return failure
}

// closeDB closes the store while Open fails, unless Pebble's write path may
// be unusable.
func (l *Log) closeDB() {
	if !l.wedged.Load() {
		_ = l.db.Close()
		l.release()
	}
}

// Exists reports whether dir holds a store (on fs; nil means the OS
// filesystem). A missing dir holds none.
func Exists(dir string, fs vfs.FS) (bool, error) {
	if fs == nil {
		fs = vfs.Default
	}
	if _, err := fs.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	desc, err := pebble.Peek(dir, fs)
	if err != nil {
		return false, fmt.Errorf("eventlog: look for a store in %s: %w", dir, err)
	}
	return desc.Exists, nil
}
