package eventlog

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A checkpoint is a copy of the store taken while it runs (Pebble's
// DB.Checkpoint): its tables, hard-linked where the copy's filesystem is the
// store's, else copied, with its MANIFEST, OPTIONS and write-ahead logs
// copied. It is a store as a crash at one moment would have left it: every
// batch up to some point, whole, and none after. It opens as any store does.
//
// It holds every event acknowledged before Checkpoint was called. An event
// is acknowledged only once Commit.Wait has returned, after markDurable has
// raised the durable mark past it; Checkpoint reads that mark first, and
// Pebble copies the write-ahead logs after syncing them (WithFlushedWAL),
// which covers every batch already in its commit pipeline. So the copy holds
// every event up to the mark it read, and the events staged after, up to
// where the copy of the logs ended — always a prefix of the log, for batches
// enter Pebble in sequence order.
//
// The copy holds Pebble's files only: not the alive mark (alive.go), so that
// a store restored from it counts its downtime from its last event, which is
// what a copy knows; and not the store's LOCK, which Pebble makes afresh and
// whose lock, an fcntl lock of the process, no copy could carry. Nothing
// else in the directory (a daemon's token) is a file of the store.

// ErrTarget is returned, wrapped with the reason, by Checkpoint when the
// directory it is to write cannot take a copy: it exists and is not an empty
// directory, its parent is not a directory, it is inside the store's own
// directory, or it cannot be written. Nothing was written.
var ErrTarget = errors.New("eventlog: not a directory for a copy")

// CheckpointInfo says what Checkpoint wrote.
type CheckpointInfo struct {
	// Seq is the copy's last event: it holds every event up to Seq, and
	// none after.
	Seq uint64
	// Durable is the log's durable mark when the copy began: every event
	// acknowledged before Checkpoint was called is at or below it, and
	// Seq >= Durable.
	Durable uint64
	Files   int   // files in the copy
	Bytes   int64 // their size, whether hard-linked or copied
}

// Checkpoint writes a consistent copy of the store into dir (see above),
// which must not exist or be an empty directory, and whose parent must
// exist. The copy is made beside dir, in a hidden directory named after it
// (".NAME.partial-XXXXXXXX"), opened read-only to learn its last event, and
// only then renamed to dir, so that dir is a whole copy or nothing: a
// process killed meanwhile leaves the hidden directory, which is no backup
// and may be removed. A dir that exists keeps its permissions (the copy
// takes them, on the OS filesystem); one made is made as Pebble makes a
// store's.
//
// The log goes on appending meanwhile; Close waits for a Checkpoint in
// progress. It is refused on a closed, failed or read-only log.
func (l *Log) Checkpoint(dir string) (CheckpointInfo, error) {
	if l.opts.ReadOnly {
		return CheckpointInfo{}, errors.New("eventlog: checkpoint: the log is read-only")
	}
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return CheckpointInfo{}, ErrClosed
	}
	l.inflight.Add(1)
	l.mu.Unlock()
	defer l.inflight.Done()
	if err := l.Err(); err != nil { // Pebble's write path may be unusable: LogData is a write
		return CheckpointInfo{}, err
	}
	fs := l.opts.FS
	dir = filepath.Clean(dir)
	mode, err := l.checkTarget(dir)
	if err != nil {
		return CheckpointInfo{}, err
	}
	tmp, err := makePartial(fs, dir)
	if err != nil {
		return CheckpointInfo{}, err
	}
	info, err := l.checkpointIn(tmp, dir, mode)
	if rerr := fs.RemoveAll(tmp); rerr != nil && err == nil {
		err = fmt.Errorf("eventlog: checkpoint: remove %s: %w", tmp, rerr)
	}
	return info, err
}

// checkpointIn makes the copy in tmp/store, checks it, and renames it to dir.
func (l *Log) checkpointIn(tmp, dir string, mode os.FileMode) (CheckpointInfo, error) {
	fs := l.opts.FS
	// Read before the copy begins: every event acknowledged by now is at or
	// below it (see above).
	info := CheckpointInfo{Durable: l.durable.Load()}
	copyDir := fs.PathJoin(tmp, "store")
	if err := l.db.Checkpoint(copyDir, pebble.WithFlushedWAL()); err != nil {
		return CheckpointInfo{}, fmt.Errorf("eventlog: checkpoint into %s: %w", dir, err)
	}
	seq, files, bytes, err := inspectCopy(fs, copyDir, l.opts)
	if err != nil {
		return CheckpointInfo{}, err
	}
	if seq < info.Durable {
		// Pebble promises otherwise: a copy that lost acknowledged events is
		// not a backup.
		return CheckpointInfo{}, fmt.Errorf("eventlog: checkpoint into %s holds events up to seq %d, short of seq %d, durable when it began", dir, seq, info.Durable)
	}
	info.Seq, info.Files, info.Bytes = seq, files, bytes
	if mode != 0 && vfs.Root(fs) == vfs.Default {
		if err := os.Chmod(copyDir, mode); err != nil {
			return CheckpointInfo{}, fmt.Errorf("eventlog: checkpoint: %w", err)
		}
	}
	if err := renameOver(fs, copyDir, dir); err != nil {
		return CheckpointInfo{}, fmt.Errorf("%w: %s: %w", ErrTarget, dir, err)
	}
	if err := syncDir(fs, fs.PathDir(dir)); err != nil {
		return info, fmt.Errorf("eventlog: checkpoint into %s: %w", dir, err)
	}
	return info, nil
}

