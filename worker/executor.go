package worker

import (
	"context"
	"encoding/json"
	"time"

	"github.com/leaselog/leaselog/api"
)

// Executor runs the jobs of a worker's leases. The worker loop owns the
// leases (heartbeats, directives, self-fencing, reports); the executor owns
// the processes.
type Executor interface {
	// Start begins the job of grant g and returns its run. It returns once the
	// job is under way (checked out and started); an error means it could not
	// start, and the worker reports the lease failed with the error as reason.
	Start(ctx context.Context, g api.Grant) (Run, error)

	// Reattach finds the run of a lease this worker held before it restarted
	// (the daemon still holds it live). found false means nothing of it is
	// left (its worktree is gone): the worker reports the lease lost.
	Reattach(ctx context.Context, g api.Grant) (run Run, found bool, err error)
}

// Run is one job being run. Its methods are safe for concurrent use.
type Run interface {
	// Done is closed when the job has ended, however it ended.
	Done() <-chan struct{}
	// Outcome is what to report once Done is closed.
	Outcome() Outcome
	// Stop asks the job to end: gracefully (the daemon said cancel) or at once
	// (kill, gone, or self-fencing). It returns without waiting; Done says
	// when the job is over. Stopping an ended run does nothing.
	Stop(kill bool)
	// Fence moves the run's fence deadline to at, a reading of the fence
	// clock the worker and its executor share (hostclock): past it, the
	// run's supervisor kills the job's whole process tree on its own,
	// whether or not the worker is alive; the run's Outcome is then lost.
	// The worker calls it once when the job starts and after every
	// acknowledged heartbeat that renewed the lease — for a re-attached run,
	// only from the first such heartbeat on: until then the deadline the
	// worker before it set stands. A deadline earlier than the one set is
	// taken too.
	Fence(at time.Time)
}

// Progresser is a Run whose job tells its progress (worker/local: the file
// at $LEASELOG_PROGRESS). The worker reads it before each heartbeat and
// sends it, as the lease's details, when it changed.
type Progresser interface {
	// Progress is the job's progress now, a compact JSON object, or nil.
	Progress() []byte
}

// Outcome is what a worker reports about a run.
type Outcome struct {
	Outcome string          // succeeded, failed, cancelled, killed, or lost (see Fenced)
	Ref     string          // the ref of the commits brought back, if any
	Reason  string          // why, for anything but success
	Result  json.RawMessage // optional JSON the job left behind
}
