package local

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/worker"
	"github.com/leaselog/leaselog/worker/local/supervise"
)

// Reattach finds the run of a lease this worker started before it restarted,
// from what the run left on disk:
//
//   - no run directory: found is false (the worker reports the lease lost),
//     once the job is dead: a supervisor still running it (the directory
//     was removed under it) is told to kill it, and waited for;
//   - .leaselog/exit: the job ended while nobody watched; the run is Done at
//     once, with its outcome and what it brought back;
//   - a live supervisor (the pid file's process still leads its group and
//     works in the run directory): a run that watches it every Options.Poll,
//     Done once the exit file appears or the process is gone; the worker
//     renews its fence with Fence;
//   - no live supervisor and no exit status: Done at once, "lost", reason
//     "agent vanished" (the host went down under it, or its group was
//     killed: nobody knows what the job did).
//
// A run its supervisor stopped at the fence (.leaselog/fenced) is "lost",
// whatever else is on disk. A stop recorded before the restart still
// counts: the outcome is cancelled or killed, and the supervisor is
// signalled again (the old worker may have died between writing the stop
// and signalling; the supervisor acts on a mode once, and its cancel's
// grace runs from the first). A run an older leaselog started under its sh
// wrapper is still found, and stopped as that wrapper expected (a signal to
// its group); it has no fence.
func (e *Executor) Reattach(ctx context.Context, g api.Grant) (worker.Run, bool, error) {
	r, err := e.newRun(g)
	if err != nil {
		return nil, false, fmt.Errorf("local: re-attach lease %d: %w", g.Lease, err)
	}
	if err := ctx.Err(); err != nil {
		e.release(r.dir)
		return nil, false, fmt.Errorf("local: re-attach lease %d: %w", g.Lease, err)
	}
	if _, err := os.Stat(r.dir); errors.Is(err, fs.ErrNotExist) {
		e.release(r.dir)
		r.log.Warn().Str("dir", r.dir).Msg("local: re-attach: run directory gone")
		e.stopOrphan(ctx, r)
		return nil, false, nil
	} else if err != nil {
		e.release(r.dir)
		return nil, false, fmt.Errorf("local: re-attach lease %d (job %s): %w", g.Lease, g.Job.ID, err)
	}
	if b, err := readSmall(r.dir, stopFile, 64); err == nil {
		r.mu.mode = parseStopMode(string(b))
	}

	if fileExists(r.path(exitFile)) {
		r.mu.gone = true
		r.log.Info().Str("state", "ended").Msg("local: re-attached")
		r.finish("")
		return r, true, nil
	}
	pid, err := readPid(r.dir)
	if err != nil {
		// Started (the directory is there) but never got as far as its pid
		// file: the daemon died inside Start.
		r.mu.gone = true
		r.log.Info().Str("state", "vanished").Err(err).Msg("local: re-attached")
		r.finish("no pid file")
		return r, true, nil
	}
	r.pid = pid
	if !groupAlive(pid, r.dir) {
		r.mu.gone = true
		r.log.Info().Str("state", "vanished").Int("pid", pid).Msg("local: re-attached")
		r.finish("")
		return r, true, nil
	}

	r.legacy = !isSupervisor(pid)
	r.log.Info().Str("state", "running").Int("pid", pid).Str("stop", r.mu.mode.String()).Bool("legacy", r.legacy).Msg("local: re-attached")
	r.mu.Lock()
	if r.mu.mode != stopNone {
		r.sendStopLocked()
	}
	r.mu.Unlock()
	go r.watch()
	return r, true, nil
}

// orphanBound bounds how long a re-attach waits for the job of a vanished
// run directory to die: killing a tree takes milliseconds.
const orphanBound = 10 * time.Second

// stopOrphan kills the job of a run whose directory is gone, if its
// supervisor is still alive (the directory was removed under it), and waits
// for it to end: the worker reports the lease lost, the daemon may hand the
// job to another worker at once, and it must not run twice.
func (e *Executor) stopOrphan(ctx context.Context, r *run) {
	pid := supervise.FindByState(r.path(""))
	if pid == 0 {
		return
	}
	r.log.Warn().Int("pid", pid).Msg("local: re-attach: the job of the gone directory still runs; killing it")
	if err := syscall.Kill(pid, supervise.KillSignal); err != nil {
		r.log.Warn().Err(err).Int("pid", pid).Msg("local: signal failed")
		return
	}
	t := time.NewTicker(e.poll)
	defer t.Stop()
	bound := time.After(orphanBound)
	for supervise.FindByState(r.path("")) == pid {
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		case <-bound:
			r.log.Error().Int("pid", pid).Float64("after_seconds", orphanBound.Seconds()).Msg("local: re-attach: the job of the gone directory is still alive")
			return
		}
	}
}

// watch polls a re-attached run, which is not this process's child and so
// cannot be waited for, until it ends.
func (r *run) watch() {
	t := time.NewTicker(r.e.poll)
	defer t.Stop()
	for range t.C {
		if fileExists(r.path(exitFile)) || !groupAlive(r.pid, r.dir) {
			break
		}
	}
	r.markGone()
	r.finish("")
}

// isSupervisor reports whether pid runs package supervise's supervisor (its
// first argument is the marker), not the sh wrapper of an older leaselog.
// A process this one may not look at is taken for a supervisor.
func isSupervisor(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return true
	}
	args := strings.Split(string(b), "\x00")
	return len(args) > 1 && args[1] == supervise.Marker
}

// readPid reads the supervisor's pid from the run directory dir.
func readPid(dir string) (int, error) {
	b, err := readSmall(dir, pidFile, 64)
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		return 0, fmt.Errorf("%s: bad pid %q", filepath.Join(dir, stateDir, pidFile), b)
	}
	return pid, nil
}
