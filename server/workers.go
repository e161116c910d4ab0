package server

import (
	"net/http"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/projection"
)

// workerLeases answers GET /v1/workers/{worker}/leases?limit=&after=: a page
// of the live leases the daemon holds for the worker, by token, with their
// jobs, to re-attach after a restart.
func (s *Server) workerLeases(w http.ResponseWriter, r *http.Request, c *call) error {
	p, limit, err := pageParams(r)
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

// listLeases answers GET /v1/leases?state=&worker=&kind=&limit=&after=: a
// page of the live leases, or of those in the given state, by token.
func (s *Server) listLeases(w http.ResponseWriter, r *http.Request, c *call) error {
	q, limit, err := pageParams(r, "state", "worker", "kind")
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
