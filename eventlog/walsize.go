package eventlog

import (
	"github.com/cockroachdb/pebble/v2/vfs"
)

// walCategory is the category Pebble creates its write-ahead logs under.
const walCategory vfs.DiskWriteCategory = "pebble-wal"

// walGrowth is how far ahead of its writes a WAL's size is set, at most.
// The fsync that follows a growth pays for the size change once; a process
// killed mid-file leaves at most this much of zeros after the last record,
// which Pebble reads through (a zeroed chunk, as after its own preallocation)
// at the next open.
const walGrowth = 4 << 20

// sizedWALs wraps the store's filesystem so that a write-ahead log's size
// runs ahead of what is written to it.
//
// Every commit ends in an fdatasync of the WAL. When the write has made the
// file longer, the sync must also commit the new size to the filesystem's
// journal; when the write falls inside the file, it syncs the data alone,
// but for the first write into each preallocated block, which ext4 records
// as written. Pebble preallocates its WALs' blocks but keeps their size
// (FALLOC_FL_KEEP_SIZE), so on a fresh store every commit grows the file
// until the WALs are recycled, a memtable's worth of writes later. With the
// size set ahead, a small commit (one worker's: a few hundred bytes, many to
// a block) syncs its data alone; a group commit of many kilobytes enters new
// blocks every time and gains little. BenchmarkAppend measures it (impl=raw
// against impl=raw-sized; the figures are in docs/performance.md).
//
// The size runs ahead only over blocks Pebble has preallocated, so that it
// takes no space Pebble did not: where its preallocation fails (a disk too
// small for it), the WAL is written as Pebble writes it. Only files of the
// OS filesystem are grown (a file with a descriptor), and only where the
// platform can set a size without writing (growFile).
type sizedWALs struct{ vfs.FS }

// Unwrap lets vfs.Root see through the wrapper.
func (fs sizedWALs) Unwrap() vfs.FS { return fs.FS }

// Create creates a file; a WAL's is sized ahead of its writes.
func (fs sizedWALs) Create(name string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, category)
	if err != nil || category != walCategory {
		return f, err
	}
	return newSizedWAL(f, 0), nil
}

// ReuseForWrite reuses a recycled WAL, which is as long as it was written:
// it grows only past that.
func (fs sizedWALs) ReuseForWrite(oldname, newname string, category vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, category)
	if err != nil || category != walCategory {
		return f, err
	}
	info, err := f.Stat()
	if err != nil {
		return f, nil // not grown: a plain WAL, as Pebble writes it
	}
	return newSizedWAL(f, info.Size()), nil
}

// sizedWAL is a WAL whose size is set ahead of its writes, which Pebble
// makes sequentially from offset 0 through Write, each after preallocating
// the blocks it will need (Preallocate).
type sizedWAL struct {
	vfs.File
	fd        uintptr
	written   int64 // the offset of the next write
	size      int64 // the file's size, as last set, found or written
	allocated int64 // the end of the blocks Pebble preallocated from 0
	failed    bool  // a growth failed: written as Pebble writes from then on
}

func newSizedWAL(f vfs.File, size int64) vfs.File {
	fd := f.Fd()
	if fd == vfs.InvalidFd || !canGrow {
		return f
	}
	return &sizedWAL{File: f, fd: fd, size: size}
}

// Preallocate is Pebble's: blocks, the size kept. The size may then run
// ahead into them.
func (f *sizedWAL) Preallocate(off, n int64) error {
	err := f.File.Preallocate(off, n)
	if err == nil && off <= f.allocated {
		f.allocated = max(f.allocated, off+n)
	}
	return err
}

// Write grows the file, when p would pass its end and the blocks are there,
// before writing p.
func (f *sizedWAL) Write(p []byte) (int, error) {
	end := f.written + int64(len(p))
	if grown := min((end+walGrowth-1)/walGrowth*walGrowth, f.allocated); end > f.size && grown >= end && !f.failed {
		if err := growFile(f.fd, f.size, grown-f.size); err != nil {
			f.failed = true // the write reports its own error if there is one
		} else {
			f.size = grown
		}
	}
	n, err := f.File.Write(p)
	f.written += int64(n)
	f.size = max(f.size, f.written)
	return n, err
}
