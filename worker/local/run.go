package local

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/worker"
	"github.com/leaselog/leaselog/worker/local/supervise"
)

// Outcomes, as the report API spells them.
const (
	outcomeSucceeded = "succeeded"
	outcomeFailed    = "failed"
	outcomeCancelled = "cancelled"
	outcomeKilled    = "killed"
	outcomeLost      = "lost"
)

// reasonVanished is the reason of a run whose processes are gone without an
// exit status: killed from outside, or the machine went down under it.
const reasonVanished = "agent vanished"

// maxResult bounds the JSON result carried in a report: a report must stay
// small enough for the daemon to take it.
const maxResult = 1 << 20

// stopMode is how this executor was asked to stop a run; a kill strengthens
// a cancel, a cancel never weakens a kill.
type stopMode int

const (
	stopNone stopMode = iota
	stopCancel
	stopKill
)

func (m stopMode) String() string {
	switch m {
	case stopCancel:
		return "cancel"
	case stopKill:
		return "kill"
	}
	return "none"
}

func parseStopMode(s string) stopMode {
	switch strings.TrimSpace(s) {
	case "cancel":
		return stopCancel
	case "kill":
		return stopKill
	}
	return stopNone
}

// run is one lease's job: started here (owned, this process reaps it) or
// found again after a restart (re-attached, watched by polling).
type run struct {
	e     *Executor
	job   string
	lease uint64
	dir   string // the run directory
	spec  api.Spec
	log   zerolog.Logger
	pid   int  // the supervisor: leader of the run's session and process group
	owned bool // this process is its parent and reaps it
	// legacy: a re-attached run started by an older leaselog, under its sh
	// wrapper rather than a supervisor (see sendStopLocked).
	legacy bool
	// firstFence is how long after its spawn the job is fenced if the
	// worker never calls Fence (0: not fenced until it does).
	firstFence time.Duration

	done    chan struct{}
	outcome worker.Outcome // written once, before done is closed

	mu struct {
		sync.Mutex
		mode stopMode
		// gone is set once the supervisor is known to have ended. From
		// then on its pid may be recycled: no more signals, no more fences.
		gone bool
	}
}

var _ worker.Run = (*run)(nil)

// path names a file of the run's .leaselog folder ("" for the folder).
func (r *run) path(name string) string { return filepath.Join(r.dir, stateDir, name) }

// Done is closed when the job has ended and its outcome is final (result
// read, files brought back).
func (r *run) Done() <-chan struct{} { return r.done }

// Outcome is what to report; before Done is closed it is the zero Outcome.
func (r *run) Outcome() worker.Outcome {
	select {
	case <-r.done:
		return r.outcome
	default:
		return worker.Outcome{}
	}
}

// Stop asks the run's supervisor to stop the job: a kill kills the job's
// whole process tree, setsid'd descendants included; a cancel sends SIGTERM
// to the job's process group, and the supervisor kills the whole tree after
// Options.StopGrace if the job is still there. The mode is written to
// .leaselog/stop, then the supervisor gets a SIGTERM and reads it; the
// mode on disk also tells a restarted worker how the job was stopped.
// Stopping a run that has ended, or again with the same or a weaker mode,
// does nothing.
func (r *run) Stop(kill bool) {
	want := stopCancel
	if kill {
		want = stopKill
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.gone || want <= r.mu.mode {
		return
	}
	if r.mu.mode == stopNone && fileExists(r.path(exitFile)) {
		// The command ended on its own before we asked: its exit status,
		// not our request, is what happened.
		return
	}
	r.mu.mode = want
	if err := supervise.WriteFileAtomic(r.path(stopFile), []byte(want.String()+"\n")); err != nil {
		// Without the file the supervisor takes the signal for someone
		// else's and forwards one SIGTERM: a cancel, at least.
		r.log.Warn().Err(err).Msg("local: cannot record the stop; the supervisor will only forward a SIGTERM")
	}
	r.log.Info().Str("mode", want.String()).Int("pid", r.pid).Msg("local: stop")
	r.sendStopLocked()
}

// sendStopLocked tells the run's supervisor to read the stop file: a
// SIGTERM to the supervisor alone. A run of an older leaselog, under its sh
// wrapper (legacy), gets what that wrapper expected instead: SIGTERM (a
// cancel) or SIGKILL (a kill) to its whole group; its cancel gets no
// SIGKILL after the grace, and its descendants in other sessions escape.
func (r *run) sendStopLocked() {
	if r.mu.gone || r.pid <= 0 {
		return
	}
	if !r.owned && !groupAlive(r.pid, r.dir) {
		return
	}
	target, sig := r.pid, syscall.SIGTERM
	if r.legacy {
		target = -r.pid
		if r.mu.mode == stopKill {
			sig = syscall.SIGKILL
		}
	}
	// An owned supervisor is not reaped before gone is set (see reap), so
	// its pid cannot have been recycled; a re-attached one was checked.
	if err := syscall.Kill(target, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
		r.log.Warn().Err(err).Int("pid", target).Str("signal", sig.String()).Msg("local: signal failed")
	}
}

// markGone records that the supervisor has ended: no signal may follow.
func (r *run) markGone() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.gone = true
}

