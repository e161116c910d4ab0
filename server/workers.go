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
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/projection"
)

// acquire answers POST /v1/workers/{worker}/acquire: up to max leases
// (default 1), waiting up to wait_seconds (capped at Options.MaxWait) for a
// job when none is queued. An empty wait is {"leases":[]}, never null.
func (s *Server) acquire(w http.ResponseWriter, r *http.Request, c *call) error {
	if _, err := params(r); err != nil {
		return err
	}
	var in api.Acquire
	if err := decodeBody(r, &in, true); err != nil {
		return err
	}
	if err := lease.CheckID("worker", c.worker); err != nil {
		return err
	}
	if in.Max == 0 {
		in.Max = 1
	}
	if in.Max < 0 || in.Max > lease.MaxAcquire {
		return badRequest("max must be 1 to %d, is %d", lease.MaxAcquire, in.Max)
	}
	if in.WaitSeconds < 0 {
		return badRequest("wait_seconds must not be negative, is %v", in.WaitSeconds)
	}
	wait := s.opts.MaxWait
	if in.WaitSeconds < wait.Seconds() {
		wait = time.Duration(in.WaitSeconds * float64(time.Second))
	}

	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	defer context.AfterFunc(s.base, cancel)() // Close ends the wait
	if s.waitHook != nil {
		ctx = s.waitHook(ctx)
	}
	grants, err := s.svc.AcquireWaitWith(ctx, c.worker, lease.AcquireOptions{Max: in.Max, Start: in.Start})
	if err != nil {
		return err
	}
	// How long the daemon held the request, from its headers to the grant:
	// the worker adds it to its send time to base its first fence deadline,
	// so that a grant at the end of a long poll is not past its fence. It
	// includes the grant's commit, a few milliseconds the worker's 2×renew
	// margin absorbs; it never includes the network's time.
	held := max(s.opts.Clock.Now().Sub(c.received), 0).Seconds()
	// The wait's deadline may be spent; what remains is an ordinary read.
	rctx, rcancel := context.WithTimeout(r.Context(), s.opts.RequestTimeout)
	defer rcancel()
	out, err := s.grants(rctx, c.worker, grants, held)
	if err != nil {
		return err
	}
	s.writeJSON(w, c, http.StatusOK, out)
	return nil
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

// heartbeat answers POST /v1/workers/{worker}/heartbeat: a directive per
// lease, "gone" for any that is not a live lease of this worker's.
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request, c *call) error {
	if _, err := params(r); err != nil {
		return err
	}
	var in api.Heartbeat
	if err := decodeBody(r, &in, true); err != nil {
		return err
	}
	ds, err := s.svc.Heartbeat(r.Context(), c.worker, in.Leases)
	if err != nil {
		return err
	}
	s.writeJSON(w, c, http.StatusOK, api.HeartbeatReply{Leases: DirectivesOf(ds), Timing: TimingOf(s.svc.Config())})
	return nil
}

// workerLeases answers GET /v1/workers/{worker}/leases?limit=&after=: a page
// of the live leases the daemon holds for the worker, by token, with their
// jobs, to re-attach after a restart.
func (s *Server) workerLeases(w http.ResponseWriter, r *http.Request, c *call) error {
	p, err := params(r, "limit", "after")
	if err != nil {
		return err
	}
	limit, err := pageLimit(p)
	if err != nil {
		return err
	}
	after, err := parseNumCursor(p)
	if err != nil {
		return err
	}
	if err := lease.CheckID("worker", c.worker); err != nil {
		return err
	}
	vs, more, err := s.svc.WorkerPage(r.Context(), c.worker, after, limit)
	if err != nil {
		return err
	}
	out := api.Grants{Leases: make([]api.Grant, 0, len(vs))}
	timing := TimingOf(s.svc.Config())
	for _, v := range vs {
		out.Leases = append(out.Leases, api.Grant{Lease: v.Live.ID, Job: JobOf(v.Job, v.Live), Timing: timing})
	}
	if more {
		out.Next = numCursor(vs[len(vs)-1].Live.ID)
	}
	s.writeJSON(w, c, http.StatusOK, out)
	return nil
}

// start answers POST /v1/leases/{lease}/start: the lease, running.
func (s *Server) start(w http.ResponseWriter, r *http.Request, c *call) error {
	id, err := s.leaseID(r, c)
	if err != nil {
		return err
	}
	var in api.Start
	if err := decodeBody(r, &in, false); err != nil {
		return err
	}
	c.worker = in.Worker
	if err := lease.CheckID("worker", in.Worker); err != nil {
		return err
	}
	if err := s.checkWorker(c, in.Worker); err != nil {
		return err
	}
	l, err := s.svc.Start(r.Context(), in.Worker, id)
	if err != nil {
		return err
	}
	c.job = l.Job
	s.writeJSON(w, c, http.StatusOK, LeaseOf(l))
	return nil
}

