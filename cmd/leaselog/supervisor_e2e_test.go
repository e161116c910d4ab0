package main

// End-to-end tests of the jobs' supervisor (package supervise): the job of
// a `leaselog worker` killed with SIGKILL stops at its fence, before the
// daemon expires its lease, and lives on when the worker restarts at once
// and renews its fence; a run directory gone at a worker's restart is a lost
// run; a job's setsid'd descendants die with it.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/worker/local/supervise"
)

// This test binary starts local runs in-process too (Main.Run of serve):
// their supervisor is this binary run again, which must become one before
// the tests start. An init, not a line in TestMain, which harness_test.go
// keeps; it runs before TestMain all the same.
func init() { supervise.Init() }

// pidJob is a job that writes its pid to path, then sleeps: its pid is the
// job's own (exec), so the test sees exactly when it dies.
func pidJob(path string) string {
	return fmt.Sprintf("echo $$ > %[1]q.tmp && mv %[1]q.tmp %[1]q; exec sleep 60", path)
}

// runPidJob submits run job id as a pidJob writing to dir/<id>.pid, and
// returns its lease.running event and the job's pid once it runs.
func runPidJob(t *testing.T, d *daemonProc, ev *events, dir, id string) (running api.Event, pid int) {
	t.Helper()
	pidFile := filepath.Join(dir, id+".pid")
	submit(t, d.c, id, "run", pidJob(pidFile))
	return ev.next("lease.running", id), waitPid(t, pidFile)
}

// waitPid waits for a job to write its pid to path.
func waitPid(t *testing.T, path string) int {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		// The shell creates the file before it writes the pid: empty is
		// not yet.
		if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) != "" {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatalf("no pid in %s", path)
		}
		time.Sleep(5 * time.Millisecond) // a bounded poll: the job writes a file
	}
}

// waitDead waits for pid to die and returns when it was first seen dead.
func waitDead(t *testing.T, pid int, bound time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(bound)
	for alive(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d alive after %v", pid, bound)
		}
		time.Sleep(2 * time.Millisecond) // a bounded poll: nothing else to wait on
	}
	return time.Now()
}

// What happens: the process of a `leaselog worker` dies (SIGKILL) during a
// run. Its job does not run on: its supervisor stops it at the fence —
// toleration − 2×renew after the last acknowledged heartbeat — before the
// daemon expires the lease, and the run fails "worker lost", not an attempt.
// The job lives well past its first deadline before that: the worker renews
// it after each heartbeat.
func TestE2EWorkerKilledJobStopsBeforeExpiry(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 0)
	ev := d.follow(t, 0)
	work := filepath.Join(dir, "w1")
	w := startWorker(t, d.url, "w1", work)
	running, pid := runPidJob(t, d, ev, dir, "agent-1")

	// Twice the toleration: only renewed deadlines keep the job alive.
	for until := time.Now().Add(2 * toleration); time.Now().Before(until); {
		if !alive(pid) {
			t.Fatalf("the job died while its worker was alive:\n%s", w.output())
		}
		time.Sleep(20 * time.Millisecond) // observing a window
	}
	w.signal(syscall.SIGKILL)
	w.wait()
	killed := time.Now()
	ended := waitDead(t, pid, 10*time.Second)
	expired := ev.next("lease.expired", "agent-1")
	if expired.Lease != running.Lease || expired.Reason != "worker lost" {
		t.Fatalf("expired %+v, want lease %d, worker lost", expired, running.Lease)
	}
	if !ended.Before(expired.Time) {
		t.Fatalf("the job ended at %v, %v after the worker was killed, not before its lease expired at %v",
			ended.Format(time.StampMicro), ended.Sub(killed), expired.Time.Format(time.StampMicro))
	}
	fenced, err := os.ReadFile(filepath.Join(work, fmt.Sprintf("agent-1-%d", running.Lease), ".leaselog", supervise.FencedFile))
	if err != nil {
		t.Fatalf("the supervisor did not record the fence: %v", err)
	}
	t.Logf("job ended %v after the kill, %v before the expiry; %s", ended.Sub(killed), expired.Time.Sub(ended), fenced)
	if j := job(t, d.c, "agent-1"); j.State != "failed" || j.Reason != "worker lost" || j.Attempts != 0 {
		t.Fatalf("job after the worker died: %+v", j)
	}
}

