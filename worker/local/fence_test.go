package local

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/hostclock"
	"github.com/leaselog/leaselog/worker"
	"github.com/leaselog/leaselog/worker/local/supervise"
)

// The fence clock of these tests: the executors' default.
var fenceClock = hostclock.Boottime

// treeJob is a job that leaves a grandchild in a session of its own (setsid),
// which no signal to the job's group or session reaches, and then waits for
// it. Both write their pids to files of the run directory (job, gc) before
// the job says "up" on ready; exit (if not "") ends the job right after.
func treeJob(ready, exit string) string {
	s := `setsid sh -c 'echo $$ > gc.tmp && mv gc.tmp gc; exec sleep 60' &
while [ ! -e gc ]; do sleep 0.01; done
echo $$ > job
echo up > ` + q(ready) + "\n"
	if exit != "" {
		return s + "exit " + exit
	}
	return s + "wait"
}

// treePids reads the pids treeJob wrote, once it said "up".
func treePids(t *testing.T, e *Executor, g api.Grant) (job, gc int) {
	t.Helper()
	read := func(name string) int {
		pid, err := strconv.Atoi(strings.TrimSpace(readRunFile(t, e, g, name)))
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	job, gc = read("job"), read("gc")
	// A job that ends on its own may be gone already, its tree with it
	// (getsid -1 for both): only live processes say whether setsid took.
	if sj, sg := getsid(job), getsid(gc); sj != -1 && sj == sg {
		t.Fatalf("grandchild %d in the job's session %d: setsid did not take", gc, sj)
	}
	return job, gc
}

func readRunFile(t *testing.T, e *Executor, g api.Grant, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(runDirOf(e, g), name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// processAlive reports whether pid is a live process (a zombie has ended).
func processAlive(pid int) bool {
	state, _, _, err := procStat(pid)
	return err == nil && state != 'Z' && state != 'X' && state != 'x'
}

// A job's setsid'd grandchild is part of its tree: however the job ends —
// killed, cancelled, fenced, or on its own — it is gone by the time the run
// is Done (the supervisor reaps the whole tree before it records the end).
func TestSetsidDescendantIsStopped(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		exit            string // the job's own end
		stop            func(worker.Run)
		outcome, reason string
	}{
		{"kill", "", func(r worker.Run) { r.Stop(true) }, "killed", "killed by the worker"},
		// The job dies of its SIGTERM; the grandchild, which got none, is
		// killed with the tree when the job ends (the grace is a minute).
		{"cancel", "", func(r worker.Run) { r.Stop(false) }, "cancelled", "cancelled by the worker; exit status 143"},
		{"fence", "", func(r worker.Run) { r.Fence(fenceClock.Now()) }, "lost", supervise.FencedReason},
		{"end", "0", func(worker.Run) {}, "succeeded", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e, _ := newExecutor(t, t.TempDir(), time.Minute)
			ready := fifo(t, "ready")
			g := grant(t, "tree-"+tc.name, 1, api.Spec{Run: treeJob(ready, tc.exit)})
			r := start(t, e, g)
			readFIFO(t, ready)
			job, gc := treePids(t, e, g)
			tc.stop(r)
			wantOutcome(t, await(t, r), tc.outcome, tc.reason)
			for name, pid := range map[string]int{"job": job, "setsid'd grandchild": gc} {
				if processAlive(pid) {
					t.Errorf("%s %d outlived the run", name, pid)
				}
			}
		})
	}
}

// The worker is gone (a separate process, killed with its group after it
// set the fence): the supervisor kills the job's tree when the deadline
// passes, not before; a restarted worker finds the run lost.
func TestFenceWithoutWorker(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ready := fifo(t, "ready")
	g := grant(t, "orphan", 1, api.Spec{Run: treeJob(ready, "")})
	daemon, deadline := startFakeDaemon(t, dir, g, time.Second)
	readFIFO(t, ready)
	killFakeDaemon(t, daemon)

	b, _ := newExecutor(t, dir, time.Minute)
	job, gc := treePids(t, b, g)
	for processAlive(job) || processAlive(gc) {
		if now := fenceClock.Now(); now.After(deadline.Add(waitBound)) {
			t.Fatalf("job %d or grandchild %d alive %v after the deadline", job, gc, now.Sub(deadline))
		}
		time.Sleep(5 * time.Millisecond) // a bounded poll: nothing here to wait on
	}
	if early := deadline.Sub(fenceClock.Now()); early > 0 {
		t.Fatalf("the job died %v before its deadline", early)
	}
	// The supervisor records the end once the tree is gone; wait for it.
	r := reattachWhenEnded(t, b, g)
	wantOutcome(t, r.Outcome(), "lost", supervise.FencedReason)
	if got := readState(t, b, g, supervise.FencedFile); !strings.HasPrefix(got, "boottime deadline "+strconv.FormatInt(deadline.UnixNano(), 10)) {
		t.Fatalf("fenced file %q", got)
	}
}

// reattachWhenEnded re-attaches to a run once its supervisor is gone.
func reattachWhenEnded(t *testing.T, e *Executor, g api.Grant) worker.Run {
	t.Helper()
	r := reattach(t, e, g)
	await(t, r)
	return r
}

// A deadline renewed before it passes keeps the job alive, well past the
// first one; once the renewals stop, the job is stopped at the last one.
func TestFenceRenewed(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Minute)
	ready := fifo(t, "ready")
	g := grant(t, "renewed", 1, api.Spec{Run: "echo up > " + q(ready) + "; exec sleep 60"})
	r := start(t, e, g)
	readFIFO(t, ready)
	const ahead = 300 * time.Millisecond
	first := fenceClock.Now().Add(ahead)
	r.Fence(first)
	var last time.Time
	for fenceClock.Now().Before(first.Add(3 * ahead)) {
		if isDone(r) {
			t.Fatalf("the job ended while its deadline was renewed: %+v", r.Outcome())
		}
		last = fenceClock.Now().Add(ahead)
		r.Fence(last)
		time.Sleep(ahead / 6) // the renewal period, as a worker's heartbeats
	}
	out := await(t, r)
	if early := last.Sub(fenceClock.Now()); early > 0 {
		t.Fatalf("the job was stopped %v before its last deadline", early)
	}
	wantOutcome(t, out, "lost", supervise.FencedReason)
}

