package server

import (
	"bytes"
	"context"
	"net/http"
	"net/url"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/ops"
	"github.com/leaselog/leaselog/projection"
)

// submit answers POST /v1/jobs: 201 and the job when it is new, 200 and the
// job when the same job exists, 409 job_exists when the id is taken by
// another kind or spec (or, named, another max_requeues).
func (s *Server) submit(w http.ResponseWriter, r *http.Request, c *call) error {
	if _, err := params(r); err != nil {
		return err
	}
	var in api.Submit
	if err := decodeBody(r, &in, false); err != nil {
		return err
	}
	c.job = in.ID
	if err := lease.CheckID("job", in.ID); err != nil {
		return err
	}
	if in.Kind == "" {
		return badRequest("missing kind: want run or evaluation")
	}
	kind, err := parseKind(in.Kind)
	if err != nil {
		return err
	}
	spec := in.Spec
	if string(bytes.TrimSpace(spec)) == "null" { // a client's "no spec", as Python's None
		spec = nil
	}
	it := lease.SubmitItem{ID: in.ID, Kind: kind, Spec: spec, MaxRequeues: in.MaxRequeues}
	if err := ops.ScheduleOf(in, &it); err != nil {
		return err
	}
	if it.Timing, err = ops.TimingAsked(in); err != nil {
		return err
	}
	res, err := s.svc.SubmitBatch(r.Context(), []lease.SubmitItem{it})
	if err != nil {
		return err
	}
	if err := res[0].Err; err != nil {
		return err
	}
	j, out := res[0].Job, ops.ViewOf(res[0].JobView)
	status := http.StatusOK
	if res[0].Created {
		status = http.StatusCreated
		w.Header().Set("Location", "/v1/jobs/"+url.PathEscape(j.ID))
	}
	s.writeJSON(w, c, status, out)
	return nil
}

// getJob answers GET /v1/jobs/{id}.
func (s *Server) getJob(w http.ResponseWriter, r *http.Request, c *call) error {
	if _, err := params(r); err != nil {
		return err
	}
	j, err := ops.Job(r.Context(), s.svc, c.job)
	if err != nil {
		return err
	}
	s.writeJSON(w, c, http.StatusOK, j)
	return nil
}

// listJobs answers GET /v1/jobs?state=&kind=&outcome=&labels=&prefix=&order=&limit=&after=:
// a page of the jobs, by id (paging.go), or newest submission first with
// order=newest. An outcome selects the jobs reported with it, which the
// archive holds: a page reads it from the cursor on, as a state that ends
// does. labels=k=v,k2=v2 selects the jobs that require those labels (and
// maybe more); a prefix, the ids that start with it.
func (s *Server) listJobs(w http.ResponseWriter, r *http.Request, c *call) error {
	q, limit, err := pageParams(r, "state", "kind", "outcome", "labels", "prefix", "order")
	if err != nil {
		return err
	}
	var f projection.JobFilter
	if f.Prefix = q["prefix"]; f.Prefix != "" {
		if err := lease.CheckID("prefix", f.Prefix); err != nil {
			return err
		}
	}
	if v := q["state"]; v != "" {
		if f.State, err = fsm.ParseState(v); err != nil {
			return badRequest("state %q: want one of queued, acquired, running, reported, expired, cancelled, failed", v)
		}
	}
	if f.Kind, err = parseKind(q["kind"]); err != nil {
		return err
	}
	if f.Outcome, err = parseReportOutcome(q["outcome"]); err != nil {
		return err
	}
	if f.Labels, err = ops.LabelFilter(q["labels"]); err != nil {
		return err
	}
	var out api.Jobs
	switch q["order"] {
	case "", "id":
		after, err := ops.ParseJobCursor(q["after"])
		if err != nil {
			return err
		}
		out, err = ops.Jobs(r.Context(), s.svc, f, after, limit)
		if err != nil {
			return err
		}
	case "newest":
		// The cursor is the seq of the last job's submission: the next
		// page holds those submitted before it.
		before, err := ops.ParseNumCursor(q["after"])
		if err != nil {
			return err
		}
		out, err = ops.NewestJobs(r.Context(), s.svc, f, before, limit)
		if err != nil {
			return err
		}
	default:
		return badRequest("order %q: want id or newest", q["order"])
	}
	s.writeJSON(w, c, http.StatusOK, out)
	return nil
}

// overview answers GET /v1/overview: the daemon at a glance (ops.Overview).
func (s *Server) overview(w http.ResponseWriter, r *http.Request, c *call) error {
	if _, err := params(r); err != nil {
		return err
	}
	out, err := ops.Overview(r.Context(), s.svc)
	if err != nil {
		return err
	}
	out.Admin = c.who == nil || c.who.admin // nil: the daemon takes no token
	s.writeJSON(w, c, http.StatusOK, out)
	return nil
}

// cancel answers POST /v1/jobs/{id}/cancel.
func (s *Server) cancel(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.revoke(w, r, c, s.svc.Cancel)
}

// kill answers POST /v1/jobs/{id}/kill.
func (s *Server) kill(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.revoke(w, r, c, s.svc.Kill)
}

// revoke runs a cancel or a kill. They take no body; an empty object is
// accepted, anything in it is refused, so that a client who thinks it is
// passing a reason learns that it is not.
func (s *Server) revoke(w http.ResponseWriter, r *http.Request, c *call, do func(context.Context, string) (projection.Job, error)) error {
	if _, err := params(r); err != nil {
		return err
	}
	if err := decodeBody(r, &struct{}{}, true); err != nil {
		return err
	}
	if err := lease.CheckID("job", c.job); err != nil {
		return err
	}
	j, err := do(r.Context(), c.job)
	if err != nil {
		return err
	}
	out, err := ops.JobWithLease(r.Context(), s.svc, j)
	if err != nil {
		return err
	}
	s.writeJSON(w, c, http.StatusOK, out)
	return nil
}

// history answers GET /v1/jobs/{id}/history?limit=&after=: a page of the
// job's events, by seq, from the log's job index.
func (s *Server) history(w http.ResponseWriter, r *http.Request, c *call) error {
	p, limit, err := pageParams(r)
	if err != nil {
		return err
	}
	after, err := ops.ParseNumCursor(p["after"])
	if err != nil {
		return err
	}
	out, err := ops.History(r.Context(), s.svc, c.job, after, limit)
	if err != nil {
		return err
	}
	s.writeJSON(w, c, http.StatusOK, out)
	return nil
}

// parseReportOutcome parses an optional outcome a job is reported with; ""
// is none. lost is no job's outcome: a worker's loss is lease.lost, and the
// job it leaves failed ("worker lost") or queued again.
func parseReportOutcome(v string) (event.Outcome, error) {
	if v == "" {
		return 0, nil
	}
	o, err := event.ParseOutcome(v)
	if err != nil || o == event.OutcomeLost {
		return 0, badRequest("outcome %q: want succeeded, failed, cancelled or killed (a loss is no job's outcome: its job is failed or queued again, see state)", v)
	}
	return o, nil
}

// parseKind parses an optional kind; "" is no kind.
func parseKind(v string) (event.Kind, error) {
	if v == "" {
		return 0, nil
	}
	k, err := event.ParseKind(v)
	if err != nil {
		return 0, badRequest("kind %q: want run or evaluation", v)
	}
	return k, nil
}
