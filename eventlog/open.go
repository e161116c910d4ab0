package eventlog

import (
	"errors"
	"fmt"
	"os"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/leaselog/leaselog/event"
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
	if !opts.ReadOnly {
		if err := checkReadable(dir, opts); err != nil {
			return nil, err
		}
	}
	return open(dir, opts)
}

// checkReadable refuses, before anything is written, a store this build
// cannot read: one whose format, or whose last record's version, is newer
// than this build's. Opened for writing, Pebble writes as it opens (a new
// MANIFEST and OPTIONS, its write-ahead log replayed into a table, a new
// log), and an older build must leave a newer build's store as it found it,
// so the store is first opened read-only, which writes nothing to its files
// (Pebble's LOCK is made if missing, empty; it holds no data), and checked
// as every open checks it. A store that is not there yet is made by the
// open that follows.
//
// A store whose format file (formatfile.go) names a format this build
// reads is not opened here: the file is the check, and it saves the second
// replay of the write-ahead log.
//
// A newer build's store is told by its format key, and by its last record:
// a build that changes what it stores in a way an older one cannot read
// raises the store format (keys.go), and a newer record version is where
// the newest writes are, at the end of the log.
func checkReadable(dir string, opts Options) error {
	exists, err := Exists(dir, opts.FS)
	if err != nil || !exists {
		return err
	}
	if ok, err := formatFileSaysReadable(opts.FS, dir); ok || err != nil {
		return err // the format file says (formatfile.go)
	}
	ro := opts
	ro.ReadOnly, ro.Replica, ro.OnCommit = true, nil, nil
	l, err := open(dir, ro)
	if err != nil {
		return err
	}
	return l.Close()
}

// open opens the store once the options have their defaults.
func open(dir string, opts Options) (*Log, error) {
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
	if err == nil {
		err = l.checkLastRecord(last)
	}
	if err != nil {
		l.closeDB()
		return nil, err
	}
	if l.mu.run, l.timeIndexed, err = l.openTimeIndex(last); err != nil {
		l.closeDB()
		return nil, err
	}
	if !opts.ReadOnly && l.format.Load() == storeFormat {
		if err := l.writeFormatFile(storeFormat); err != nil {
			l.closeDB()
			return nil, err
		}
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
		l.format.Store(storeFormat)
		if l.opts.ReadOnly {
			return nil // an empty store read offline
		}
		// A new store starts with a time index, empty and whole.
		b := l.db.NewBatch()
		defer b.Close()
		if err := errors.Join(b.Set(metaFormatKey, []byte{storeFormat}, nil), b.Set(metaTimeIndexKey, []byte{1}, nil),
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
	if l.opts.ReadOnly || v[0] < archiveFormat || v[0] == storeFormat {
		return nil // read as it is; or a store of format 1, raised when its archive is written
	}
	// What this build writes from now on the build before cannot read:
	// raise the format first, so that it refuses the store.
	b := l.db.NewBatch()
	defer b.Close()
	if err := errors.Join(b.Set(metaFormatKey, []byte{storeFormat}, nil), l.db.Apply(b, pebble.Sync)); err != nil {
		return fmt.Errorf("eventlog: raise the store format from %d to %d: write key %q: %w", v[0], storeFormat, metaFormatKey, err)
	}
	l.format.Store(storeFormat)
	return l.Err()
}

// checkLastRecord refuses a store whose last event is a record of a newer
// version than this build reads. A record it cannot read for another reason
// is left to the reads that meet it, which name it.
func (l *Log) checkLastRecord(last uint64) error {
	if last == 0 {
		return nil
	}
	v, closer, err := l.db.Get(eventKey(nil, last))
	if err != nil {
		return fmt.Errorf("eventlog: get seq %d: %w", last, err)
	}
	defer closer.Close()
	var e event.Event
	if err := event.DecodeAliased(last, v, &e); errors.Is(err, ErrNewerFormat) {
		return fmt.Errorf("eventlog: store of format %d: %w", l.format.Load(), err)
	}
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