// A restarted worker re-attaches within the deadline and renews it: the job
// lives past the old deadline, and ends as it would have.
func TestReattachRenewsFence(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ready, release := fifo(t, "ready"), fifo(t, "release")
	g := grant(t, "renew", 2, api.Spec{Run: "echo up > " + q(ready) + "; read x < " + q(release)})
	// The old deadline leaves the restarted worker time to re-attach, even
	// on a loaded machine; the job must outlive it.
	daemon, old := startFakeDaemon(t, dir, g, 2*time.Second)
	readFIFO(t, ready)
	killFakeDaemon(t, daemon)

	b, _ := newExecutor(t, dir, time.Minute)
	r := reattach(t, b, g)
	r.Fence(fenceClock.Now().Add(waitBound))
	for fenceClock.Now().Before(old.Add(200 * time.Millisecond)) {
		if isDone(r) {
			t.Fatalf("the job ended at its old deadline: %+v", r.Outcome())
		}
		time.Sleep(10 * time.Millisecond) // a bounded poll: nothing happens to wait on
	}
	writeFIFO(t, release, "go\n")
	wantOutcome(t, await(t, r), "succeeded", "")
}

// A run whose worker never calls Fence is fenced toleration − 2×renew after
// its start (the grant's timing, or its job's own if it has one), not left
// unfenced; a grant without timing (these tests') sets no deadline.
func TestFirstFenceFromGrant(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Minute)
	for _, tc := range []struct {
		name, id    string
		daemon, own api.Timing
	}{
		{"the daemon's timing", "first", api.Timing{RenewSeconds: 0.1, GraceSeconds: 0.1, TolerationSeconds: 0.5}, api.Timing{}},
		{"the job's own", "first-own", api.Timing{RenewSeconds: 1, GraceSeconds: 5, TolerationSeconds: 60}, api.Timing{RenewSeconds: 0.1, GraceSeconds: 0.3, TolerationSeconds: 0.5}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ready := fifo(t, "ready")
			g := grant(t, tc.id, 1, api.Spec{Run: "echo up > " + q(ready) + "; exec sleep 60"})
			g.Timing = tc.daemon
			if tc.own != (api.Timing{}) {
				g.Job.Timing = &tc.own
			}
			before := fenceClock.Now()
			r := start(t, e, g)
			readFIFO(t, ready)
			c, at, err := supervise.ReadFence(filepath.Join(runDirOf(e, g), stateDir))
			if err != nil || c != fenceClock {
				t.Fatalf("fence %v %v, %v", c, at, err)
			}
			if d := at.Sub(before); d < 300*time.Millisecond || d > time.Second {
				t.Fatalf("first deadline %v after the start; want 300ms (0.5 − 2×0.1)", d)
			}
			wantOutcome(t, await(t, r), "lost", supervise.FencedReason)
		})
	}

	g := grant(t, "unfenced", 1, api.Spec{Run: "exit 0"})
	wantOutcome(t, await(t, start(t, e, g)), "succeeded", "")
	if _, _, err := supervise.ReadFence(filepath.Join(runDirOf(e, g), stateDir)); err != supervise.ErrNoFence {
		t.Fatalf("a grant without timing got a fence: %v", err)
	}
}

