// Package demo is the guided tour of `leaselog demo` ([Run]): a daemon on a
// folder of its own, and the rows of the Leases page (docs/design.md) played
// on it through the API — an expiry, a requeue with a new fencing token, a
// revoke, a late report, a repeated report, a restart under a running agent,
// the audit trail.
//
// The demo plays workers w1 and w2 itself, call by call, so that what it
// prints is the same from one run to the next: each step's new events, and
// the API's answers as the JSON documents the daemon sent. The agent of the
// restart is real: the daemon's own worker runs it, and re-attaches to it.
// The caller starts and stops the daemon ([Options.Start]): the command
// starts the real one.
package demo

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/timing"
)

// Daemon is a daemon the demo started.
type Daemon interface {
	URL() string
	// Token is the admin token its clients send; "" if its API is open.
	Token() string
	// Stop is the graceful stop: jobs in flight keep running.
	Stop() error
}

// Config is what the demo asks of a daemon it starts.
type Config struct {
	Data          string        // the store's directory
	Timing        timing.Config // the lease timing
	LocalCapacity int           // the jobs its own worker, "local", runs at once; 0: none
	Log           io.Writer     // where it logs
}

// Options are a run of the demo.
type Options struct {
	Out   io.Writer // what the demo says
	Dir   string    // its folder: the daemon's data and log go there
	Keep  bool      // the folder is kept: say how to replay its log
	Start func(ctx context.Context, c Config) (Daemon, error)
}

// Fast is the timing of the demo's first daemon: an expiry in three
// seconds. Its grace is two seconds, not one, so that a loaded machine's
// stall between two calls of a worker (an fsync can take a second) does not
// make the worker unreachable, nor the daemon absent, where the demo says
// nothing of it.
var Fast = timing.Config{Renew: 200 * time.Millisecond, Grace: 2 * time.Second, Toleration: 3 * time.Second}

// demo is one run.
type demo struct {
	Options
	log   *os.File
	d     Daemon
	c     *api.Client
	shown uint64 // the last seq printed
}

// Run runs the demo. It stops the daemon it started before it returns.
func Run(ctx context.Context, o Options) error {
	log, err := os.Create(filepath.Join(o.Dir, "daemon.log"))
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer log.Close()
	x := &demo{Options: o, log: log}
	defer func() {
		if x.d != nil {
			_ = x.d.Stop()
		}
	}()
	x.say("leaselog demo — a daemon in %s, on fast timings: renew %s, grace %s, toleration %s.", o.Dir, secs(Fast.Renew), secs(Fast.Grace), secs(Fast.Toleration))
	x.say("Its log goes to %s. The demo plays workers w1 and w2 itself, through the API.\n", log.Name())
	if err := x.start(ctx, Fast, 0); err != nil {
		return err
	}
	first, err := x.expiry(ctx)
	if err != nil {
		return err
	}
	second, err := x.requeue(ctx, first)
	if err != nil {
		return err
	}
	if err := x.lateReport(ctx, first); err != nil {
		return err
	}
	if err := x.sameReport(ctx, second); err != nil {
		return err
	}
	if err := x.restart(ctx); err != nil {
		return err
	}
	if err := x.audit(ctx); err != nil {
		return err
	}
	if o.Keep {
		x.say("\nThe data is kept: leaselog replay --data %s --verify", filepath.Join(o.Dir, "data"))
	}
	return nil
}
