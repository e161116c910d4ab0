package eventlog_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"golang.org/x/sys/unix"

	"github.com/leaselog/leaselog/eventlog"
)

// A store open in this process is refused to a second Open however its
// directory is spelled, read-only included (Pebble locks a store it only
// reads), and is free again once the first Log is closed.
func TestSecondOpenInProcess(t *testing.T) {
	dir := t.TempDir()
	link := filepath.Join(t.TempDir(), "link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	l, err := eventlog.Open(dir, eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		dir  string
		opts eventlog.Options
	}{
		{"same path", dir, eventlog.Options{}},
		{"unclean path", dir + "/./", eventlog.Options{}},
		{"through a symlink", link, eventlog.Options{}},
		{"read-only", dir, eventlog.Options{ReadOnly: true}},
	} {
		if l2, err := eventlog.Open(tc.dir, tc.opts); !errors.Is(err, eventlog.ErrLocked) {
			if err == nil {
				l2.Close()
			}
			t.Errorf("second open, %s: %v, want ErrLocked", tc.name, err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = eventlog.Open(link, eventlog.Options{})
	if err != nil {
		t.Fatalf("open after close: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// An Open that fails leaves the store free for the next.
func TestFailedOpenReleasesStore(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	if err := os.WriteFile(dir, nil, 0o644); err != nil { // a file where the store's directory goes
		t.Fatal(err)
	}
	if _, err := eventlog.Open(dir, eventlog.Options{}); err == nil || errors.Is(err, eventlog.ErrLocked) {
		t.Fatalf("open over a file: %v, want an error other than ErrLocked", err)
	}
	if err := os.Remove(dir); err != nil {
		t.Fatal(err)
	}
	l, err := eventlog.Open(dir, eventlog.Options{})
	if err != nil {
		t.Fatalf("open after a failed open: %v", err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// In-memory stores are told apart by their filesystem: the same directory on
// two MemFS is two stores, on one MemFS one.
func TestSecondOpenInMemory(t *testing.T) {
	fs := vfs.NewMem()
	l, err := eventlog.Open("data", eventlog.Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := eventlog.Open("data", eventlog.Options{FS: fs}); !errors.Is(err, eventlog.ErrLocked) {
		t.Fatalf("second open on one MemFS: %v, want ErrLocked", err)
	}
	other, err := eventlog.Open("data", eventlog.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatalf("open on another MemFS: %v", err)
	}
	other.Close()
}

// LockFile names the file whose lock holds the store: locked whole, for
// writing, by the process while its Log is open, and free once it is
// closed. The test looks with an open file description lock test
// (F_OFD_GETLK), which sees the process's own record locks, on a descriptor
// kept open until the Log is closed (closing one earlier would release them).
func TestLockFile(t *testing.T) {
	dir := t.TempDir()
	l, err := eventlog.Open(dir, eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(eventlog.LockFile(dir))
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	defer f.Close()
	lockOf := func() unix.Flock_t {
		t.Helper()
		lk := unix.Flock_t{Type: unix.F_WRLCK}
		if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_GETLK, &lk); err != nil {
			t.Fatal(err)
		}
		return lk
	}
	if lk := lockOf(); lk.Type != unix.F_WRLCK || lk.Start != 0 || lk.Len != 0 || int(lk.Pid) != os.Getpid() {
		t.Errorf("while open: lock %+v, want a write lock on the whole file by pid %d", lk, os.Getpid())
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if lk := lockOf(); lk.Type != unix.F_UNLCK {
		t.Errorf("once closed: lock %+v, want none", lk)
	}
}
