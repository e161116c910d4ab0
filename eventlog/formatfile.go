package eventlog

import (
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// The format file: the store's format (keys.go) in a file of its own beside
// Pebble's, so that an open for writing can refuse a newer build's store
// without first opening it read-only (checkReadable), which replays the
// write-ahead log once more: after a SIGKILL, a memtable's worth of it.
//
//	FORMAT: one byte, the format
//
// A writable open writes it, synced, once the format key holds this build's
// format, and only then: the file never names a format older than the key's.
// A store whose file is missing (made by a build before the file, or of
// format 1, raised when its archive is written) or unreadable is checked by
// the read-only open, as before. A build that raises the format must write
// the file in the same open, before anything else of the new format, or
// remove it: an older build trusts a file that names its own format.
// The check of the last record's version, which the read-only open also
// made, is then made by the writable open alone, after Pebble opened the
// store (open); a build that writes a record an older one cannot read raises
// the format, so that check is the second line, not the first.
//
// Pebble ignores a file whose name it does not know.
const formatFile = "FORMAT"

// readFormatFile returns the format the store's format file names, and
// false if there is no usable file.
func readFormatFile(fs vfs.FS, dir string) (byte, bool) {
	f, err := fs.Open(fs.PathJoin(dir, formatFile))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	var b [2]byte
	n, err := io.ReadFull(f, b[:])
	if n != 1 || !errors.Is(err, io.ErrUnexpectedEOF) || b[0] == 0 {
		return 0, false
	}
	return b[0], true
}

// writeFormatFile writes the format file, synced, through a temporary file
// renamed over it, and syncs the directory: a crash leaves the old file,
// the new one, or none.
func (l *Log) writeFormatFile(format byte) error {
	fs, dir := l.opts.FS, l.dir
	if v, ok := readFormatFile(fs, dir); ok && v == format {
		return nil
	}
	tmp := fs.PathJoin(dir, formatFile+".tmp")
	f, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return fmt.Errorf("eventlog: create %s: %w", tmp, err)
	}
	_, err = f.Write([]byte{format})
	err = errors.Join(err, f.Sync(), f.Close())
	if err == nil {
		err = fs.Rename(tmp, fs.PathJoin(dir, formatFile))
	}
	if err == nil {
		var d vfs.File
		if d, err = fs.OpenDir(dir); err == nil {
			err = errors.Join(d.Sync(), d.Close())
		}
	}
	if err != nil {
		return fmt.Errorf("eventlog: write %s: %w", fs.PathJoin(dir, formatFile), err)
	}
	return nil
}

// formatFileSaysReadable tells whether the store's format file names a
// format this build reads, so that checkReadable need not open the store;
// a file naming a newer one is the refusal itself.
func formatFileSaysReadable(fs vfs.FS, dir string) (bool, error) {
	v, ok := readFormatFile(fs, dir)
	switch {
	case !ok:
		return false, nil
	case v > storeFormat:
		return false, fmt.Errorf("eventlog: store format %d (this build reads up to %d), file %s: %w", v, storeFormat, fs.PathJoin(dir, formatFile), ErrNewerFormat)
	}
	return true, nil
}
