package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/lease"
)

// The worker calls — acquire, heartbeat, start, report — each have one
// core, a workerOp: the body's bytes in, the answer's value out. The HTTP
// handler (serveOp) and a session's frame (session.go) both run it, and both
// encode its answer or its error with encodeJSON and errorJSON: a call
// decides and answers the same, byte for byte, whichever carried it.

// workerOp is the core of one worker call: lease is the {lease} of the path
// (start, report; "" for the others), body the request's body, c.in, which
// the op may give back early with c.releaseBody (acquire does, before its
// wait), and must not read after.
type workerOp func(s *Server, ctx context.Context, c *call, lease string, body []byte) (any, error)

// serveOp is the HTTP handler of a worker call: no query, the body read
// whole, op, and its answer.
func (s *Server) serveOp(w http.ResponseWriter, r *http.Request, c *call, op workerOp) error {
	if _, err := params(r); err != nil {
		return err
	}
	buf := bodyBuffers.Get().(*[]byte)
	b, err := readBody(r, buf)
	if err != nil {
		putBodyBuffer(buf)
		return err
	}
	*buf = b
	c.holdBody(buf)
	defer c.releaseBody()
	v, err := op(s, r.Context(), c, r.PathValue("lease"), c.in)
	if err != nil {
		return err
	}
	s.writeJSON(w, c, http.StatusOK, v)
	return nil
}

// acquire answers POST /v1/workers/{worker}/acquire.
func (s *Server) acquire(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.serveOp(w, r, c, (*Server).acquireOp)
}

// heartbeat answers POST /v1/workers/{worker}/heartbeat.
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.serveOp(w, r, c, (*Server).heartbeatOp)
}

// start answers POST /v1/leases/{lease}/start.
func (s *Server) start(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.serveOp(w, r, c, (*Server).startOp)
}

// report answers POST /v1/leases/{lease}/report.
func (s *Server) report(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.serveOp(w, r, c, (*Server).reportOp)
}

// acquireOp: up to max leases (default 1), waiting up to wait_seconds
// (capped at Options.MaxWait) for a job when none is queued. An empty wait
// is {"leases":[]}, never null. ctx has no deadline of the request's: the
// wait is the call's.
func (s *Server) acquireOp(ctx context.Context, c *call, _ string, body []byte) (any, error) {
	var in api.Acquire
	err := decodeJSON(body, &in, true)
	c.releaseBody() // the wait must not pin the body's bytes
	if err != nil {
		return nil, err
	}
	if err := lease.CheckID("worker", c.worker); err != nil {
		return nil, err
	}
	if in.Max == 0 {
		in.Max = 1
	}
	if in.Max < 0 || in.Max > lease.MaxAcquire {
		return nil, badRequest("max must be 1 to %d, is %d", lease.MaxAcquire, in.Max)
	}
	if in.WaitSeconds < 0 {
		return nil, badRequest("wait_seconds must not be negative, is %v", in.WaitSeconds)
	}
	wait := s.opts.MaxWait
	if in.WaitSeconds < wait.Seconds() {
		wait = time.Duration(in.WaitSeconds * float64(time.Second))
	}

	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	defer context.AfterFunc(s.base, cancel)() // Close ends the wait
	if s.waitHook != nil {
		wctx = s.waitHook(wctx)
	}
	grants, err := s.svc.AcquireWaitWith(wctx, c.worker, lease.AcquireOptions{Max: in.Max, Start: in.Start})
	if err != nil {
		return nil, err
	}
	// How long the daemon held the request, from its headers (or its
	// frame) to the grant: the worker adds it to its send time to base its
	// first fence deadline, so that a grant at the end of a long poll is not
	// past its fence. It includes the grant's commit, a few milliseconds the
	// worker's 2×renew margin absorbs; it never includes the network's time.
	held := max(s.opts.Clock.Now().Sub(c.received), 0).Seconds()
	// The wait's deadline may be spent; what remains is an ordinary read.
	rctx, rcancel := context.WithTimeout(ctx, s.opts.RequestTimeout)
	defer rcancel()
	return s.grants(rctx, c.worker, grants, held)
}

