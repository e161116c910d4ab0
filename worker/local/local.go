// Package local is the executor that runs jobs as processes on this machine:
// the built-in `local` worker of `leaselog serve`, and the executor of
// `leaselog worker`. The worker loop (package worker) owns the leases; this
// package owns what a lease runs here ([Executor]) — one run directory per
// lease under [Options.Dir], the process group running the job's command in it, and what is
// brought back from it when the job ends (a git ref, a JSON result).
//
// # The supervisor
//
// A job's command runs as `/bin/sh -c RUN` under a supervisor (package
// supervise: this binary re-executed, in a session of its own): nothing
// aimed at the worker — a SIGTERM or SIGKILL to its process group, a ^C in
// its terminal — reaches the job, so an agent outlives a daemon restart. The
// supervisor is a subreaper, so whatever the job starts, in new sessions
// too, stays below it and dies with it: when the command ends, when the
// worker kills it, and when the fence deadline the worker renews (Fence)
// passes, whether or not a worker is still alive. For the daemon's own
// worker on the Pebble engine ([Options.StoreLock]) that deadline moves by
// the time no process held the daemon's store: a daemon that is not
// running grants nothing, and takes its downtime out of every lease
// deadline when it starts again. Everything a restarted
// worker needs to find the job again is on disk, and the supervisor
// records the command's exit status there even when no worker is left to
// see it end.
//
// # The run directory
//
// A run directory, one per lease:
//
//	Options.Dir/
//	└── <job>-<lease>/          a detached git worktree of spec.checkout, or a
//	    │                       plain directory; the command's working
//	    │                       directory ($LEASELOG_WORKDIR)
//	    ├── …                   the job's own files
//	    └── .leaselog/          leaselog's files; its .gitignore ("*") keeps
//	        │                   them out of the job's commits
//	        ├── .gitignore
//	        ├── spec.json       the job's spec, as the daemon gave it
//	        ├── pid             the supervisor's pid = process group id =
//	        │                   session id; its cwd is the run directory
//	        ├── stdout          the command's standard output
//	        ├── stderr          the command's standard error
//	        ├── supervisor.log  the supervisor's own lines (stops, the fence)
//	        ├── result.json     $LEASELOG_RESULT: JSON the job may leave behind
//	        ├── progress.json   $LEASELOG_PROGRESS: a JSON object, the job's
//	        │                   progress, sent with the next heartbeat
//	        ├── fence           "<clock> <unix-ns>": the fence deadline, a
//	        │                   reading of hostclock's clock of that name;
//	        │                   written at the start (the grant's toleration −
//	        │                   2×renew from then) and by every Fence
//	        ├── stop            "cancel" or "kill", once this worker stopped it
//	        ├── fenced          once the supervisor stopped the job at the fence
//	        └── exit            the command's exit status ("3\n"; 128+N for
//	                            signal N), written by the supervisor once the
//	                            job's whole tree is gone (exit.tmp, then
//	                            rename, so a reader never sees half of it)
//
// The job can write anywhere in its run directory, .leaselog included: what
// leaselog reads there it opens through no link and without waiting on a
// named pipe, and it takes regular files of one link only
// (supervise.OpenIn); a checkout that brings a .leaselog of its own does
// not start.
//
// Run directories, worktrees included, hold the whole state an agent left,
// which auditors may want: they are kept for [Options.Retention] after their
// job ended (a week by default in the CLI), then removed
// ([Executor.RunRetention]).
// What a job made stays reachable from the main repository through
// refs/leaselog/<job>/<lease>, which retention leaves alone.
//
// # Outcomes
//
// The outcome of a run: a run its supervisor stopped at the fence is
// "lost", reason "fence deadline passed; job stopped by its supervisor"
// (its lease may be another's by now: a loss, never an attempt); otherwise
// a run this executor stopped is "cancelled" (Stop(false)) or "killed"
// (Stop(true)), whatever its status; exit status 0 is "succeeded"; any
// other status is "failed", reason "exit status N"; a run whose supervisor
// is gone without an exit status is "lost", reason "agent vanished".
//
// This package is Linux-only: it reads /proc, calls waitid, and its
// supervisor needs PR_SET_CHILD_SUBREAPER.
package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/hostclock"
	"github.com/leaselog/leaselog/worker"
	"github.com/leaselog/leaselog/worker/local/supervise"
)

