package ops

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/lease"
)

// The worker calls: acquire, heartbeat, start, report. Each checks its input
// here, once, whichever transport carried it. A transport that authorises
// a call by the worker it names (start and report name theirs in the body)
// passes authorize, asked once that worker is known to be a valid id, so
// that a malformed call is refused as such (400) before it is refused for
// its worker (403); nil authorises every worker.

// Hold is the transport's part of an acquire's long poll: how long it may
// wait, what may end the wait sooner, and the clock that tells how long
// the call was held.
type Hold struct {
	// MaxWait caps the wait the call asks for; 0: no cap.
	MaxWait time.Duration
	// Wait, if set, wraps the context of the wait for a job: to end it
	// sooner (the server closing) or to see it (tests). It is called for
	// every acquire whose input is valid, once its try at once is over,
	// whether it then waits or not: a job queued after it is waited for.
	// stop is called when the call ends.
	Wait func(ctx context.Context) (wctx context.Context, stop func())
	// Clock and Received say how long the call was held: Received is when
	// it was received (an HTTP request's headers read, a frame read), on
	// Clock. A nil Clock is CLOCK_BOOTTIME (lease.BoottimeClock), the call
	// received when Acquire is called.
	Clock    lease.Clock
	Received time.Time
	// ReadTimeout bounds the read back of the grants, after the wait (whose
	// deadline may be spent); 0: the call's context alone.
	ReadTimeout time.Duration
}

// Acquire gives worker up to in.Max leases (0 is 1), waiting up to
// in.WaitSeconds (capped at h.MaxWait) for a job when none is queued. An
// empty answer is {"leases":[]}, never null. A grant made at once held the
// call no time at all; one made after a wait, from h.Received to the grant
// on h.Clock (api.Grant.HeldSeconds): the worker adds it to its send time
// to base its first fence deadline, so that a grant at the end of a long
// poll is not past its fence. That includes the grant's commit, a few
// milliseconds the worker's 2×renew margin absorbs, and never the network's
// time; a grant at once so never names a time a simulated clock did not
// pass.
func Acquire(ctx context.Context, svc *lease.Service, worker string, in api.Acquire, h Hold) (api.Grants, error) {
	if err := lease.CheckID("worker", worker); err != nil {
		return api.Grants{}, err
	}
	if in.Max == 0 {
		in.Max = 1
	}
	if in.Max < 0 || in.Max > lease.MaxAcquire {
		return api.Grants{}, badRequest("max must be 1 to %d, is %d", lease.MaxAcquire, in.Max)
	}
	if in.WaitSeconds < 0 {
		return api.Grants{}, badRequest("wait_seconds must not be negative, is %v", in.WaitSeconds)
	}
	wait := h.MaxWait
	if wait <= 0 {
		wait = math.MaxInt64
	}
	if in.WaitSeconds < wait.Seconds() { // compared as seconds: a huge wait would overflow a Duration
		wait = time.Duration(in.WaitSeconds * float64(time.Second))
	}
	if h.Clock == nil {
		h.Clock = lease.BoottimeClock()
		h.Received = h.Clock.Now()
	}
	o := lease.AcquireOptions{Max: in.Max, Start: in.Start}
	if err := offerOf("", in.Offer, &o); err != nil {
		return api.Grants{}, err
	}
	grants, err := svc.AcquireWith(ctx, worker, o)
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	if h.Wait != nil {
		var stop func()
		wctx, stop = h.Wait(wctx)
		defer stop()
	}
	var held time.Duration
	if err == nil && len(grants) == 0 && wait > 0 {
		grants, err = svc.AcquireWaitWith(wctx, worker, o)
		held = max(h.Clock.Now().Sub(h.Received), 0)
	}
	if err != nil {
		return api.Grants{}, err
	}
	if h.ReadTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.ReadTimeout)
		defer cancel()
	}
	return grantsOf(ctx, svc, worker, grants, held)
}

// grantsOf reads back the grants an acquire made for worker, as the table
// holds them now, the call having been held held.
func grantsOf(ctx context.Context, svc *lease.Service, worker string, grants []lease.Grant, held time.Duration) (api.Grants, error) {
	vs, err := svc.GrantViews(ctx, grants)
	if err != nil {
		// The leases are taken: the worker finds them with GET .../leases.
		return api.Grants{}, fmt.Errorf("ops: read back %d leases granted to %q: %w", len(grants), worker, err)
	}
	return api.Grants{Leases: GrantsOf(grants, vs, held.Seconds(), TimingOf(svc.Config()))}, nil
}