// grants reads back the grants an acquire made for worker, as the table
// holds them now, the daemon having held the request held seconds.
func (s *Server) grants(ctx context.Context, worker string, grants []lease.Grant, held float64) (api.Grants, error) {
	vs, err := s.svc.GrantViews(ctx, grants)
	if err != nil {
		// The leases are taken: the worker finds them with GET .../leases.
		return api.Grants{}, fmt.Errorf("server: read back %d leases granted to %q: %w", len(grants), worker, err)
	}
	return api.Grants{Leases: GrantsOf(grants, vs, held, TimingOf(s.svc.Config()))}, nil
}

// heartbeatOp: a directive per lease, "gone" for any that is not a live
// lease of this worker's.
func (s *Server) heartbeatOp(ctx context.Context, c *call, _ string, body []byte) (any, error) {
	var in api.Heartbeat
	if err := decodeJSON(body, &in, true); err != nil {
		return nil, err
	}
	ds, err := s.svc.Heartbeat(ctx, c.worker, in.Leases)
	if err != nil {
		return nil, err
	}
	return api.HeartbeatReply{Leases: DirectivesOf(ds), Timing: TimingOf(s.svc.Config())}, nil
}

// startOp: the lease, running.
func (s *Server) startOp(ctx context.Context, c *call, leaseSeg string, body []byte) (any, error) {
	id, err := parseLease(c, leaseSeg)
	if err != nil {
		return nil, err
	}
	var in api.Start
	if err := decodeJSON(body, &in, false); err != nil {
		return nil, err
	}
	c.worker = in.Worker
	if err := lease.CheckID("worker", in.Worker); err != nil {
		return nil, err
	}
	if err := s.checkWorker(c, in.Worker); err != nil {
		return nil, err
	}
	l, err := s.svc.Start(ctx, in.Worker, id)
	if err != nil {
		return nil, err
	}
	c.job = l.Job
	return LeaseOf(l), nil
}

// outcomes are the outcomes a report may give. lost is a worker's word that
// it lost the job (it fenced itself, its run directory is gone): the daemon
// records lease.lost and folds it like an expiry, never as an attempt.
const outcomes = "succeeded, failed, cancelled, killed or lost"

// reportOp: the live lease's first report is accepted; a retry of it gets
// the first answer. A report on an expired lease, or a late claim on one
// reported (a report that differs from its first: see lease.Service.Report),
// is a 409 stale_lease that names, in stale_report_seq, the
// lease.stale_report event keeping it; the same stale report gets the same
// body.
func (s *Server) reportOp(ctx context.Context, c *call, leaseSeg string, body []byte) (any, error) {
	id, err := parseLease(c, leaseSeg)
	if err != nil {
		return nil, err
	}
	var in api.Report
	if err := decodeJSON(body, &in, false); err != nil {
		return nil, err
	}
	c.worker = in.Worker
	if err := lease.CheckID("worker", in.Worker); err != nil {
		return nil, err
	}
	if in.Outcome == "" {
		return nil, badRequest("missing outcome: want %s", outcomes)
	}
	outcome, err := event.ParseOutcome(in.Outcome)
	if err != nil {
		return nil, badRequest("outcome %q: want %s", in.Outcome, outcomes)
	}
	if err := s.checkWorker(c, in.Worker); err != nil {
		return nil, err
	}
	result := in.Result
	if string(bytes.TrimSpace(result)) == "null" {
		result = nil
	}
	rep := lease.Report{Outcome: outcome, Ref: in.Ref, Reason: in.Reason, Result: result}
	if in.Next != nil {
		return s.reportNext(ctx, c, id, rep, in.Next)
	}
	a, err := s.svc.Report(ctx, in.Worker, id, rep)
	c.job = a.Job
	if err != nil {
		return nil, reportError(a, err)
	}
	return api.ReportReply{Accepted: true, Job: a.Job, Lease: a.Lease, Seq: a.Seq}, nil
}

// reportError is the API error of a refused report: a stale one names the
// record that keeps it.
func reportError(a lease.Answer, err error) error {
	if a.Stale && errors.Is(err, lease.ErrStaleLease) {
		return &api.Error{Status: http.StatusConflict, Code: api.CodeStaleLease, Message: err.Error(), StaleReportSeq: a.Seq}
	}
	return err
}

// parseLease parses the {lease} of a path (or of a session's frame): a
// fencing token, a positive integer.
func parseLease(c *call, v string) (uint64, error) {
	id, err := strconv.ParseUint(v, 10, 64)
	if err != nil || id == 0 {
		return 0, badRequest("lease id %q: want a positive integer", v)
	}
	c.lease = id
	return id, nil
}