// A fence deadline on another clock is read on that clock: the file names
// it, so the supervisor never compares a monotonic deadline with boottime.
func TestFenceFileNamesItsClock(t *testing.T) {
	t.Parallel()
	e, err := New(Options{Dir: t.TempDir(), Clock: hostclock.Monotonic})
	if err != nil {
		t.Fatal(err)
	}
	ready := fifo(t, "ready")
	g := grant(t, "mono", 1, api.Spec{Run: "echo up > " + q(ready) + "; exec sleep 60"})
	r := start(t, e, g)
	readFIFO(t, ready)
	at := hostclock.Monotonic.Now().Add(time.Minute)
	r.Fence(at)
	c, got, err := supervise.ReadFence(filepath.Join(runDirOf(e, g), stateDir))
	if err != nil || c != hostclock.Monotonic || !got.Equal(at) {
		t.Fatalf("fence %v %v, %v; want monotonic %v", c, got, err, at)
	}
	r.Stop(true)
	wantOutcome(t, await(t, r), "killed", "killed by the worker")
}

// A worker that died between recording a kill and signalling the
// supervisor: the restarted worker signals it again, and the job dies.
func TestReattachSendsRecordedStop(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, _ := newExecutor(t, dir, time.Minute)
	ready := fifo(t, "ready")
	g := grant(t, "half-stopped", 1, api.Spec{Run: "echo up > " + q(ready) + "; exec sleep 60"})
	ra := start(t, a, g)
	readFIFO(t, ready)
	if err := os.WriteFile(filepath.Join(runDirOf(a, g), stateDir, stopFile), []byte("kill\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if isDone(ra) {
		t.Fatal("the job ended without a signal")
	}
	b, _ := newExecutor(t, dir, time.Minute)
	wantOutcome(t, await(t, reattach(t, b, g)), "killed", "killed by the worker")
}

// A run an older leaselog started under its sh wrapper (here a shell that
// leads its session, as that wrapper did) is still stopped after an
// upgrade: its group gets the signals the wrapper expected.
func TestReattachLegacyWrapper(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		kill            bool
		outcome, reason string
	}{
		{true, "killed", "killed by the worker"},
		{false, "cancelled", "cancelled by the worker; exit status 143"},
	} {
		t.Run(tc.outcome, func(t *testing.T) {
			t.Parallel()
			e, logs := newExecutor(t, t.TempDir(), time.Minute)
			ready := fifo(t, "ready")
			g := grant(t, "legacy", 1, api.Spec{Run: "unused"})
			state := filepath.Join(runDirOf(e, g), stateDir)
			if err := os.MkdirAll(state, 0o755); err != nil {
				t.Fatal(err)
			}
			// The wrapper's rule: a TERM is forwarded to the group only
			// when no stop is recorded; a stop's signal was sent to the
			// group by the worker itself.
			old := exec.Command("/bin/sh", "-c", "trap '[ -e .leaselog/stop ] || kill -TERM 0' TERM; /bin/sh -c "+q("echo up > "+q(ready)+"; exec sleep 60")+
				" & wait $!; echo $? > .leaselog/exit")
			old.Dir = runDirOf(e, g)
			old.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
			if err := old.Start(); err != nil {
				t.Fatal(err)
			}
			ended := make(chan struct{})
			go func() { _ = old.Wait(); close(ended) }() // reaped, as init would
			t.Cleanup(func() { _ = syscall.Kill(-old.Process.Pid, syscall.SIGKILL); <-ended })
			if err := os.WriteFile(filepath.Join(state, pidFile), []byte(strconv.Itoa(old.Process.Pid)+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			readFIFO(t, ready)

			r := reattach(t, e, g)
			if !strings.Contains(logs.String(), `"legacy":true`) {
				t.Fatalf("not taken for a legacy run:\n%s", logs)
			}
			r.Stop(tc.kill)
			wantOutcome(t, await(t, r), tc.outcome, tc.reason)
		})
	}
}

// A run directory removed under a running job: the supervisor keeps the
// last deadline it read, and a restarted worker that finds no directory
// kills the job's tree before it says the run is lost — the daemon may give
// the job to another worker at once.
func TestReattachDirectoryRemovedUnderJob(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, _ := newExecutor(t, dir, time.Minute)
	ready := fifo(t, "ready")
	g := grant(t, "rmrf", 1, api.Spec{Run: treeJob(ready, "")})
	ra := start(t, a, g)
	readFIFO(t, ready)
	job, gc := treePids(t, a, g)
	ra.Fence(fenceClock.Now().Add(time.Hour))
	if err := os.RemoveAll(runDirOf(a, g)); err != nil {
		t.Fatal(err)
	}

	b, logs := newExecutor(t, dir, time.Minute)
	r, found, err := b.Reattach(context.Background(), g)
	if err != nil || found || r != nil {
		t.Fatalf("Reattach: %v, %v, %v; want not found", r, found, err)
	}
	for name, pid := range map[string]int{"job": job, "setsid'd grandchild": gc} {
		if processAlive(pid) {
			t.Errorf("%s %d outlived the re-attach:\n%s", name, pid, logs)
		}
	}
	await(t, ra)
}

// The fence file removed (with the job's directory, or by the job): the
// supervisor still stops the job at the last deadline it read.
func TestFenceSurvivesItsFile(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Minute)
	ready := fifo(t, "ready")
	g := grant(t, "nofile", 1, api.Spec{Run: "echo up > " + q(ready) + "; exec sleep 60"})
	r := start(t, e, g)
	readFIFO(t, ready)
	deadline := fenceClock.Now().Add(300 * time.Millisecond)
	r.Fence(deadline)
	// Once the supervisor has read it.
	waitSupervisorLog(t, e, g, "fence set: boottime deadline "+strconv.FormatInt(deadline.UnixNano(), 10))
	if err := os.Remove(filepath.Join(runDirOf(e, g), stateDir, fenceFile)); err != nil {
		t.Fatal(err)
	}
	wantOutcome(t, await(t, r), "lost", supervise.FencedReason)
	if early := deadline.Sub(fenceClock.Now()); early > 0 {
		t.Fatalf("stopped %v before the deadline", early)
	}
}

// waitSupervisorLog waits for the supervisor of g's run to log want.
func waitSupervisorLog(t *testing.T, e *Executor, g api.Grant, want string) {
	t.Helper()
	path := filepath.Join(runDirOf(e, g), stateDir, supervise.LogFile)
	bound := time.Now().Add(waitBound)
	for {
		if b, _ := os.ReadFile(path); strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(bound) {
			b, _ := os.ReadFile(path)
			t.Fatalf("the supervisor did not log %q:\n%s", want, b)
		}
		time.Sleep(5 * time.Millisecond) // a bounded poll: the supervisor writes a file
	}
}

// The supervisor itself is SIGKILLed: nobody holds the job's fence any more,
// so the job dies with it (Pdeathsig) rather than run on unwatched; the run
// is lost. What the job started in sessions of its own is beyond a dead
// supervisor's reach (docs/reliability.md says so), and is cleaned up here.
func TestSupervisorKilledTakesTheJob(t *testing.T) {
	t.Parallel()
	e, _ := newExecutor(t, t.TempDir(), time.Minute)
	ready := fifo(t, "ready")
	g := grant(t, "headless", 1, api.Spec{Run: treeJob(ready, "")})
	r := start(t, e, g)
	readFIFO(t, ready)
	job, gc := treePids(t, e, g)
	t.Cleanup(func() { _ = syscall.Kill(gc, syscall.SIGKILL) })
	if err := syscall.Kill(pidOf(t, e, g), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	out := await(t, r)
	for deadline := time.Now().Add(waitBound); processAlive(job); {
		if time.Now().After(deadline) {
			t.Fatalf("job %d outlived its supervisor by %v", job, waitBound)
		}
		time.Sleep(5 * time.Millisecond) // a bounded poll: the job is not our child
	}
	wantOutcome(t, out, "lost", "agent vanished (supervisor: signal: killed)")
}