// Names inside a run directory.
const (
	stateDir   = ".leaselog"
	specFile   = "spec.json"
	pidFile    = "pid"
	stdoutFile = "stdout"
	stderrFile = "stderr"
	resultFile = "result.json"
	// progressFile is where a job writes its progress ($LEASELOG_PROGRESS),
	// a JSON object the worker sends with its next heartbeat when it
	// changed (Progress).
	progressFile = "progress.json"
	exitFile     = supervise.ExitFile
	stopFile     = supervise.StopFile
	fenceFile    = supervise.FenceFile
	fencedFile   = supervise.FencedFile
)

// Options configures an Executor.
type Options struct {
	// Dir is the root of the run directories; it is created if missing.
	Dir string
	// Logger gets one line per start, stop, end and re-attach. The zero
	// Logger discards.
	Logger zerolog.Logger
	// StopGrace is how long a cancel waits between SIGTERM and SIGKILL;
	// 0 means 10s.
	StopGrace time.Duration
	// Poll is how often a re-attached run, which is not this process's
	// child, looks at its process; 0 means 500ms.
	Poll time.Duration
	// Clock is the fence clock: Run.Fence's deadlines are readings of it,
	// and so is the first deadline a run gets at its start. It must be the
	// worker's (worker.Options). 0 means hostclock.Boottime.
	Clock hostclock.Clock
	// Retention is how long the run directory of an ended job is kept
	// (RunRetention); 0 keeps them all.
	Retention time.Duration
	// Now reads the wall clock retention compares file times with; nil is
	// time.Now.
	Now func() time.Time
	// StoreLock is set by a daemon for its own worker on the Pebble engine
	// only: the lock file of its store (eventlog.LockFile). That worker
	// lives in the daemon's process, and a daemon that is not running
	// grants nothing and takes its downtime out of every lease deadline on
	// its restart; so its runs' supervisors hold the fence across the time
	// no process holds the store (supervise.Absence): an upgrade or a
	// maintenance window longer than the fence finds the jobs running. Not
	// for a worker of another process, nor on an engine where a standby
	// can lead meanwhile. A relative path is made absolute.
	StoreLock string
}

// Executor runs jobs as local processes. It implements worker.Executor; its
// methods are safe for concurrent use.
type Executor struct {
	dir   string // absolute, symlinks resolved: compared with /proc/<pid>/cwd
	log   zerolog.Logger
	grace time.Duration
	poll  time.Duration
	clock hostclock.Clock
	keep  time.Duration
	now   func() time.Time
	store string // Options.StoreLock, absolute

	mu struct {
		sync.Mutex
		// held counts, by run directory, the runs started or re-attached
		// and not yet ended: retention leaves their directories alone.
		held map[string]int
	}
}

var _ worker.Executor = (*Executor)(nil)

// New returns an executor whose run directories live under opts.Dir.
func New(opts Options) (*Executor, error) {
	if opts.Dir == "" {
		return nil, errors.New("local: Options.Dir is required")
	}
	if !supervise.Hooked() {
		// Without the hook the re-executed binary would run its own main
		// (or all its tests) instead of supervising.
		return nil, errors.New("local: this binary cannot supervise jobs: call supervise.Init first thing in main (or TestMain)")
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("local: create %s: %w", opts.Dir, err)
	}
	dir, err := filepath.Abs(opts.Dir)
	if err == nil {
		dir, err = filepath.EvalSymlinks(dir)
	}
	if err != nil {
		return nil, fmt.Errorf("local: resolve %s: %w", opts.Dir, err)
	}
	if opts.StopGrace <= 0 {
		opts.StopGrace = 10 * time.Second
	}
	if opts.Poll <= 0 {
		opts.Poll = 500 * time.Millisecond
	}
	if opts.Clock == 0 {
		opts.Clock = hostclock.Boottime
	}
	if opts.Retention < 0 {
		return nil, fmt.Errorf("local: retention %v: must be 0 (keep everything) or more", opts.Retention)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	store := opts.StoreLock
	if store != "" {
		// The supervisor runs in the run directory.
		if store, err = filepath.Abs(store); err != nil {
			return nil, fmt.Errorf("local: resolve %s: %w", opts.StoreLock, err)
		}
	}
	e := &Executor{dir: dir, log: opts.Logger, grace: opts.StopGrace, poll: opts.Poll, clock: opts.Clock,
		keep: opts.Retention, now: opts.Now, store: store}
	e.mu.held = map[string]int{}
	return e, nil
}

// Start checks out and starts the job of grant g. It returns once the
// command runs and its pid is on disk. The process is not tied to ctx: ctx
// bounds the checkout only, and the job outlives this process.
func (e *Executor) Start(ctx context.Context, g api.Grant) (worker.Run, error) {
	r, err := e.newRun(g)
	if err != nil {
		return nil, fmt.Errorf("local: start lease %d: %w", g.Lease, err)
	}
	if err := e.start(ctx, r, g.Job.Spec); err != nil {
		e.release(r.dir)
		return nil, fmt.Errorf("local: start lease %d (job %s): %w", g.Lease, g.Job.ID, err)
	}
	return r, nil
}

func (e *Executor) start(ctx context.Context, r *run, rawSpec json.RawMessage) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// A run directory is never reused: a second Start of the same lease
	// must not run the job twice, and what is there belongs to auditors.
	if _, err := os.Lstat(r.dir); err == nil {
		return fmt.Errorf("run directory %s already exists", r.dir)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if c := r.spec.Checkout; c != nil {
		if err := checkout(ctx, c, r.dir); err != nil {
			return err
		}
	} else if err := os.Mkdir(r.dir, 0o755); err != nil {
		return err
	}
	if err := prepareState(r.path(""), rawSpec); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return e.spawn(r)
}

// prepareState makes the .leaselog folder of a new run. One already there
// came with the checkout: a repository's own .leaselog (a link to
// elsewhere, say) would get leaselog's files written where it says, so the
// run does not start.
func prepareState(state string, rawSpec json.RawMessage) error {
	if err := os.Mkdir(state, 0o755); errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("the checkout has a %s of its own: it is leaselog's, in a run directory", stateDir)
	} else if err != nil {
		return err
	}
	// "*" ignores the folder's files and this file itself, so an agent's
	// `git add -A` never commits leaselog's logs.
	if err := os.WriteFile(filepath.Join(state, ".gitignore"), []byte("*\n"), 0o644); err != nil {
		return err
	}
	return supervise.WriteFileAtomic(filepath.Join(state, specFile), rawSpec)
}

