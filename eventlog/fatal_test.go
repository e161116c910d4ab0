package eventlog

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"github.com/leaselog/leaselog/event"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/rs/zerolog"
)

// The tests here run the test binary again as a child that opens a store in
// a temporary directory (the OS filesystem, behind an injector) and meets a
// fatal storage error, because what they check is how a process dies. The
// child prints "acked N" for each append that returned nil; the parent then
// reopens the store and checks every acknowledged event is there.

const childEnv = "EVENTLOG_TEST_CHILD" // child's role and directory: "role:dir"

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		role, dir, _ := strings.Cut(v, ":")
		if role == "walsize" {
			walSizeChild(dir) // walsize_test.go: appends until killed
		} else {
			child(role, dir)
		}
		fmt.Println("child returned")
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runChild runs the child and returns its exit status, its stderr and the
// last seq it had acknowledged.
func runChild(t *testing.T, role string) (int, string, uint64) {
	t.Helper()
	dir := t.TempDir()
	cmd := childCommand(role, dir)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatal(err)
	}
	if strings.Contains(stdout.String(), "child returned") {
		t.Fatalf("the child carried on after the fatal error:\n%s\n%s", stdout.String(), stderr.String())
	}
	var acked uint64
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if n, ok := strings.CutPrefix(sc.Text(), "acked "); ok {
			acked, _ = strconv.ParseUint(n, 10, 64)
		}
	}
	l, err := Open(dir, Options{Logger: zerolog.Nop()})
	if err != nil {
		t.Fatalf("reopen after the child died: %v", err)
	}
	defer l.Close()
	if acked == 0 || l.LastSeq() < acked {
		t.Fatalf("the child acknowledged seq 1..%d; its store holds 1..%d", acked, l.LastSeq())
	}
	return cmd.ProcessState.ExitCode(), stderr.String(), acked
}

// childCommand is the test binary run again as the child of role on the
// store in dir.
func childCommand(role, dir string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+role+":"+dir)
	return cmd
}

func child(role, dir string) {
	var armed atomic.Bool
	var inject func(errorfs.Op) bool
	opts := Options{Logger: zerolog.New(os.Stderr)} // the default OnFatal
	switch role {
	case "manifest":
		inject = func(op errorfs.Op) bool { return strings.Contains(op.Path, "MANIFEST") && isSync(op) }
	case "rotate":
		inject = func(op errorfs.Op) bool {
			return isWAL(op) && (op.Kind == errorfs.OpCreate || op.Kind == errorfs.OpReuseForWrite)
		}
		opts.memTableSize = 256 << 10
	}
	opts.FS = errorfs.Wrap(vfs.Default, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if armed.Load() && inject(op) {
			return errorfs.ErrInjected
		}
		return nil
	}))
	l, err := Open(dir, opts)
	if err != nil {
		fmt.Println(err)
		return
	}
	spec := []byte(`{"pad":"` + strings.Repeat("x", 10<<10) + `"}`)
	append := func(i int) {
		e := []event.Event{{Type: event.TypeQueued, Job: fmt.Sprint("j", i), Kind: event.KindRun, Spec: spec}}
		if err := l.Append(e); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Println("acked", e[0].Seq)
	}
	for i := range 3 {
		append(i)
	}
	armed.Store(true)
	switch role {
	case "manifest":
		_ = l.db.Flush()
	case "rotate":
		for i := 3; i < 100; i++ { // 1 MB: past the memtable, whose rotation rotates the WAL
			append(i)
		}
	}
}

// TestDefaultOnFatalExits: when Pebble calls Fatalf (here: the MANIFEST of a
// flush cannot be synced), the default OnFatal logs a line naming the failure
// and the store, and the process exits with ExitFatal; every acknowledged
// event survives.
func TestDefaultOnFatalExits(t *testing.T) {
	code, stderr, _ := runChild(t, "manifest")
	if code != ExitFatal {
		t.Fatalf("exit status %d, want %d; stderr:\n%s", code, ExitFatal, stderr)
	}
	for _, want := range []string{"storage failed", "MANIFEST sync failed", `"store":`, "nothing more is acknowledged"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the log line does not say %q:\n%s", want, stderr)
		}
	}
}

// TestWALRotationFailureKillsTheProcess documents what Pebble v2.1 does when
// it cannot create the next WAL as its memtable fills: DB.rotateWAL panics
// after unlocking DB.mu, and commitWrite's deferred unlock of DB.mu then
// throws "sync: unlock of unlocked mutex", a fatal runtime error that neither
// recover nor OnFatal sees. The process dies (exit status 2) with Go's trace
// instead of leaselog's log line; it is still a fail-stop: nothing is
// acknowledged after the failure and every acknowledged event survives.
func TestWALRotationFailureKillsTheProcess(t *testing.T) {
	code, stderr, acked := runChild(t, "rotate")
	if code == 0 {
		t.Fatalf("the process survived a failed WAL rotation (acked up to seq %d):\n%s", acked, stderr)
	}
	t.Logf("exit status %d after acknowledging seq 1..%d; %s", code, acked, firstLine(stderr, "fatal error"))
}

func firstLine(s, prefix string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return "(no " + prefix + " line)"
}