// Heartbeat renews worker's leases: a directive per lease, "gone" for any
// that is not a live lease of this worker's, and the daemon's timing.
func Heartbeat(ctx context.Context, svc *lease.Service, worker string, in api.Heartbeat) (api.HeartbeatReply, error) {
	ds, err := svc.HeartbeatDetails(ctx, worker, in.Leases, HeartbeatDetails(in))
	if err != nil {
		return api.HeartbeatReply{}, err
	}
	return api.HeartbeatReply{Leases: DirectivesOf(ds), Timing: TimingOf(svc.Config())}, nil
}

// Start records lease id's job running, for in.Worker, and returns the
// lease.
func Start(ctx context.Context, svc *lease.Service, id uint64, in api.Start, authorize func(worker string) error) (api.Lease, error) {
	if err := lease.CheckID("worker", in.Worker); err != nil {
		return api.Lease{}, err
	}
	if authorize != nil {
		if err := authorize(in.Worker); err != nil {
			return api.Lease{}, err
		}
	}
	l, err := svc.Start(ctx, in.Worker, id)
	if err != nil {
		return api.Lease{}, err
	}
	return LeaseOf(l), nil
}

// outcomes are the outcomes a report may give. lost is a worker's word that
// it lost the job (it fenced itself, its run directory is gone): the daemon
// records lease.lost and folds it like an expiry, never as an attempt.
const outcomes = "succeeded, failed, cancelled, killed or lost"

// Report records in.Worker's report on lease id. The live lease's first
// report is accepted; a retry of it gets the first answer. A report on an
// expired lease, or a late claim on one reported (a report that differs
// from its first: see lease.Service.Report), is a 409 stale_lease that
// names, in StaleReportSeq, the lease.stale_report event keeping it; the
// same stale report gets the same answer. A result of JSON null is none.
//
// With in.Next, the report carries the next acquire: once this call
// accepts the report, up to in.Next.Max leases (0 is 1) for the report's
// worker in the same command, without waiting, their grants in the reply's
// Next; a reply that repeats an earlier call's answer has none.
//
// A refusal's reply is empty but for the lease's job, when the service
// named it (a stale report), for the caller's log.
func Report(ctx context.Context, svc *lease.Service, id uint64, in api.Report, authorize func(worker string) error) (api.ReportReply, error) {
	if err := lease.CheckID("worker", in.Worker); err != nil {
		return api.ReportReply{}, err
	}
	if in.Outcome == "" {
		return api.ReportReply{}, badRequest("missing outcome: want %s", outcomes)
	}
	outcome, err := event.ParseOutcome(in.Outcome)
	if err != nil {
		return api.ReportReply{}, badRequest("outcome %q: want %s", in.Outcome, outcomes)
	}
	if authorize != nil {
		if err := authorize(in.Worker); err != nil {
			return api.ReportReply{}, err
		}
	}
	result := in.Result
	if string(bytes.TrimSpace(result)) == "null" { // a client's "no result", as Python's None
		result = nil
	}
	rep := lease.Report{Outcome: outcome, Ref: in.Ref, Reason: in.Reason, Result: result}
	if in.Next == nil {
		a, err := svc.Report(ctx, in.Worker, id, rep)
		if err != nil {
			return api.ReportReply{Job: a.Job}, reportError(a, err)
		}
		return api.ReportReply{Accepted: true, Job: a.Job, Lease: a.Lease, Seq: a.Seq}, nil
	}
	next := *in.Next
	if next.Max == 0 {
		next.Max = 1
	}
	if next.Max < 0 || next.Max > lease.MaxAcquire {
		return api.ReportReply{}, badRequest("next: max must be 1 to %d, is %d", lease.MaxAcquire, next.Max)
	}
	o := lease.AcquireOptions{Max: next.Max, Start: next.Start}
	if err := offerOf("next: ", next.Offer, &o); err != nil {
		return api.ReportReply{}, err
	}
	a, grants, err := svc.ReportNext(ctx, in.Worker, id, rep, o)
	if err != nil {
		return api.ReportReply{Job: a.Job}, reportError(a, err)
	}
	out := api.ReportReply{Accepted: true, Job: a.Job, Lease: a.Lease, Seq: a.Seq}
	if grants != nil {
		g, err := grantsOf(ctx, svc, in.Worker, grants, 0)
		if err != nil {
			return api.ReportReply{Job: a.Job}, err
		}
		out.Next = &g
	}
	return out, nil
}

// reportError is the error of a refused report: a stale one names the
// record that keeps it.
func reportError(a lease.Answer, err error) error {
	if a.Stale && errors.Is(err, lease.ErrStaleLease) {
		return &api.Error{Status: http.StatusConflict, Code: api.CodeStaleLease, Message: err.Error(), StaleReportSeq: a.Seq}
	}
	return err
}
