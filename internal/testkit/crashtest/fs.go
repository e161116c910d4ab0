package crashtest

import (
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// WriteCounter wraps a filesystem and calls a function before every write
// operation on it: every create, write, sync, rename, remove, link, lock and
// preallocation, on any file of the store (WAL, MANIFEST, sstables, markers,
// OPTIONS). Before the operation runs is where a crash at it leaves the
// store, so the function may take a vfs.MemFS.CrashClone there: the k-th
// call is the crash at the k-th write. It may also return an error, which the
// operation then fails with (errorfs injection).
//
// The function is called from whichever goroutine does the write (the
// service's, Pebble's WAL flusher, its flushes and compactions), possibly
// from several at once.
type WriteCounter struct {
	fs  *errorfs.FS
	n   atomic.Int64
	off atomic.Bool
	at  func(k int64, op errorfs.Op) error
}

// CountWrites wraps fs; at is called with k = 0, 1, 2, ... for its writes.
func CountWrites(fs vfs.FS, at func(k int64, op errorfs.Op) error) *WriteCounter {
	w := &WriteCounter{at: at}
	w.fs = errorfs.Wrap(fs, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if op.Kind.ReadOrWrite() != errorfs.OpIsWrite || w.off.Load() {
			return nil
		}
		return w.at(w.n.Add(1)-1, op)
	}))
	return w
}

// FS is the counting filesystem.
func (w *WriteCounter) FS() vfs.FS { return w.fs }

// Writes is how many write operations have been counted.
func (w *WriteCounter) Writes() int64 { return w.n.Load() }

// Stop stops counting: later writes pass through untouched.
func (w *WriteCounter) Stop() { w.off.Store(true) }
