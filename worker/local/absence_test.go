package local

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/worker"
	"github.com/leaselog/leaselog/worker/local/supervise"
)

// These tests are the daemon: this process holds a store open, as a
// daemon does from its start to its stop, and its executor's supervisors
// watch the store's lock (Options.StoreLock).

// openStore opens the store in dir, holding its lock until closeStore.
func openStore(t *testing.T, dir string) *eventlog.Log {
	t.Helper()
	l, err := eventlog.Open(dir, eventlog.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func closeStore(t *testing.T, l *eventlog.Log) {
	t.Helper()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// startWatched starts a job that runs until killed, with an executor whose
// supervisors watch the store in storeDir, and returns once it runs and
// its supervisor has seen the store held.
func startWatched(t *testing.T, storeDir string, id string) (*Executor, api.Grant, worker.Run) {
	t.Helper()
	e, _ := newExecutorWith(t, Options{Dir: t.TempDir(), StopGrace: time.Minute, StoreLock: eventlog.LockFile(storeDir)})
	ready := fifo(t, "ready")
	g := grant(t, id, 1, api.Spec{Run: "echo up > " + q(ready) + "; exec sleep 60"})
	r := start(t, e, g)
	readFIFO(t, ready)
	return e, g, r
}

// waitSupervisorSays waits until the supervisor's log of g's run holds s.
func waitSupervisorSays(t *testing.T, e *Executor, g api.Grant, s string) {
	t.Helper()
	for deadline := time.Now().Add(waitBound); ; {
		if strings.Contains(readState(t, e, g, supervise.LogFile), s) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the supervisor did not say %q:\n%s", s, readState(t, e, g, supervise.LogFile))
		}
		time.Sleep(5 * time.Millisecond) // a bounded poll: the supervisor writes a file
	}
}

// movedBy reads how far the supervisor moved the deadline it fenced at.
var movedBy = regexp.MustCompile(`moved (\S+) by the store's absence`)

// What happens: the daemon stops (gracefully or not: its store is closed
// either way) for longer than the fence, and comes back. Its job's
// supervisor holds the job meanwhile: the deadline moves by the time no
// process held the store, never by more. Back, the daemon holds the store
// again and the deadline stops moving: with no renewal, the job stops at
// the deadline moved, which left it what it had when the daemon stopped.
func TestFenceHeldWhileNoDaemonHoldsTheStore(t *testing.T) {
	t.Parallel()
	storeDir := t.TempDir()
	daemon := openStore(t, storeDir)
	e, g, r := startWatched(t, storeDir, "maintenance")
	deadline := fenceClock.Now().Add(time.Second)
	r.Fence(deadline)
	waitSupervisorSays(t, e, g, "held by pid "+strconv.Itoa(os.Getpid()))

	closeStore(t, daemon)
	stopped := fenceClock.Now()
	left := deadline.Sub(stopped)
	for fenceClock.Now().Before(deadline.Add(time.Second)) {
		if isDone(r) {
			t.Fatalf("the job stopped while no daemon held the store: %+v\n%s", r.Outcome(), readState(t, e, g, supervise.LogFile))
		}
		time.Sleep(10 * time.Millisecond) // observing a window
	}
	daemon = openStore(t, storeDir)
	defer closeStore(t, daemon)
	back := fenceClock.Now()

	out := await(t, r)
	wantOutcome(t, out, "lost", supervise.FencedReason)
	fenced := readState(t, e, g, supervise.FencedFile)
	m := movedBy.FindStringSubmatch(fenced)
	if m == nil {
		t.Fatalf("fenced file %q: no deadline moved", fenced)
	}
	moved, err := time.ParseDuration(m[1])
	if err != nil {
		t.Fatal(err)
	}
	// Never more than the store was free; less by a few polls at most
	// (the first look after the stop, the last before the return).
	free := back.Sub(stopped)
	if moved > free || moved < free-20*supervise.FencePoll {
		t.Fatalf("deadline moved %v; the store was free for %v (fenced: %q)", moved, free, fenced)
	}
	t.Logf("the store free for %v, %v left at the stop: the deadline moved %v", free, left, moved)
}

// What happens: the daemon is stopped (SIGSTOP) or hung: it holds its
// store all the same, and its job's supervisor stops the job at its
// deadline, as any worker's.
func TestFenceFallsWhileADaemonHoldsTheStore(t *testing.T) {
	t.Parallel()
	storeDir := t.TempDir()
	daemon := openStore(t, storeDir)
	defer closeStore(t, daemon)
	e, g, r := startWatched(t, storeDir, "hung")
	deadline := fenceClock.Now().Add(300 * time.Millisecond)
	r.Fence(deadline)
	waitSupervisorSays(t, e, g, "held by pid "+strconv.Itoa(os.Getpid()))

	out := await(t, r)
	if early := deadline.Sub(fenceClock.Now()); early > 0 {
		t.Fatalf("the job was stopped %v before its deadline", early)
	}
	wantOutcome(t, out, "lost", supervise.FencedReason)
	if fenced := readState(t, e, g, supervise.FencedFile); !strings.HasPrefix(fenced, "boottime deadline "+strconv.FormatInt(deadline.UnixNano(), 10)+" passed") {
		t.Fatalf("fenced file %q: want the deadline unmoved", fenced)
	}
}
