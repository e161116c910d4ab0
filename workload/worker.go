package workload

// A worker's side of the lifecycle, in each protocol: the classic
// calls (acquire, start, heartbeats, report), or with the calls that save
// round trips (an acquire whose grant comes back running, a report that
// carries the next acquire).

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/leaselog/leaselog/api"
)

// Protocol is which calls the workload makes; the zero value is the
// classic one, 4 + H calls a job.
type Protocol struct {
	Start bool // acquire with start: the grant comes back running (no start call)
	Next  bool // the report carries the next acquire
	Batch int  // submit in batches of this many jobs (0: one call a job)
	// Session: the workers' calls go over a worker session ([api.Session]),
	// one connection they share, not HTTP calls. The caller makes the
	// Worker client so; the workload only names it.
	Session bool
}

// The protocol's parts, as --protocol names them.
var parts = []string{"start", "next", "batch"}

// ParseProtocol reads --protocol: session (every part, over worker
// sessions), http or combined (every part, over HTTP), classic, or a
// comma-separated list of parts, with session among them if the workers'
// calls are to go over sessions. batch is the jobs a submit call with the
// batch part.
func ParseProtocol(s string, batch int) (Protocol, error) {
	var p Protocol
	switch s {
	case "classic":
		return p, nil
	case "http", "combined":
		s = strings.Join(parts, ",")
	case "session":
		s = strings.Join(parts, ",") + ",session"
	}
	for _, part := range strings.Split(s, ",") {
		switch part {
		case "start":
			p.Start = true
		case "next":
			p.Next = true
		case "batch":
			p.Batch = batch
		case "session":
			p.Session = true
		default:
			return p, fmt.Errorf("--protocol %q: want session, http, combined, classic, or a comma-separated list of %s, session", s, strings.Join(parts, ", "))
		}
	}
	return p, nil
}

// String is the protocol as ParseProtocol reads it, shortest first.
func (p Protocol) String() string {
	var on []string
	if p.Start {
		on = append(on, "start")
	}
	if p.Next {
		on = append(on, "next")
	}
	if p.Batch > 0 {
		on = append(on, "batch")
	}
	switch {
	case len(on) == len(parts) && p.Session:
		return "session"
	case len(on) == len(parts):
		return "http"
	case p.Session:
		on = append(on, "session")
	case len(on) == 0:
		return "classic"
	}
	return strings.Join(on, ",")
}

// workerLoop takes jobs until the run has none left for it: each job's
// slot is taken before its acquire (or before the report that carries it).
func (b *bench) workerLoop(ctx context.Context, worker string, slots *atomic.Int64, result json.RawMessage, s *[4][]time.Duration, done func()) error {
	var g api.Grant // a grant the last report carried, if g.Lease != 0
	for {
		if g.Lease == 0 && slots.Add(-1) < 0 {
			return nil
		}
		next, err := b.lifecycle(ctx, worker, g, slots, result, s)
		if err != nil {
			b.release(ctx, worker, next, err)
			return err
		}
		g = next
		done()
	}
}

// lifecycle takes one job through acquire and start (unless carried is a
// grant for it already), heartbeats and report, and returns the grant its
// report carried, if any. A lease of the run's whose lifecycle stops short
// is reported failed, so that its job ends.
func (b *bench) lifecycle(ctx context.Context, worker string, carried api.Grant, slots *atomic.Int64, result json.RawMessage, s *[4][]time.Duration) (api.Grant, error) {
	g, err := carried, error(nil)
	if g.Lease == 0 {
		g, err = b.acquire(ctx, worker, s)
	} else if !b.Protocol.Start {
		err = b.start(ctx, worker, g, time.Now(), s)
	}
	var next api.Grant
	if err == nil {
		next, err = b.heartbeatAndReport(ctx, worker, g, slots, result, s)
	}
	if err != nil {
		b.release(ctx, worker, g, err)
	}
	return next, err
}

// release reports failed a lease of the run that a stopped run holds, so
// that its job ends (a lease of a job the run did not submit is left to
// expire: its job goes back to the queue).
func (b *bench) release(ctx context.Context, worker string, g api.Grant, why error) {
	if g.Lease != 0 && b.jobIndex(g.Job.ID) >= 0 {
		_, _ = b.Worker.Report(ctx, g.Lease, api.Report{Worker: worker, Outcome: "failed", Reason: "leaselog bench stopped: " + why.Error()})
	}
}

// acquire long-polls until it is granted a lease, and starts it (or has it
// started by the acquire).
func (b *bench) acquire(ctx context.Context, worker string, s *[4][]time.Duration) (api.Grant, error) {
	st := time.Now()
	var g api.Grant
	for {
		if err := b.stop.Err(); err != nil {
			return g, err
		}
		b.calls.Add(1)
		call := b.Worker.Acquire
		if b.Protocol.Start {
			call = b.Worker.AcquireStart
		}
		gs, err := call(ctx, worker, 1, acquireWait)
		if err != nil {
			return g, fmt.Errorf("worker %s: acquire: %w", worker, workerCallHint(err))
		}
		if len(gs) > 1 {
			return g, fmt.Errorf("worker %s: acquire of at most 1 granted %d leases", worker, len(gs))
		}
		if len(gs) == 1 {
			g = gs[0]
			break
		}
	}
	if err := b.ours(worker, g); err != nil {
		return g, err
	}
	if b.Protocol.Start {
		s[opAcquire] = append(s[opAcquire], time.Since(st))
		return g, b.running(worker, g)
	}
	return g, b.start(ctx, worker, g, st, s)
}

