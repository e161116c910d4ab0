// Package supervise is the supervisor of one local job: the process that
// leads the job's session, runs its command, records how it ended, and holds
// its fence. It owns the supervisor's side of the files it shares with
// package local in a run's .leaselog folder (stop, fence, fenced, exit,
// supervisor.log), the way the supervisor is started, and the way both
// sides open files of a run directory, which the job may have tampered with
// (OpenIn, ReadSmall, WriteFileAtomic).
//
// The supervisor is the leaselog binary (or a test binary) run again with a
// hidden marker argument, so that it needs nothing installed: every binary
// that starts local runs calls Init first thing in main (or TestMain), and
// Init turns the process into a supervisor when the marker is there.
//
// The supervisor is a subreaper (PR_SET_CHILD_SUBREAPER): a process the job
// started in a new session (setsid, a daemonising double fork) is reparented
// to it, not to init, so its whole tree is always its descendants. It runs
// `/bin/sh -c RUN` in its own process group and session (the job's group
// id is the supervisor's pid), and then:
//
//   - a SIGTERM, SIGINT or SIGHUP makes it read .leaselog/stop: "kill" kills
//     the job's whole tree now; "cancel" sends SIGTERM to the job's process
//     group once and kills the whole tree after the stop grace; no stop file
//     (someone else's signal) forwards one SIGTERM to the group, once;
//   - a KillSignal (SIGUSR1) kills the job's whole tree now, with no stop
//     file to read: for a worker that finds the run directory gone and the
//     supervisor still there (FindByState);
//   - every FencePoll it reads .leaselog/fence ("<clock> <unix-ns>", a
//     reading of hostclock's clock of that name); once that clock reaches
//     the deadline it writes .leaselog/fenced and kills the whole tree, on
//     its own, whether or not a worker is alive (a fence file that goes
//     missing or unreadable leaves the last deadline read in force); for a
//     job of the daemon's own worker on the Pebble engine, the deadline
//     moves by the time no process held the daemon's store (absence.go),
//     which the daemon takes out of every lease deadline on its restart;
//   - when the command ends, it kills what the command left behind (the
//     tree again: nothing a job started outlives it or changes its worktree
//     while it is brought back), writes the command's exit status to
//     .leaselog/exit (exit.tmp, then rename), and exits 0.
//
// Killing the tree: list the supervisor's descendants from /proc (ppid
// links), SIGKILL them, reap, and again until none is left; a process that
// forks meanwhile leaves an orphan that comes back to the subreaper and is
// found on the next pass.
//
// The fence file lives in the job's own directory, so a job could move its
// own deadline, as it could kill its supervisor: the supervisor stops jobs
// that are lost, not jobs that fight it.
package supervise

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/leaselog/leaselog/hostclock"
)

// Marker is the argument that makes a binary a supervisor (os.Args[1]). It
// is no command name a person would type.
const Marker = "__leaselog-supervise__"

// Names inside a run's .leaselog folder that the supervisor reads or writes.
const (
	StopFile   = "stop"           // "cancel" or "kill", written by the worker before it signals
	FenceFile  = "fence"          // "<clock> <unix-ns>": the fence deadline, written by the worker
	FencedFile = "fenced"         // written by the supervisor when it stopped the job at the fence
	ExitFile   = "exit"           // the command's exit status ("3\n")
	LogFile    = "supervisor.log" // the supervisor's own lines
)

// KillSignal makes a supervisor kill its job's whole tree, no questions.
const KillSignal = syscall.SIGUSR1

// FindByState returns the pid of the live supervisor whose .leaselog folder
// is state, or 0 if there is none: its command line names the folder, which
// need not exist any more.
func FindByState(state string) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if len(args) > 2 && args[1] == Marker && args[2] == state {
			return pid
		}
	}
	return 0
}