// What happens: a `leaselog worker` is SIGKILLed and started again at once.
// It re-attaches to its job within the fence and renews it: the job lives on
// well past the deadline the dead worker left, and its report is accepted.
func TestE2EWorkerRestartRenewsFence(t *testing.T) {
	dir := t.TempDir()
	d := startServe(t, dir, 0)
	ev := d.follow(t, 0)
	work := filepath.Join(dir, "w1")
	w := startWorker(t, d.url, "w1", work)
	pidFile, gate := filepath.Join(dir, "job.pid"), filepath.Join(dir, "go")
	submit(t, d.c, "agent-1", "run", fmt.Sprintf("echo $$ > %q; while [ ! -e %q ]; do sleep 0.02; done", pidFile, gate))
	running := ev.next("lease.running", "agent-1")
	pid := waitPid(t, pidFile)
	w.signal(syscall.SIGKILL)
	w.wait()
	w2 := startWorker(t, d.url, "w1", work)

	for until := time.Now().Add(2 * toleration); time.Now().Before(until); {
		if !alive(pid) {
			t.Fatalf("the job died after its worker restarted:\n%s", w2.output())
		}
		time.Sleep(20 * time.Millisecond) // observing a window
	}
	if err := os.WriteFile(gate, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	rep := ev.next("lease.reported", "agent-1")
	if rep.Lease != running.Lease || rep.Outcome != "succeeded" {
		t.Fatalf("report %+v, want lease %d succeeded", rep, running.Lease)
	}
}

// What happens: a worker restarts and its run directory is gone — the
// machine was wiped (its job died too), or an operator removed it under the
// running job. The worker reports the run lost, once its job is dead: it
// fails "worker lost", not an attempt. A toleration of 5s leaves the
// restart all the time it needs, so that the worker's report, not an
// expiry, ends the lease.
func TestE2ERunDirectoryGoneAtRestart(t *testing.T) {
	for _, tc := range []struct {
		name    string
		jobDies bool // with the directory, before the restart
	}{{"wiped", true}, {"removed under the job", false}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d := startServeConfig(t, dir, `
[server]
listen = "127.0.0.1:0"
[plugins.executor]
renew_seconds = 0.2
grace_seconds = 0.5
toleration_seconds = 5
local_capacity = 0
[log]
level = "debug"
`)
			ev := d.follow(t, 0)
			work := filepath.Join(dir, "w1")
			w := startWorker(t, d.url, "w1", work)
			running, pid := runPidJob(t, d, ev, dir, "agent-1")
			w.signal(syscall.SIGKILL)
			w.wait()
			if tc.jobDies {
				killRuns(work)
				waitDead(t, pid, 10*time.Second)
			}
			if err := os.RemoveAll(filepath.Join(work, fmt.Sprintf("agent-1-%d", running.Lease))); err != nil {
				t.Fatal(err)
			}

			startWorker(t, d.url, "w1", work)
			lost := ev.next("lease.lost", "agent-1")
			if alive(pid) {
				t.Fatalf("the job %d still runs after its lease was reported lost", pid)
			}
			if lost.Lease != running.Lease || lost.Worker != "w1" {
				t.Fatalf("lost %+v, want lease %d of w1", lost, running.Lease)
			}
			if j := job(t, d.c, "agent-1"); j.State != "failed" || j.Reason != "worker lost" || j.Attempts != 0 || j.Lease != nil {
				t.Fatalf("job after its run directory was lost: %+v", j)
			}
			for _, typ := range history(t, d.c, "agent-1") {
				if typ == "lease.expired" || typ == "lease.reported" {
					t.Fatalf("history %v: the loss was not the worker's report", history(t, d.c, "agent-1"))
				}
			}
		})
	}
}

// What happens: a job starts a process in a session of its own (setsid),
// out of reach of any signal to the job's group or session. It dies with
// the job all the same, through the daemon's local worker: when the job is
// killed or cancelled, and when the job ends and leaves it behind.
func TestE2ESetsidInJob(t *testing.T) {
	for _, tc := range []struct {
		name    string
		end     string // how the job ends on its own, after starting the grandchild
		stop    func(t *testing.T, d *daemonProc, id string)
		outcome string
	}{
		{"kill", "wait", func(t *testing.T, d *daemonProc, id string) {
			if _, err := d.c.Kill(context.Background(), id); err != nil {
				t.Fatal(err)
			}
		}, "killed"},
		{"cancel", "wait", func(t *testing.T, d *daemonProc, id string) {
			if _, err := d.c.Cancel(context.Background(), id); err != nil {
				t.Fatal(err)
			}
		}, "cancelled"},
		{"leftover", "exit 0", func(*testing.T, *daemonProc, string) {}, "succeeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			d := startServe(t, dir, 1)
			t.Cleanup(func() { killRuns(filepath.Join(dir, "data", "work")) })
			ev := d.follow(t, 0)
			gcFile, release := filepath.Join(dir, "gc.pid"), filepath.Join(dir, "release")
			// Single quotes: $$ is the grandchild's own pid.
			run := fmt.Sprintf("setsid sh -c '%s' & while [ ! -e %q ]; do sleep 0.01; done; %s",
				strings.ReplaceAll(pidJob(gcFile), "'", `'\''`), release, tc.end)
			submit(t, d.c, "tree-1", "run", run)
			ev.next("lease.running", "tree-1")
			gc := waitPid(t, gcFile)
			if sid, err := unixGetsid(gc); err != nil || sid != gc {
				t.Fatalf("grandchild %d: session %d, %v; want a session of its own", gc, sid, err)
			}
			tc.stop(t, d, "tree-1")
			if err := os.WriteFile(release, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if rep := ev.next("lease.reported", "tree-1"); rep.Outcome != tc.outcome {
				t.Fatalf("report %+v, want %s", rep, tc.outcome)
			}
			// The supervisor reaps the whole tree before it records the end,
			// so the grandchild is gone by the report.
			if alive(gc) {
				t.Fatalf("the setsid'd grandchild %d outlived its job", gc)
			}
		})
	}
}

func unixGetsid(pid int) (int, error) {
	sid, _, errno := syscall.RawSyscall(syscall.SYS_GETSID, uintptr(pid), 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(sid), nil
}

// waitFenceRenewed waits until the fence deadline of the run in runDir lies
// in the future of its clock.
func waitFenceRenewed(t *testing.T, runDir string) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		c, at, err := supervise.ReadFence(filepath.Join(runDir, ".leaselog"))
		if err == nil && c.Now().Before(at) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("fence of %s not renewed: %v %v, %v", runDir, c, at, err)
		}
		time.Sleep(5 * time.Millisecond) // a bounded poll: the worker writes a file
	}
}