// start starts the lease; the acquire's time counts from st.
func (b *bench) start(ctx context.Context, worker string, g api.Grant, st time.Time, s *[4][]time.Duration) error {
	if err := b.stop.Err(); err != nil {
		return err
	}
	b.calls.Add(1)
	l, err := b.Worker.Start(ctx, worker, g.Lease)
	if err != nil {
		return fmt.Errorf("worker %s: start lease %d: %w", worker, g.Lease, err)
	}
	if l.Lease != g.Lease || l.State != "running" {
		return fmt.Errorf("worker %s: start lease %d: answered lease %d in state %q", worker, g.Lease, l.Lease, l.State)
	}
	s[opAcquire] = append(s[opAcquire], time.Since(st))
	return nil
}

// ours refuses a grant of a job this run did not submit.
func (b *bench) ours(worker string, g api.Grant) error {
	if b.jobIndex(g.Job.ID) < 0 {
		return fmt.Errorf("worker %s: acquired job %s (lease %d), which this bench did not submit: run the bench on a daemon with no other queued jobs", worker, g.Job.ID, g.Lease)
	}
	return nil
}

// running checks that a grant made with start came back running.
func (b *bench) running(worker string, g api.Grant) error {
	if g.Job.State != "running" || g.Job.Lease == nil || g.Job.Lease.Lease != g.Lease || g.Job.Lease.State != "running" {
		return fmt.Errorf("worker %s: acquire with start granted lease %d of job %s in state %q, want running", worker, g.Lease, g.Job.ID, g.Job.State)
	}
	return nil
}

// heartbeatAndReport heartbeats the lease H times and reports it succeeded;
// with the next part, the report carries the acquire of the worker's next
// job if the run has one left, and the grant it made is returned.
func (b *bench) heartbeatAndReport(ctx context.Context, worker string, g api.Grant, slots *atomic.Int64, result json.RawMessage, s *[4][]time.Duration) (api.Grant, error) {
	ids := []uint64{g.Lease}
	for range b.Heartbeats {
		if err := b.stop.Err(); err != nil {
			return api.Grant{}, err
		}
		st := time.Now()
		b.calls.Add(1)
		r, err := b.Worker.Heartbeat(ctx, worker, ids)
		if err != nil {
			return api.Grant{}, fmt.Errorf("worker %s: heartbeat lease %d: %w", worker, g.Lease, err)
		}
		s[opHeartbeat] = append(s[opHeartbeat], time.Since(st))
		if len(r.Leases) != 1 || r.Leases[0].Lease != g.Lease || r.Leases[0].Directive != api.DirectiveContinue {
			b.lost.Add(1)
		}
	}
	if err := b.stop.Err(); err != nil {
		return api.Grant{}, err
	}
	rep := api.Report{Worker: worker, Outcome: "succeeded", Result: result}
	carry := b.Protocol.Next && slots.Add(-1) >= 0 // the next job's slot, taken
	st := time.Now()
	b.calls.Add(1)
	var rr api.ReportReply
	var err error
	if carry {
		rr, err = b.Worker.ReportNext(ctx, g.Lease, rep, api.Next{Max: 1, Start: b.Protocol.Start})
	} else {
		rr, err = b.Worker.Report(ctx, g.Lease, rep)
	}
	var next api.Grant
	if err == nil && carry && rr.Next != nil && len(rr.Next.Leases) > 0 {
		if len(rr.Next.Leases) > 1 {
			err = fmt.Errorf("worker %s: report lease %d: its next acquire of at most 1 granted %d leases", worker, g.Lease, len(rr.Next.Leases))
		} else {
			next = rr.Next.Leases[0]
		}
	}
	if carry && next.Lease == 0 {
		slots.Add(1) // no job came with the answer: the slot goes back
	}
	if api.IsCode(err, api.CodeStaleLease) {
		b.rejected.Add(1)
		return api.Grant{}, nil
	}
	if err != nil {
		return api.Grant{}, fmt.Errorf("worker %s: report lease %d: %w", worker, g.Lease, err)
	}
	s[opReport] = append(s[opReport], time.Since(st))
	if rr.Accepted && rr.Lease == g.Lease && rr.Job == g.Job.ID {
		if i := b.jobIndex(rr.Job); i >= 0 {
			b.accepted[i].Add(1)
		}
	}
	if next.Lease != 0 {
		if err := b.ours(worker, next); err != nil {
			return next, err
		}
		if b.Protocol.Start {
			if err := b.running(worker, next); err != nil {
				return next, err
			}
		}
	}
	return next, nil
}

// workerCallHint adds to a 403 on a worker call what the bench needs.
func workerCallHint(err error) error {
	if api.IsCode(err, api.CodeForbidden) || api.IsCode(err, api.CodeUnauthorized) {
		return fmt.Errorf("%w (the workers' calls need an open daemon or a worker's token: an admin token cannot act as a worker; see --worker-id and --worker-token-file)", err)
	}
	return err
}
