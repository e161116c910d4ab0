package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"time"
)

// errNotSocket: the path given to listen on is something other than a socket.
var errNotSocket = errors.New("exists and is not a socket")

// listenUnix listens on a unix socket at path that only this user may
// connect to, at every moment. bind(2) creates the socket file with the
// process's umask, and changing the umask around it would change it for
// every goroutine creating files meanwhile; so the socket is bound in a
// private directory (0700: no one else can reach it there), made 0600, and
// only then linked at path. link(2) fails if path exists, so nothing that
// appeared there meanwhile is replaced.
//
// A socket already at path is a dead daemon's if nobody answers on it
// (a live daemon would hold the data directory's lock, taken before this),
// and is removed; anything else at path is refused and left alone.
func listenUnix(path string) (net.Listener, error) {
	fi, err := os.Lstat(path)
	switch {
	case err == nil && fi.Mode().Type() != fs.ModeSocket:
		return nil, notSocket(path, fi)
	case err == nil:
		if conn, err := net.DialTimeout("unix", path, time.Second); err == nil {
			conn.Close()
			return nil, fmt.Errorf("listen on unix://%s: another process serves it", path)
		}
		if err := os.Remove(path); err != nil {
			return nil, fmt.Errorf("listen on unix://%s: remove the socket a dead daemon left: %w", path, err)
		}
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("listen on unix://%s: %w", path, err)
	}
	priv, err := os.MkdirTemp(filepath.Dir(path), ".leaselog-") // 0700
	if err != nil {
		return nil, fmt.Errorf("listen on unix://%s: %w", path, err)
	}
	defer os.RemoveAll(priv)
	tmp := filepath.Join(priv, "s")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listen on unix://%s: %w", path, err)
	}
	ln.SetUnlinkOnClose(false) // it would unlink tmp; Close unlinks path
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen on unix://%s: %w", path, err)
	}
	if err := os.Link(tmp, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("listen on unix://%s: %w", path, err)
	}
	ul := &unixListener{UnixListener: ln, path: path}
	if fi, err := os.Lstat(path); err == nil {
		ul.file = fi
	}
	return ul, nil
}

// checkSocketPath refuses a path that holds something other than a socket.
func checkSocketPath(path string) error {
	fi, err := os.Lstat(path)
	if err == nil && fi.Mode().Type() != fs.ModeSocket {
		return notSocket(path, fi)
	}
	return nil
}

func notSocket(path string, fi fs.FileInfo) error {
	return fmt.Errorf("listen on unix://%s: %w: it is %s, left alone: choose another path", path, errNotSocket, kindOf(fi.Mode()))
}

// unixListener is a listener at a path other than the one it was bound to.
type unixListener struct {
	*net.UnixListener
	path string
	file fs.FileInfo // the socket file, to remove it only if it is still ours
}

func (l *unixListener) Addr() net.Addr { return &net.UnixAddr{Name: l.path, Net: "unix"} }

func (l *unixListener) Close() error {
	err := l.UnixListener.Close()
	if errors.Is(err, net.ErrClosed) {
		return err // closed before, and the file removed then
	}
	if fi, serr := os.Lstat(l.path); serr == nil && l.file != nil && os.SameFile(fi, l.file) {
		if rerr := os.Remove(l.path); rerr != nil && !errors.Is(rerr, fs.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// kindOf names what a file is, for a message.
func kindOf(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "a " + m.Type().String() + " file"
}
