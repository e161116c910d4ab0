package eventlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The alive mark: the last moment the daemon knew itself alive, so that a
// restart counts as its absence only the time it was not running, not the
// time it ran and recorded nothing (lease.Open). It is not an event: the log
// is what happened, and a mark a second would bloat it and every replay.
//
// It is a file of its own beside Pebble's, in the store's directory, not a
// key: Pebble keeps a write made without a sync in its WAL writer's buffer,
// in the process, until a later sync or a full 32 KiB block, so a process
// killed in a quiet daemon loses every such key. A write to a file reaches
// the OS when the call returns, and the OS keeps it across the death of the
// process. The mark is never synced: a host that loses power may lose it,
// or keep an older one, and that only lengthens the absence counted at the
// next start, which delays expiries and never causes one.
//
//	alive: crc32c(4) ‖ time(8)    big-endian, Unix ns on the daemon's clock
//
// Pebble ignores a file whose name it does not know.
const aliveFile = "alive"

const aliveLen = 4 + 8

// PutAlive records t (Unix ns) as the last moment the daemon knew itself
// alive. It writes to the OS without a sync, and without Pebble's commit
// pipeline: it costs one write system call. It is refused on a read-only,
// closed or failed log. Safe for concurrent use; the last call wins.
func (l *Log) PutAlive(t int64) error {
	if l.opts.ReadOnly {
		return fmt.Errorf("eventlog: put the alive mark: the log is read-only")
	}
	if err := l.Err(); err != nil {
		return err
	}
	l.alive.Lock()
	defer l.alive.Unlock()
	if l.alive.closed {
		return ErrClosed
	}
	if l.alive.f == nil {
		f, err := l.opts.FS.OpenReadWrite(l.alivePath(), vfs.WriteCategoryUnspecified)
		if err != nil {
			return fmt.Errorf("eventlog: open %s: %w", l.alivePath(), err)
		}
		l.alive.f = f
	}
	b := l.alive.buf[:]
	binary.BigEndian.PutUint64(b[4:], uint64(t))
	binary.BigEndian.PutUint32(b, crc32.Checksum(b[4:], castagnoli))
	if _, err := l.alive.f.WriteAt(b, 0); err != nil {
		return fmt.Errorf("eventlog: write %s: %w", l.alivePath(), err)
	}
	return nil
}

// Alive returns the last moment PutAlive recorded, and false if none is
// stored: a store that never had one, or whose file a lost power left empty.
// Bytes that cannot be a mark (a torn write, a damaged file) give an error
// wrapping ErrCorrupt that names the file.
func (l *Log) Alive() (int64, bool, error) {
	f, err := l.opts.FS.Open(l.alivePath())
	if errors.Is(err, os.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("eventlog: open %s: %w", l.alivePath(), err)
	}
	defer f.Close()
	var b [aliveLen + 1]byte
	n, err := io.ReadFull(f, b[:])
	switch {
	case n == 0 && errors.Is(err, io.EOF):
		return 0, false, nil
	case err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF):
		return 0, false, fmt.Errorf("eventlog: read %s: %w", l.alivePath(), err)
	case n > aliveLen:
		return 0, false, fmt.Errorf("%w: %s holds more than %d bytes", ErrCorrupt, l.alivePath(), aliveLen)
	case n < aliveLen:
		return 0, false, fmt.Errorf("%w: %s holds %d bytes, want %d", ErrCorrupt, l.alivePath(), n, aliveLen)
	}
	if got, want := crc32.Checksum(b[4:aliveLen], castagnoli), binary.BigEndian.Uint32(b[:4]); got != want {
		return 0, false, fmt.Errorf("%w: %s: checksum mismatch (stored %08x, computed %08x)", ErrCorrupt, l.alivePath(), want, got)
	}
	return int64(binary.BigEndian.Uint64(b[4:aliveLen])), true, nil
}

func (l *Log) alivePath() string { return l.opts.FS.PathJoin(l.dir, aliveFile) }

// closeAlive closes the mark's file, if PutAlive opened it; later calls are
// refused with ErrClosed.
func (l *Log) closeAlive() error {
	l.alive.Lock()
	defer l.alive.Unlock()
	l.alive.closed = true
	if l.alive.f == nil {
		return nil
	}
	err := l.alive.f.Close()
	l.alive.f = nil
	if err != nil {
		return fmt.Errorf("eventlog: close %s: %w", l.alivePath(), err)
	}
	return nil
}
