package eventlog

import (
	"fmt"
	"path/filepath"
	"reflect"
	"sync"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// LockFile is the file of the store in dir that the store's lock is on:
// Pebble's LOCK, which every Open of the store on the OS filesystem,
// read-only ones too, creates or truncates (O_CREAT|O_TRUNC: its change
// time moves) and then locks whole with an fcntl write lock (a POSIX record
// lock, F_SETLK), held by the process until its Log is closed or the
// process ends. So another process can tell whether any process has the
// store open by testing for that lock (F_OFD_GETLK) without taking it.
// A process that holds the lock must not open and close the file itself:
// closing any descriptor of a file releases the process's record locks on it.
func LockFile(dir string) string { return filepath.Join(dir, "LOCK") }

// openStores holds every store a Log of this process has open, so that a
// second Open of one is refused with ErrLocked before Pebble is asked.
// Pebble's own directory lock stays the authority between processes (an
// fcntl lock, which answers EAGAIN), but within one process it answers the OS
// filesystem's second lock with an untyped error (fcntl locks are held by the
// process, so Pebble keeps its own table of them), which only its text would
// tell apart. This table makes the answer a type.
var openStores struct {
	sync.Mutex
	m map[storeKey]bool
}

// storeKey names a store within this process: its filesystem, unwrapped to
// the one that holds the files (vfs.Root), and its directory, absolute and
// with symbolic links resolved on the OS filesystem, so that two spellings of
// one directory are one store.
type storeKey struct {
	fs  vfs.FS
	dir string
}

func keyOf(fs vfs.FS, dir string) (storeKey, bool) {
	root := vfs.Root(fs)
	if !reflect.TypeOf(root).Comparable() {
		// A filesystem that cannot be a map key is left to Pebble's lock.
		return storeKey{}, false
	}
	dir = filepath.Clean(dir)
	if root == vfs.Default {
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
		dir = realPath(dir)
	}
	return storeKey{fs: root, dir: dir}, true
}

// realPath is abs with symbolic links resolved in its longest part that
// exists: a store's directory may not have been made yet.
func realPath(abs string) string {
	rest := ""
	for p := abs; ; p = filepath.Dir(p) {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return filepath.Join(real, rest)
		}
		if p == filepath.Dir(p) {
			return abs
		}
		rest = filepath.Join(filepath.Base(p), rest)
	}
}

// claimStore records dir as open in this process, or returns ErrLocked if a
// Log of this process has it open already. The returned release forgets it.
func claimStore(fs vfs.FS, dir string) (release func(), err error) {
	k, ok := keyOf(fs, dir)
	if !ok {
		return func() {}, nil
	}
	openStores.Lock()
	defer openStores.Unlock()
	if openStores.m[k] {
		return nil, fmt.Errorf("%w in this process: %s", ErrLocked, dir)
	}
	if openStores.m == nil {
		openStores.m = make(map[storeKey]bool)
	}
	openStores.m[k] = true
	var once sync.Once
	return func() {
		once.Do(func() {
			openStores.Lock()
			defer openStores.Unlock()
			delete(openStores.m, k)
		})
	}, nil
}