// FencePoll is how often the supervisor reads the fence file and its clock:
// the job dies at most this long after its deadline. A poll, not a timer,
// because Go's timers run on CLOCK_MONOTONIC and the fence may be on
// CLOCK_BOOTTIME, which moves on while the host sleeps.
const FencePoll = 25 * time.Millisecond

var hooked atomic.Bool

// Init makes this process a supervisor if it was started as one: it then
// never returns. Otherwise it returns at once, and records that this binary
// can start supervisors (Hooked). Call it first thing in main, and in
// TestMain of test binaries that start local runs.
func Init() {
	if len(os.Args) > 1 && os.Args[1] == Marker {
		os.Exit(Main(os.Args[2:]))
	}
	hooked.Store(true)
}

// Hooked reports whether Init was called in this process: only then can
// Command's re-execution of this binary become a supervisor (otherwise it
// would run the binary's ordinary main again).
func Hooked() bool { return hooked.Load() }

// Command returns the command that supervises run, with its state in the
// .leaselog folder state, its stop grace grace, and its standard output and
// error going to stdout and stderr. storeLock is "" but for a job of the
// daemon's own worker on the Pebble engine: the absolute path of its
// store's lock file (eventlog.LockFile), whose free time moves the fence
// deadline (Absence). The caller sets Dir (the run directory), Env (the
// job's) and starts it; Command sets a session of its own and points the
// supervisor's own stderr at state/supervisor.log, which the caller must
// close after Start (logFile).
func Command(state string, grace time.Duration, run, storeLock string, stdout, stderr *os.File) (cmd *exec.Cmd, logFile *os.File, err error) {
	if storeLock != "" && !filepath.IsAbs(storeLock) {
		return nil, nil, fmt.Errorf("supervise: store lock %q: not an absolute path", storeLock)
	}
	logFile, err = os.OpenFile(filepath.Join(state, LogFile), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	// /proc/self/exe: this very binary, even if its file was replaced or
	// removed since it started (an upgrade under a running daemon).
	args := []string{Marker, state, grace.String(), run}
	if storeLock != "" {
		args = append(args, storeLock)
	}
	cmd = exec.Command("/proc/self/exe", args...)
	cmd.Args[0] = "leaselog-supervise"
	cmd.Stdin = nil // /dev/null
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.ExtraFiles = []*os.File{stdout, stderr} // fds 3 and 4: the job's 1 and 2
	// A session of its own: signals to the worker's process group or
	// terminal do not reach the job, and its group id is its pid.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	return cmd, logFile, nil
}

// WriteFence writes the fence deadline at, a reading of clock c, to the
// fence file of the .leaselog folder state, whole or not at all.
func WriteFence(state string, c hostclock.Clock, at time.Time) error {
	line := c.String() + " " + strconv.FormatInt(at.UnixNano(), 10) + "\n"
	return WriteFileAtomic(filepath.Join(state, FenceFile), []byte(line))
}

// ErrNoFence is ReadFence's error when no deadline was set.
var ErrNoFence = errors.New("supervise: no fence deadline")

// ReadFence reads the fence deadline of the .leaselog folder state.
func ReadFence(state string) (hostclock.Clock, time.Time, error) {
	b, err := ReadSmall(state, FenceFile, 128)
	if errors.Is(err, os.ErrNotExist) {
		return 0, time.Time{}, ErrNoFence
	}
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("supervise: read fence: %w", err)
	}
	name, ns, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
	if !ok {
		return 0, time.Time{}, fmt.Errorf("supervise: fence %q: want \"<clock> <unix-ns>\"", b)
	}
	c, err := hostclock.Parse(name)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("supervise: fence: %w", err)
	}
	n, err := strconv.ParseInt(ns, 10, 64)
	if err != nil {
		return 0, time.Time{}, fmt.Errorf("supervise: fence %q: %w", b, err)
	}
	return c, time.Unix(0, n), nil
}

// FencedReason is the reason of a run its supervisor stopped at the fence.
const FencedReason = "fence deadline passed; job stopped by its supervisor"
