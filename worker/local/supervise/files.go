package supervise

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// A run directory and its .leaselog folder are the job's to write in: it
// runs as the worker's user, there. So whatever reads them — the
// supervisor, the worker, the daemon serving a job's output, `leaselog
// logs --workdir` — must expect any name in them to have been replaced by
// a symbolic link (to the worker's configuration, its tokens…), a named
// pipe (whose open waits for a writer that never comes), a directory, or a
// device. OpenIn opens a file there without following a link and without
// waiting, and refuses anything but a regular file of its own;
// WriteFileAtomic writes one without opening whatever the job left in its
// place.

// KindError is the error of OpenIn for a name that is not what it must be
// (a regular file, or a directory on the way to one).
type KindError struct {
	Path string // relative to the root OpenIn was given
	Is   string // what it is: "a symbolic link", "a named pipe", …
	Want string // what it must be: "a regular file", "a directory"
}

func (e *KindError) Error() string { return e.Path + " is " + e.Is + ", not " + e.Want }

// OpenIn opens the regular file rel, a slash-separated path below the
// directory root, for reading. root is the caller's and may be reached
// through links; below it, no link is followed (each name is opened with
// O_NOFOLLOW from its parent's descriptor, so a directory on the way
// replaced by a link is refused too) and the file is opened with
// O_NONBLOCK, so that a named pipe answers at once. Anything but a regular
// file is then refused with a *KindError, and so is a hard link to a file
// elsewhere (more than one link): it reads as the file it shares, as a
// symbolic link would. A name that does not exist is an error wrapping
// fs.ErrNotExist.
//
// Not os.Root: it follows links that stay inside the root (one job's
// stdout pointing at another's spec.json), and its open of a named pipe
// waits for a writer.
func OpenIn(root, rel string) (*os.File, error) {
	names := strings.Split(rel, "/")
	for _, n := range names {
		if n == "" || n == "." || n == ".." {
			return nil, fmt.Errorf("open %q: not a plain path below %s", rel, root)
		}
	}
	// Directories are opened O_PATH: to look names up in, which takes no
	// read permission and opens nothing.
	fd, err := openat(unix.AT_FDCWD, root, unix.O_PATH|unix.O_DIRECTORY)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	for i, n := range names {
		flags, want := unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_NOCTTY, "a regular file"
		if i < len(names)-1 {
			flags, want = unix.O_PATH|unix.O_NOFOLLOW|unix.O_DIRECTORY, "a directory"
		}
		next, err := openat(fd, n, flags)
		if err != nil {
			err = describe(fd, n, strings.Join(names[:i+1], "/"), want, err)
		}
		unix.Close(fd)
		if err != nil {
			return nil, err
		}
		fd = next
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &fs.PathError{Op: "stat", Path: rel, Err: err}
	}
	var kerr *KindError
	if is := kindOf(st.Mode); is != "a regular file" {
		kerr = &KindError{Path: rel, Is: is, Want: "a regular file"}
	} else if st.Nlink > 1 {
		kerr = &KindError{Path: rel, Is: fmt.Sprintf("a regular file with %d links", st.Nlink), Want: "a file of its own"}
	}
	if kerr != nil {
		unix.Close(fd)
		return nil, kerr
	}
	return os.NewFile(uintptr(fd), rel), nil
}

// openat opens name relative to the directory dirfd, close-on-exec, again
// after an interrupting signal.
func openat(dirfd int, name string, flags int) (int, error) {
	for {
		fd, err := unix.Openat(dirfd, name, flags|unix.O_CLOEXEC, 0)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

// describe turns the failed open of name (in directory dirfd) into a
// *KindError when name is not of the kind wanted: a link refused by
// O_NOFOLLOW (ELOOP), anything but a directory on the way, links included
// (ENOTDIR), a socket (ENXIO). Any other failure is returned as a
// *fs.PathError.
func describe(dirfd int, name, path, want string, err error) error {
	var st unix.Stat_t
	if err != unix.ENOENT && unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
		if is := kindOf(st.Mode); is != want {
			return &KindError{Path: path, Is: is, Want: want}
		}
	}
	return &fs.PathError{Op: "open", Path: path, Err: err}
}

func kindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFIFO:
		return "a named pipe"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR, unix.S_IFBLK:
		return "a device"
	}
	return "of an unknown kind"
}

// ErrTooLarge is what ReadSmall returns, wrapped, for a file past its limit.
var ErrTooLarge = errors.New("file too large")

// ReadSmall reads the small regular file rel below root (OpenIn), of at
// most limit bytes.
func ReadSmall(root, rel string, limit int64) ([]byte, error) {
	f, err := OpenIn(root, rel)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s: %w: over %d bytes", rel, ErrTooLarge, limit)
	}
	return b, nil
}

// WriteFileAtomic writes a file whole or not at all: path.tmp, then a
// rename, so that a reader after a crash never sees half of it. Whatever
// the job left at path.tmp is removed first and the file created anew
// (O_EXCL): an open for writing of a named pipe waits for a reader, and
// one of a link writes where it points.
func WriteFileAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.Remove(tmp); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