// finish works out the outcome of an ended run, publishes it and closes
// Done. detail says more about a run that vanished (how its supervisor
// ended).
func (r *run) finish(detail string) {
	r.outcome = r.collect(detail)
	// Logged before Done closes: whoever waits on Done sees the line.
	ev := r.log.Info().Str("outcome", r.outcome.Outcome)
	if r.outcome.Reason != "" {
		ev = ev.Str("reason", r.outcome.Reason)
	}
	if r.outcome.Ref != "" {
		ev = ev.Str("ref", r.outcome.Ref)
	}
	ev.Msg("local: ended")
	r.e.release(r.dir)
	close(r.done)
}

// collect reads what an ended run left: its exit status, its result, and,
// for a checkout, the files to bring back.
func (r *run) collect(detail string) worker.Outcome {
	r.mu.Lock()
	mode := r.mu.mode
	r.mu.Unlock()

	var out worker.Outcome
	var notes []string
	status, exitErr := readExit(r.dir)
	exited := ""
	if exitErr == nil {
		exited = "exit status " + strconv.Itoa(status)
	}
	switch {
	case fileExists(r.path(fencedFile)):
		// Whatever else happened, the job was stopped because its lease
		// may be gone: a loss, not an attempt.
		out.Outcome, out.Reason = outcomeLost, supervise.FencedReason
	case mode == stopKill:
		out.Outcome, out.Reason = outcomeKilled, "killed by the worker"
	case mode == stopCancel:
		out.Outcome, out.Reason = outcomeCancelled, "cancelled by the worker"
	case exitErr == nil && status == 0:
		out.Outcome = outcomeSucceeded
	case exitErr == nil:
		out.Outcome, out.Reason = outcomeFailed, exited
	case errors.Is(exitErr, fs.ErrNotExist):
		// Nobody saw the job end: its supervisor died with it (the host went
		// down, or someone killed the whole group). What it did is unknown,
		// so it is the worker's loss, not the job's attempt.
		out.Outcome, out.Reason = outcomeLost, reasonVanished
		if detail != "" {
			out.Reason += " (" + detail + ")"
		}
	default:
		out.Outcome, out.Reason = outcomeFailed, exitErr.Error()
	}
	// After a stop, the status says how the job took it; 128+SIGKILL is
	// the supervisor's own kill of the tree, and no news.
	stopped := mode != stopNone || out.Outcome == outcomeLost
	if stopped && exited != "" && status != 128+int(syscall.SIGKILL) {
		notes = append(notes, exited)
	}

	result, note := readResult(r.dir)
	out.Result = result
	if note != "" {
		notes = append(notes, note)
	}

	if r.spec.Checkout != nil {
		ref, skipped, err := bringBack(r.dir, r.spec.BringBack, r.job, r.lease)
		notes = append(notes, skipped...)
		if err != nil {
			// The ref is what an executor waits for: a success whose work
			// is not reachable is not a success. The worktree keeps it.
			if out.Outcome == outcomeSucceeded {
				out.Outcome = outcomeFailed
			}
			notes = append(notes, "bring back: "+err.Error())
		} else {
			out.Ref = ref
		}
	}
	if len(notes) > 0 {
		out.Reason = strings.Join(append(nonEmpty(out.Reason), notes...), "; ")
	}
	return out
}

func nonEmpty(s string) []string {
	if s == "" {
		return nil
	}
	return []string{s}
}

// readExit reads the status the supervisor wrote in the run directory dir.
func readExit(dir string) (int, error) {
	b, err := readSmall(dir, exitFile, 64)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("unreadable exit status %q", b)
	}
	return n, nil
}

// readResult reads the JSON the job of the run directory dir left at
// $LEASELOG_RESULT. A result that is not valid JSON, or too large to
// report, or not a regular file, is left out, and the note says so: the
// exit status still decides the outcome.
func readResult(dir string) (json.RawMessage, string) {
	b, err := readSmall(dir, resultFile, maxResult)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, ""
	case errors.Is(err, supervise.ErrTooLarge):
		return nil, fmt.Sprintf("result ignored: larger than %d bytes", maxResult)
	case err != nil:
		return nil, "result ignored: " + err.Error()
	case len(bytes.TrimSpace(b)) == 0:
		return nil, ""
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil {
		return nil, "result ignored: not valid JSON"
	}
	return buf.Bytes(), ""
}

// Progress is what the job last wrote at $LEASELOG_PROGRESS, compact, or
// nil: none, or not a JSON object, or larger than a heartbeat carries
// (event.MaxDetailsLen; a job that wants more says less). It is read
// through supervise.ReadSmall like the result: no link, no named pipe.
// A job that rewrites the file in place may be read half-written: that
// reads as no JSON and is skipped until the next heartbeat; one that
// renames a new file over it never is.
func (r *run) Progress() []byte {
	b, err := readSmall(r.dir, progressFile, maxProgress)
	if err != nil {
		return nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, b); err != nil || buf.Len() == 0 || buf.Bytes()[0] != '{' || buf.Len() > maxProgress {
		return nil
	}
	return buf.Bytes()
}

// maxProgress is the most of a progress file read: the details of one
// lease a heartbeat carries.
const maxProgress = 4096

// Fence moves the fence deadline the run's supervisor holds to at, a
// reading of Options.Clock: past it, the supervisor kills the job's whole
// tree on its own. The last call wins, earlier or later. A run that has
// ended, or whose directory is gone, has nothing to fence.
func (r *run) Fence(at time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mu.gone {
		return
	}
	if err := supervise.WriteFence(r.path(""), r.e.clock, at); err != nil {
		r.log.Warn().Err(err).Msg("local: cannot move the fence deadline; the supervisor keeps the last one")
	}
}
