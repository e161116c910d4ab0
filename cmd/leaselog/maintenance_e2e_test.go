package main

// End-to-end tests of a daemon away for longer than the fence, with its
// local worker's job running: stopped or killed on the Pebble engine, it
// keeps the job (no daemon held the store, so none could grant its lease;
// the downtime is the daemon's absence); hung, or on engine jetstream
// (whose standby can lead meanwhile), the job stops at its fence.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leaselog/leaselog/worker/local/supervise"
)

// fence is how long after its last acknowledged heartbeat a job of the
// harness's timing is fenced.
const fence = toleration - 2*renew

// runDirOf is the run directory of lease of job id under the daemon's data
// in dir.
func runDirOf(dir, id string, lease uint64) string {
	return filepath.Join(dir, "data", "work", fmt.Sprintf("%s-%d", id, lease))
}

// What happens: the daemon on the Pebble engine is stopped (SIGTERM) or
// killed (SIGKILL) and stays down for three fences: an upgrade, a
// maintenance window. Its local worker went with it, and nothing renewed
// the job's fence; but no process held the store meanwhile, so no lease
// could be granted to anyone, and the supervisor moved its deadline by that
// time. Restarted, the daemon records the downtime as its absence, the
// local worker re-attaches and renews the fence, and the job, let finish,
// is reported succeeded on its lease: nothing expired, nothing was lost.
func TestE2EDaemonDownPastTheFenceKeepsItsLocalJob(t *testing.T) {
	for _, tc := range []struct {
		name string
		sig  syscall.Signal
		code int // the daemon's exit code
	}{{"stopped", syscall.SIGTERM, 0}, {"killed", syscall.SIGKILL, -1}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			t.Cleanup(func() { killRuns(filepath.Join(dir, "data", "work")) })
			d := startServe(t, dir, 1)
			ev := d.follow(t, 0)
			pidFile, gate := filepath.Join(dir, "agent.pid"), filepath.Join(dir, "go")
			submit(t, d.c, "agent-1", "run", fmt.Sprintf("echo $$ > %[1]q.tmp && mv %[1]q.tmp %[1]q; while [ ! -e %[2]q ]; do sleep 0.02; done", pidFile, gate))
			running := ev.next("lease.running", "agent-1")
			pid := waitPid(t, pidFile)
			runDir := runDirOf(dir, "agent-1", running.Lease)

			d.signal(tc.sig)
			if code := d.wait(); code != tc.code {
				t.Fatalf("serve exited %d after %v, want %d", code, tc.sig, tc.code)
			}
			down := time.Now()
			for time.Since(down) < 3*fence {
				if !alive(pid) {
					t.Fatalf("the job died %v after its daemon stopped (fence %v):\n%s", time.Since(down), fence, supervisorLog(runDir))
				}
				time.Sleep(20 * time.Millisecond) // observing a window
			}

			d = startServe(t, dir, 1)
			ev = d.follow(t, running.Seq)
			if started := ev.next("daemon.started", ""); started.GapSeconds < (3 * fence).Seconds() {
				t.Fatalf("started after a gap of %.2fs, want at least %.2fs", started.GapSeconds, (3 * fence).Seconds())
			}
			waitFenceRenewed(t, runDir)
			if !alive(pid) {
				t.Fatalf("the job died before the restarted daemon renewed its fence:\n%s", supervisorLog(runDir))
			}
			if err := os.WriteFile(gate, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			rep := ev.next("lease.reported", "agent-1")
			if rep.Lease != running.Lease || rep.Outcome != "succeeded" || rep.Worker != "local" {
				t.Fatalf("report %+v, want lease %d succeeded by local", rep, running.Lease)
			}
			for _, typ := range history(t, d.c, "agent-1") {
				if typ == "lease.expired" || typ == "lease.lost" {
					t.Fatalf("history %v: the daemon's downtime cost the job its lease", history(t, d.c, "agent-1"))
				}
			}
			log := supervisorLog(runDir)
			if !strings.Contains(log, "no daemon holds it") {
				t.Fatalf("the supervisor did not see the store free:\n%s", log)
			}
			t.Logf("the supervisor's log:\n%s", log)
		})
	}
}