// newRun validates a grant and returns the run it names, not yet started.
func (e *Executor) newRun(g api.Grant) (*run, error) {
	if err := checkJobID(g.Job.ID); err != nil {
		return nil, err
	}
	spec, err := parseSpec(g.Job.Spec)
	if err != nil {
		return nil, err
	}
	r := &run{
		e:     e,
		job:   g.Job.ID,
		lease: g.Lease,
		dir:   filepath.Join(e.dir, g.Job.ID+"-"+strconv.FormatUint(g.Lease, 10)),
		spec:  spec,
		done:  make(chan struct{}),
	}
	if t := worker.LeaseTiming(g); t.Toleration > 0 {
		r.firstFence = t.SelfFence() // the lease's own timing, if its job has one
	}
	r.log = e.log.With().Str("job", r.job).Uint64("lease", r.lease).Logger()
	e.hold(r.dir) // released once the run ends (finish), or fails to start
	return r, nil
}

// checkJobID refuses ids outside [A-Za-z0-9._:@-]: the id names a directory,
// so a '/' or a ".." must never get that far.
func checkJobID(id string) error {
	if id == "" {
		return errors.New("job id is empty")
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case c == '.' || c == '_' || c == ':' || c == '@' || c == '-':
		default:
			// Every byte before i is ASCII: i starts a character, or is
			// not UTF-8 (a byte quoted as a character reads as Latin-1).
			if r, n := utf8.DecodeRuneInString(id[i:]); r != utf8.RuneError || n > 1 {
				return fmt.Errorf("job id %q: %q at byte %d is not in [A-Za-z0-9._:@-]", id, r, i)
			}
			return fmt.Errorf("job id %q: byte 0x%02x at %d (not UTF-8) is not in [A-Za-z0-9._:@-]", id, c, i)
		}
	}
	return nil
}

// parseSpec reads the part of a job spec this executor understands; other
// fields are the executor's business and are ignored.
func parseSpec(raw json.RawMessage) (api.Spec, error) {
	var s api.Spec
	if len(raw) == 0 {
		return s, errors.New("bad spec: empty")
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return s, fmt.Errorf("bad spec: %w", err)
	}
	if s.Run == "" {
		return s, errors.New("bad spec: no run command")
	}
	if s.Checkout != nil && s.Checkout.Repo == "" {
		return s, errors.New("bad spec: checkout without a repo")
	}
	return s, nil
}

// readSmall reads the small regular file name of the .leaselog folder of
// the run directory dir (supervise.ReadSmall: no link followed below dir's
// parent, the root of the run directories).
func readSmall(dir, name string, limit int64) ([]byte, error) {
	return supervise.ReadSmall(filepath.Dir(dir), filepath.Base(dir)+"/"+stateDir+"/"+name, limit)
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