// checkTarget checks that dir can take a copy, and returns its permissions
// if it exists (0 if not).
func (l *Log) checkTarget(dir string) (os.FileMode, error) {
	fs := l.opts.FS
	parent := fs.PathDir(dir)
	if fi, err := fs.Stat(parent); err != nil {
		return 0, fmt.Errorf("%w: %s: its parent: %w", ErrTarget, dir, err)
	} else if !fi.IsDir() {
		return 0, fmt.Errorf("%w: %s: its parent %s is not a directory", ErrTarget, dir, parent)
	}
	if vfs.Root(fs) == vfs.Default {
		store, target := realPath(absPath(l.dir)), realPath(absPath(dir))
		if target == store || strings.HasPrefix(target, store+string(filepath.Separator)) {
			return 0, fmt.Errorf("%w: %s is inside the store's directory %s", ErrTarget, dir, l.dir)
		}
	}
	fi, err := fs.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return 0, nil
	case err != nil:
		return 0, fmt.Errorf("%w: %s: %w", ErrTarget, dir, err)
	case !fi.IsDir():
		return 0, fmt.Errorf("%w: %s exists and is not a directory", ErrTarget, dir)
	}
	names, err := fs.List(dir)
	if err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrTarget, dir, err)
	}
	if len(names) > 0 {
		return 0, fmt.Errorf("%w: %s exists and is not empty", ErrTarget, dir)
	}
	return fi.Mode().Perm(), nil
}

// makePartial makes the hidden directory beside dir that a copy is made in.
func makePartial(fs vfs.FS, dir string) (string, error) {
	var b [4]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("eventlog: checkpoint: %w", err)
	}
	tmp := fs.PathJoin(fs.PathDir(dir), "."+fs.PathBase(dir)+".partial-"+hex.EncodeToString(b[:]))
	if _, err := fs.Stat(tmp); err == nil {
		return "", fmt.Errorf("eventlog: checkpoint: %s exists", tmp)
	}
	if err := fs.MkdirAll(tmp, 0o700); err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrTarget, dir, err)
	}
	return tmp, nil
}

// inspectCopy opens the copy in dir read-only, as a restore would, and
// returns its last event, its number of files and their size.
func inspectCopy(fs vfs.FS, dir string, opts Options) (seq uint64, files int, bytes int64, err error) {
	names, err := fs.List(dir)
	if err != nil {
		return 0, 0, 0, fmt.Errorf("eventlog: checkpoint: %w", err)
	}
	for _, name := range names {
		fi, err := fs.Stat(fs.PathJoin(dir, name))
		if err != nil {
			return 0, 0, 0, fmt.Errorf("eventlog: checkpoint: %w", err)
		}
		files, bytes = files+1, bytes+fi.Size()
	}
	cp, err := Open(dir, Options{FS: fs, Logger: opts.Logger, ReadOnly: true, CacheSize: opts.CacheSize,
		// A copy Pebble finds broken is an error of this call, not a
		// reason to stop the daemon: the failure is recorded and returned.
		OnFatal: func(string) {}})
	if err != nil {
		return 0, 0, 0, fmt.Errorf("eventlog: checkpoint: open the copy: %w", err)
	}
	seq = cp.LastSeq()
	if err := cp.Close(); err != nil {
		return 0, 0, 0, fmt.Errorf("eventlog: checkpoint: close the copy: %w", err)
	}
	return seq, files, bytes, nil
}

// renameOver renames the copy to dir. On the OS filesystem it is rename(2)
// itself, which replaces an empty directory and fails on one that is not, so
// that whatever came into dir since it was checked stays; Go's os.Rename
// refuses any directory in the way.
func renameOver(fs vfs.FS, from, to string) error {
	if vfs.Root(fs) == vfs.Default {
		if err := syscall.Rename(from, to); err != nil {
			return &os.LinkError{Op: "rename", Old: from, New: to, Err: err}
		}
		return nil
	}
	return fs.Rename(from, to)
}

func absPath(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return p
}

// syncDir makes a directory's entries durable (a rename in it).
func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