// What happens: the daemon is hung (SIGSTOP) past the fence. It holds its
// store all the same — and a daemon that holds it may be running, its
// sweeper expiring what a stuck local worker no longer renews, which its
// supervisor cannot tell from a stopped one — so the supervisor stops the
// job at its fence, as for any worker. The daemon, continued, reports the
// run lost: it fails "worker lost", not an attempt, and the pause expired
// nothing (its own absence).
func TestE2EDaemonHungPastTheFenceLosesItsLocalJob(t *testing.T) {
	dir := t.TempDir()
	t.Cleanup(func() { killRuns(filepath.Join(dir, "data", "work")) })
	d := startServe(t, dir, 1)
	ev := d.follow(t, 0)
	running, pid := runPidJob(t, d, ev, dir, "agent-1")
	runDir := runDirOf(dir, "agent-1", running.Lease)

	d.signal(syscall.SIGSTOP)
	stopped := time.Now()
	ended := waitDead(t, pid, 20*time.Second)
	if ended.Sub(stopped) > fence+time.Second {
		t.Fatalf("the job stopped %v after its daemon was; its fence is %v", ended.Sub(stopped), fence)
	}
	fenced, err := os.ReadFile(filepath.Join(runDir, ".leaselog", supervise.FencedFile))
	if err != nil || strings.Contains(string(fenced), "moved") {
		t.Fatalf("fenced file %q, %v: want the deadline as the worker set it\n%s", fenced, err, supervisorLog(runDir))
	}
	d.signal(syscall.SIGCONT)

	lost := ev.next("lease.lost", "agent-1")
	if lost.Lease != running.Lease || lost.Worker != "local" {
		t.Fatalf("lost %+v, want lease %d of local", lost, running.Lease)
	}
	if j := job(t, d.c, "agent-1"); j.State != "failed" || j.Reason != "worker lost" || j.Attempts != 0 {
		t.Fatalf("job after its daemon hung past the fence: %+v", j)
	}
	for _, typ := range history(t, d.c, "agent-1") {
		if typ == "lease.expired" || typ == "lease.reported" {
			t.Fatalf("history %v: the pause expired a lease, or the loss was an attempt", history(t, d.c, "agent-1"))
		}
	}
}

// What happens: the daemon on engine jetstream is killed (SIGKILL) with
// its local worker's job running. A standby could lead the stream and
// expire the lease meanwhile, so the job's supervisor holds nothing across
// the downtime: it stops the job at its fence.
func TestE2EJetStreamDaemonDownPastTheFenceLosesItsLocalJob(t *testing.T) {
	ns := runNATS(t)
	dir := t.TempDir()
	t.Cleanup(func() { killRuns(filepath.Join(dir, "data", "work")) })
	text := strings.Replace(jetStreamText(ns.ClientURL()), "local_capacity = 0", "local_capacity = 1", 1)
	const fence = 6*time.Second - 2*400*time.Millisecond // jetStreamText's timing
	d := startServeConfig(t, dir, text)
	ev := d.follow(t, 0)
	running, pid := runPidJob(t, d, ev, dir, "agent-1")

	d.signal(syscall.SIGKILL)
	d.wait()
	down := time.Now()
	ended := waitDead(t, pid, 30*time.Second)
	if ended.Sub(down) > fence+time.Second {
		t.Fatalf("the job stopped %v after its daemon died; its fence is %v", ended.Sub(down), fence)
	}
	runDir := runDirOf(dir, "agent-1", running.Lease)
	if fenced, err := os.ReadFile(filepath.Join(runDir, ".leaselog", supervise.FencedFile)); err != nil || strings.Contains(string(fenced), "moved") {
		t.Fatalf("fenced file %q, %v: want the deadline as the worker set it\n%s", fenced, err, supervisorLog(runDir))
	}
}

// supervisorLog is the supervisor's log of the run in runDir, for a
// failure's message.
func supervisorLog(runDir string) string {
	b, err := os.ReadFile(filepath.Join(runDir, ".leaselog", supervise.LogFile))
	if err != nil {
		return err.Error()
	}
	return string(b)
}
