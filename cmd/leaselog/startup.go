package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"

	"github.com/rs/zerolog"
)

// minFreeBytes is the space a start beyond its write-ahead log needs at the
// least: a new MANIFEST, an OPTIONS file, the daemon.started record, and the
// token file.
const minFreeBytes = 1 << 20

// checkFreeSpace refuses to open the store in dir on a disk without the
// space its opening writes: Pebble flushes the write-ahead logs it finds
// (up to their size in tables) and, when that fails, retries for ever, so a
// start on a full disk would hang instead of failing. The error wraps
// syscall.ENOSPC. A dir that does not exist yet is measured at its parent.
func checkFreeSpace(dir string) error {
	var need int64 = minFreeBytes
	wals, _ := filepath.Glob(filepath.Join(dir, "*.log"))
	for _, w := range wals {
		if fi, err := os.Stat(w); err == nil {
			need += fi.Size()
		}
	}
	at := dir
	for {
		var st syscall.Statfs_t
		err := syscall.Statfs(at, &st)
		if err == nil {
			free := int64(st.Bavail) * st.Bsize
			if free < need {
				return fmt.Errorf("the disk of %s has %d bytes free, and opening the store needs about %d: %w", dir, free, need, syscall.ENOSPC)
			}
			return nil
		}
		parent := filepath.Dir(at)
		if !os.IsNotExist(err) || parent == at {
			return nil // not measurable: let the open say what is wrong
		}
		at = parent
	}
}

// startWatch watches the store's messages during start-up. Pebble reports
// a storage failure in its background work (a flush, a compaction) only as
// an error message, and retries: an open that hit one may never return. The
// first such message is kept for serve, which gives the start-up a grace to
// finish anyway and fails with the message if it does not.
type startWatch struct {
	once sync.Once
	errs chan string
}

func newStartWatch() *startWatch { return &startWatch{errs: make(chan string, 1)} }

// Run is a zerolog hook.
func (w *startWatch) Run(_ *zerolog.Event, level zerolog.Level, msg string) {
	if level >= zerolog.ErrorLevel && level < zerolog.NoLevel {
		w.once.Do(func() { w.errs <- strings.TrimSpace(msg) })
	}
}