// outcomes are the outcomes a report may give. lost is a worker's word that
// it lost the job (it fenced itself, its run directory is gone): the daemon
// records lease.lost and folds it like an expiry, never as an attempt.
const outcomes = "succeeded, failed, cancelled, killed or lost"

// report answers POST /v1/leases/{lease}/report. The live lease's first
// report is accepted; the same lease reported again gets the first answer. A
// report on an expired lease is a 409 stale_lease that names, in
// stale_report_seq, the lease.stale_report event keeping it; the same stale
// report gets the same body.
func (s *Server) report(w http.ResponseWriter, r *http.Request, c *call) error {
	id, err := s.leaseID(r, c)
	if err != nil {
		return err
	}
	var in api.Report
	if err := decodeBody(r, &in, false); err != nil {
		return err
	}
	c.worker = in.Worker
	if err := lease.CheckID("worker", in.Worker); err != nil {
		return err
	}
	if in.Outcome == "" {
		return badRequest("missing outcome: want %s", outcomes)
	}
	outcome, err := event.ParseOutcome(in.Outcome)
	if err != nil {
		return badRequest("outcome %q: want %s", in.Outcome, outcomes)
	}
	if err := s.checkWorker(c, in.Worker); err != nil {
		return err
	}
	result := in.Result
	if string(bytes.TrimSpace(result)) == "null" {
		result = nil
	}
	rep := lease.Report{Outcome: outcome, Ref: in.Ref, Reason: in.Reason, Result: result}
	if in.Next != nil {
		return s.reportNext(w, r, c, id, rep, in.Next)
	}
	a, err := s.svc.Report(r.Context(), in.Worker, id, rep)
	c.job = a.Job
	if err != nil {
		return reportError(a, err)
	}
	s.writeJSON(w, c, http.StatusOK, api.ReportReply{Accepted: true, Job: a.Job, Lease: a.Lease, Seq: a.Seq})
	return nil
}

// reportError is the API error of a refused report: a stale one names the
// record that keeps it.
func reportError(a lease.Answer, err error) error {
	if a.Stale && errors.Is(err, lease.ErrStaleLease) {
		return &api.Error{Status: http.StatusConflict, Code: api.CodeStaleLease, Message: err.Error(), StaleReportSeq: a.Seq}
	}
	return err
}

// leaseID parses the {lease} path segment: a fencing token, a positive
// integer.
func (s *Server) leaseID(r *http.Request, c *call) (uint64, error) {
	if _, err := params(r); err != nil {
		return 0, err
	}
	v := r.PathValue("lease")
	id, err := strconv.ParseUint(v, 10, 64)
	if err != nil || id == 0 {
		return 0, badRequest("lease id %q: want a positive integer", v)
	}
	c.lease = id
	return id, nil
}

// listLeases answers GET /v1/leases?state=&worker=&kind=&limit=&after=: a
// page of the live leases, or of those in the given state, by token.
func (s *Server) listLeases(w http.ResponseWriter, r *http.Request, c *call) error {
	q, err := params(r, "state", "worker", "kind", "limit", "after")
	if err != nil {
		return err
	}
	limit, err := pageLimit(q)
	if err != nil {
		return err
	}
	after, err := parseNumCursor(q)
	if err != nil {
		return err
	}
	var f projection.LeaseFilter
	if v := q["state"]; v != "" {
		st, err := fsm.ParseState(v)
		if err != nil || !leaseState(st) {
			return badRequest("state %q: a lease is acquired, running, reported or expired", v)
		}
		f.State = st
	}
	if f.Worker = q["worker"]; f.Worker != "" {
		if err := lease.CheckID("worker", f.Worker); err != nil {
			return err
		}
	}
	if f.Kind, err = parseKind(q["kind"]); err != nil {
		return err
	}
	ls, more, err := s.svc.LeasePage(r.Context(), f, after, limit)
	if err != nil {
		return err
	}
	out := api.Leases{Leases: make([]api.Lease, 0, len(ls))}
	for _, l := range ls {
		out.Leases = append(out.Leases, LeaseOf(l))
	}
	if more {
		out.Next = numCursor(ls[len(ls)-1].ID)
	}
	s.writeJSON(w, c, http.StatusOK, out)
	return nil
}

// leaseState reports whether a lease (not only a job) can be in st.
func leaseState(st fsm.State) bool {
	return st == fsm.Acquired || st == fsm.Running || st == fsm.Reported || st == fsm.Expired
}
