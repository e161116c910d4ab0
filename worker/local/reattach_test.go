package local

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/worker"
)

// reattach re-attaches e to g's run, which must be found.
func reattach(t *testing.T, e *Executor, g api.Grant) worker.Run {
	t.Helper()
	r, found, err := e.Reattach(context.Background(), g)
	if err != nil || !found {
		t.Fatalf("Reattach: found %v, %v", found, err)
	}
	track(t, runDirOf(e, g), r)
	return r
}

// A restarted daemon (executor B on the same Dir; A is abandoned, not
// stopped) finds a running job, and learns how it ends.
func TestReattachRunning(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		code            int
		outcome, reason string
	}{
		{0, "succeeded", ""},
		{5, "failed", "exit status 5"},
	} {
		t.Run(strconv.Itoa(tc.code), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			a, _ := newExecutor(t, dir, time.Second)
			ready, release := fifo(t, "ready"), fifo(t, "release")
			g := grant(t, "long", 4, api.Spec{Run: "echo up > " + q(ready) + `; read code < ` + q(release) + `; exit "$code"`})
			start(t, a, g)
			readFIFO(t, ready)

			b, logs := newExecutor(t, dir, time.Second)
			r := reattach(t, b, g)
			if isDone(r) {
				t.Fatalf("re-attached run already done: %+v", r.Outcome())
			}
			if !sameOutcome(r.Outcome(), worker.Outcome{}) {
				t.Fatalf("outcome before Done: %+v", r.Outcome())
			}
			if !strings.Contains(logs.String(), `"state":"running"`) {
				t.Fatalf("re-attach not logged:\n%s", logs)
			}
			writeFIFO(t, release, strconv.Itoa(tc.code)+"\n")
			wantOutcome(t, await(t, r), tc.outcome, tc.reason)
			if got := readState(t, b, g, "exit"); got != strconv.Itoa(tc.code)+"\n" {
				t.Fatalf("exit file %q", got)
			}
		})
	}
}

// A job that ended while nobody watched is Done at once, with its outcome
// and its ref (bring back again changes nothing).
func TestReattachEnded(t *testing.T) {
	t.Parallel()
	repo := newRepo(t)
	dir := t.TempDir()
	a, _ := newExecutor(t, dir, time.Second)
	g := grant(t, "ended", 8, api.Spec{
		Checkout:  &api.Checkout{Repo: repo},
		Run:       "echo x > made.txt; exit 7",
		BringBack: []string{"made.txt"},
	})
	first := await(t, start(t, a, g))

	b, _ := newExecutor(t, dir, time.Second)
	r := reattach(t, b, g)
	if !isDone(r) {
		t.Fatal("a re-attached run that had ended is not Done at once")
	}
	out := r.Outcome()
	wantOutcome(t, out, "failed", "exit status 7")
	if !sameOutcome(out, first) || out.Ref != "refs/leaselog/ended/8" {
		t.Fatalf("re-attached outcome %+v, first %+v", out, first)
	}
	if got := gitT(t, repo, "show", out.Ref+":made.txt"); got != "x" {
		t.Fatalf("made.txt = %q", got)
	}
	if n := gitT(t, repo, "rev-list", "--count", out.Ref); n != "2" {
		t.Fatalf("%s commits on the ref, want 2 (base + one bring back)", n)
	}
}

func TestReattachDirectoryGone(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, _ := newExecutor(t, dir, time.Second)
	g := grant(t, "gone", 1, api.Spec{Run: "exit 0"})
	await(t, start(t, a, g))
	if err := os.RemoveAll(runDirOf(a, g)); err != nil {
		t.Fatal(err)
	}
	b, _ := newExecutor(t, dir, time.Second)
	for _, g := range []api.Grant{g, grant(t, "never", 2, api.Spec{Run: "exit 0"})} {
		r, found, err := b.Reattach(context.Background(), g)
		if err != nil || found || r != nil {
			t.Fatalf("Reattach of %s: %v, %v, %v; want not found", g.Job.ID, r, found, err)
		}
	}
	if _, _, err := b.Reattach(context.Background(), grant(t, "a/b", 1, api.Spec{Run: "x"})); err == nil {
		t.Fatal("Reattach took a bad job id")
	}
}

// The whole process group was SIGKILLed: no exit status, no process.
func TestReattachVanished(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, _ := newExecutor(t, dir, time.Second)
	ready := fifo(t, "ready")
	g := grant(t, "vanish", 3, api.Spec{Run: "echo up > " + q(ready) + "; exec sleep 60"})
	ra := start(t, a, g)
	readFIFO(t, ready)
	if err := syscall.Kill(-pidOf(t, a, g), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	outA := await(t, ra)
	if outA.Outcome != "lost" || !strings.HasPrefix(outA.Reason, "agent vanished") {
		t.Fatalf("A's outcome %+v", outA)
	}

	b, _ := newExecutor(t, dir, time.Second)
	r := reattach(t, b, g)
	if !isDone(r) {
		t.Fatal("a vanished run is not Done at once")
	}
	wantOutcome(t, r.Outcome(), "lost", "agent vanished")
}

// The old daemon cancelled a job that ignores SIGTERM, then died: the new
// one still reports it cancelled, and the supervisor kills it after the
// grace it was started with (the new executor's is an hour).
func TestReattachAfterCancel(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, _ := newExecutor(t, dir, 200*time.Millisecond)
	ready := fifo(t, "ready")
	g := grant(t, "stubborn", 5, api.Spec{Run: "trap '' TERM; echo up > " + q(ready) + "; exec sleep 60"})
	ra := start(t, a, g)
	readFIFO(t, ready)
	ra.Stop(false)

	b, _ := newExecutor(t, dir, time.Hour)
	r := reattach(t, b, g)
	wantOutcome(t, await(t, r), "cancelled", "cancelled by the worker")
	wantOutcome(t, await(t, ra), "cancelled", "cancelled by the worker")
}

func TestReattachWithoutPid(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Second)
	g := grant(t, "nopid", 1, api.Spec{Run: "true"})
	if err := os.MkdirAll(filepath.Join(runDirOf(e, g), stateDir), 0o755); err != nil {
		t.Fatal(err)
	}
	r := reattach(t, e, g)
	wantOutcome(t, await(t, r), "lost", "agent vanished (no pid file)")
}

// The job survives its daemon: a fake daemon (this test binary, run again)
// starts it, and is killed with its whole process group — SIGTERM, then
// SIGKILL, as a supervisor or a ^C would. The job runs on, and a new
// executor re-attaches to it.
func TestJobSurvivesItsDaemon(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ready, release := fifo(t, "ready"), fifo(t, "release")
	g := grant(t, "survivor", 6, api.Spec{Run: "echo up > " + q(ready) + "; read x < " + q(release)})
	daemon, _ := startFakeDaemon(t, dir, g, 0)
	readFIFO(t, ready)
	killFakeDaemon(t, daemon)

	b, _ := newExecutor(t, dir, time.Second)
	runDir := runDirOf(b, g)
	pid, err := readPid(runDir)
	if err != nil {
		t.Fatal(err)
	}
	if !groupAlive(pid, runDir) {
		t.Fatalf("the job died with its daemon")
	}
	r := reattach(t, b, g)
	if isDone(r) {
		t.Fatalf("re-attached run done: %+v", r.Outcome())
	}
	writeFIFO(t, release, "go\n")
	wantOutcome(t, await(t, r), "succeeded", "")
}
