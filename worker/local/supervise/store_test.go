package supervise

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/leaselog/leaselog/eventlog"
)

// holdEnv makes this test binary a process that holds a store open: a
// daemon, for ProbeStore to look at from another process.
const holdEnv = "SUPERVISE_TEST_HOLD_STORE"

func TestMain(m *testing.M) {
	if dir := os.Getenv(holdEnv); dir != "" {
		os.Exit(holdStore(dir))
	}
	os.Exit(m.Run())
}

// holdStore opens the store in dir, says "open", and closes it once its
// standard input ends.
func holdStore(dir string) int {
	l, err := eventlog.Open(dir, eventlog.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println("open")
	_, _ = io.Copy(io.Discard, os.Stdin)
	if err := l.Close(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// openStore opens and closes the store in dir, in this process: the next
// look finds it free.
func openStore(t *testing.T, dir string) {
	t.Helper()
	l, err := eventlog.Open(dir, eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// ProbeStore tells a store another process has open (its record lock: the
// holder's pid) from one nobody has, without taking the lock, and tells
// the file apart across every open of the store: a daemon that came and went
// between two looks changed it. Anything but a file that can be looked at is
// not free.
func TestProbeStore(t *testing.T) {
	dir := t.TempDir()
	lock := eventlog.LockFile(dir)
	if l := ProbeStore(lock); l.Free || l.File != (FileID{}) {
		t.Fatalf("no store yet: %+v, want not free and no file", l)
	}
	openStore(t, dir)
	first := ProbeStore(lock)
	if !first.Free || first.File == (FileID{}) || first.Holder != 0 {
		t.Fatalf("a store closed: %+v, want free, a file, no holder", first)
	}

	daemon := exec.Command(os.Args[0], "-test.run=^$")
	daemon.Env = append(os.Environ(), holdEnv+"="+dir)
	daemon.Stderr = os.Stderr
	stdin, err := daemon.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := daemon.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = daemon.Process.Kill()
		_ = daemon.Wait()
	})
	if line, err := bufio.NewReader(stdout).ReadString('\n'); line != "open\n" {
		t.Fatalf("the holder said %q, %v", line, err)
	}
	held := ProbeStore(lock)
	if held.Free || held.Holder != daemon.Process.Pid || held.File == (FileID{}) {
		t.Fatalf("a store another process has open: %+v, want held by pid %d", held, daemon.Process.Pid)
	}
	if held.File == first.File {
		t.Fatalf("the holder's open did not change the file's identity: %+v", held.File)
	}
	// Looking took nothing: the holder keeps the store, and a second open
	// is still refused. Refused, it changed the file all the same.
	if l, err := eventlog.Open(dir, eventlog.Options{}); err == nil {
		l.Close()
		t.Fatal("the store opened while another process holds it")
	}
	refused := ProbeStore(lock)
	if refused.Free || refused.Holder != daemon.Process.Pid || refused.File == held.File {
		t.Fatalf("after an open refused: %+v, want still held by pid %d, and another identity than %+v", refused, daemon.Process.Pid, held.File)
	}
	held = refused
	stdin.Close()
	if err := daemon.Wait(); err != nil {
		t.Fatalf("the holder: %v", err)
	}
	after := ProbeStore(lock)
	if !after.Free || after.File != held.File {
		t.Fatalf("the holder gone: %+v, want free and the file it held (%+v)", after, held.File)
	}
	openStore(t, dir)
	if again := ProbeStore(lock); !again.Free || again.File == after.File {
		t.Fatalf("after another open: %+v, want free and another identity than %+v", again, after.File)
	}

	// Not a regular file; a lock of another kind (an open file description
	// lock, here this process's own) is held all the same.
	if l := ProbeStore(dir); l.Free {
		t.Errorf("a directory: %+v, want not free", l)
	}
	other := filepath.Join(t.TempDir(), "LOCK")
	f, err := os.Create(other)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.FcntlFlock(f.Fd(), unix.F_OFD_SETLK, &unix.Flock_t{Type: unix.F_WRLCK}); err != nil {
		t.Fatal(err)
	}
	if l := ProbeStore(other); l.Free || l.Holder != 0 {
		t.Errorf("an open file description lock: %+v, want held, no pid", l)
	}
}
