package supervise

import (
	"errors"
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// secret is what a job must not get a reader to show through its run
// directory: a file of the worker's user outside of it.
const secret = "s3cret-token\n"

// within runs f and fails the test if it has not returned after a bound: a
// reader that waits on a named pipe hangs rather than fails.
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: still waiting after 10s", what)
	}
}

// A job can turn any name of its run directory into a link, a named pipe,
// a directory, a hard link to a file of its user: OpenIn refuses them all
// at once, says what it found, and opens plain files as they are.
func TestOpenIn(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	outside := filepath.Join(t.TempDir(), "config.toml")
	mk := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mk(os.WriteFile(outside, []byte(secret), 0o600))
	mk(os.MkdirAll(filepath.Join(root, "run/.leaselog/dir"), 0o755))
	mk(os.WriteFile(filepath.Join(root, "run/.leaselog/plain"), []byte("hello\n"), 0o644))
	mk(syscall.Mkfifo(filepath.Join(root, "run/.leaselog/pipe"), 0o600))
	mk(os.Symlink(outside, filepath.Join(root, "run/.leaselog/link")))
	mk(os.Link(outside, filepath.Join(root, "run/.leaselog/hard")))
	mk(os.Symlink("plain", filepath.Join(root, "run/.leaselog/inside"))) // a link that stays inside
	mk(os.Symlink(filepath.Dir(outside), filepath.Join(root, "run/state")))
	mk(syscall.Mkfifo(filepath.Join(root, "run/pipedir"), 0o600))
	ln, err := net.Listen("unix", filepath.Join(root, "run/.leaselog/sock"))
	mk(err)
	defer ln.Close()

	for _, tc := range []struct {
		rel, want string // want: the content, or the error's text
	}{
		{"run/.leaselog/plain", "hello\n"},
		{"run/.leaselog/pipe", "run/.leaselog/pipe is a named pipe, not a regular file"},
		{"run/.leaselog/link", "run/.leaselog/link is a symbolic link, not a regular file"},
		{"run/.leaselog/inside", "run/.leaselog/inside is a symbolic link, not a regular file"},
		{"run/.leaselog/hard", "run/.leaselog/hard is a regular file with 2 links, not a file of its own"},
		{"run/.leaselog/dir", "run/.leaselog/dir is a directory, not a regular file"},
		{"run/.leaselog/sock", "run/.leaselog/sock is a socket, not a regular file"},
		{"run/state/config.toml", "run/state is a symbolic link, not a directory"},
		{"run/pipedir/stdout", "run/pipedir is a named pipe, not a directory"},
		{"run/.leaselog/plain/x", "run/.leaselog/plain is a regular file, not a directory"},
	} {
		var got string
		within(t, tc.rel, func() {
			f, err := OpenIn(root, tc.rel)
			if err != nil {
				var kind *KindError
				if !errors.As(err, &kind) {
					t.Errorf("OpenIn(%s): %v, want a *KindError", tc.rel, err)
				}
				got = err.Error()
				return
			}
			defer f.Close()
			b, err := io.ReadAll(f)
			if err != nil {
				t.Errorf("read %s: %v", tc.rel, err)
			}
			got = string(b)
		})
		if got != tc.want {
			t.Errorf("OpenIn(%s): %q, want %q", tc.rel, got, tc.want)
		}
		if strings.Contains(got, strings.TrimSpace(secret)) {
			t.Errorf("OpenIn(%s) showed the file outside: %q", tc.rel, got)
		}
	}

	if _, err := OpenIn(root, "run/.leaselog/none"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing file: %v, want fs.ErrNotExist", err)
	}
	if _, err := OpenIn(filepath.Join(root, "gone"), "x"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a missing root: %v, want fs.ErrNotExist", err)
	}
	for _, rel := range []string{"", "../config.toml", "run/../run/.leaselog/plain", "run//.leaselog/plain", "/etc/passwd", "run/."} {
		if f, err := OpenIn(root, rel); err == nil {
			f.Close()
			t.Errorf("OpenIn(%q) accepted", rel)
		}
	}
	// The root is the caller's: a link to it is followed.
	rootLink := filepath.Join(filepath.Dir(outside), "root")
	mk(os.Symlink(root, rootLink))
	if b, err := ReadSmall(rootLink, "run/.leaselog/plain", 64); err != nil || string(b) != "hello\n" {
		t.Errorf("through a link to the root: %q, %v", b, err)
	}
}

// ReadSmall is OpenIn with a bound on the size.
func TestReadSmall(t *testing.T) {
	t.Parallel()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "f"), []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadSmall(root, "f", 5); err != nil || string(b) != "12345" {
		t.Fatalf("at the limit: %q, %v", b, err)
	}
	if _, err := ReadSmall(root, "f", 4); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("past the limit: %v, want ErrTooLarge", err)
	}
	if err := syscall.Mkfifo(filepath.Join(root, "p"), 0o600); err != nil {
		t.Fatal(err)
	}
	within(t, "ReadSmall of a pipe", func() {
		var kind *KindError
		if _, err := ReadSmall(root, "p", 4); !errors.As(err, &kind) {
			t.Errorf("a pipe: %v, want a *KindError", err)
		}
	})
}

// Whatever a job left where a file is written through a temporary name —
// a named pipe, a link — the write neither waits for a reader nor writes
// where the link points; only a directory with something in it stops it.
func TestWriteFileAtomicOverWhatTheJobLeft(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(outside, []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		plant func(tmp string) error
		ok    bool
	}{
		{"nothing", func(string) error { return nil }, true},
		{"a file", func(tmp string) error { return os.WriteFile(tmp, []byte("old"), 0o644) }, true},
		{"a named pipe", func(tmp string) error { return syscall.Mkfifo(tmp, 0o600) }, true},
		{"a link", func(tmp string) error { return os.Symlink(outside, tmp) }, true},
		{"an empty directory", func(tmp string) error { return os.Mkdir(tmp, 0o755) }, true},
		{"a directory with a file", func(tmp string) error { return os.MkdirAll(filepath.Join(tmp, "keep"), 0o755) }, false},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
		if err := tc.plant(path + ".tmp"); err != nil {
			t.Fatal(err)
		}
		var err error
		within(t, tc.name, func() { err = WriteFileAtomic(path, []byte("fresh\n")) })
		if (err == nil) != tc.ok {
			t.Errorf("over %s: %v, want ok %v", tc.name, err, tc.ok)
			continue
		}
		if b, rerr := os.ReadFile(path); tc.ok && (rerr != nil || string(b) != "fresh\n") {
			t.Errorf("over %s: the file holds %q, %v", tc.name, b, rerr)
		}
	}
	if b, err := os.ReadFile(outside); err != nil || string(b) != secret {
		t.Fatalf("the link's target was written: %q, %v", b, err)
	}
}
