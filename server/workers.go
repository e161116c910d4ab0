package server

import (
	"net/http"

	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/ops"
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
	after, err := ops.ParseNumCursor(p["after"])
	if err != nil {
		return err
	}
	out, err := ops.WorkerLeases(r.Context(), s.svc, c.worker, after, limit)
	if err != nil {
		return err
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
	after, err := ops.ParseNumCursor(q["after"])
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
	out, err := ops.Leases(r.Context(), s.svc, f, after, limit)
	if err != nil {
		return err
	}
	s.writeJSON(w, c, http.StatusOK, out)
	return nil
}

// leaseState reports whether a lease (not only a job) can be in st.
func leaseState(st fsm.State) bool {
	return st == fsm.Acquired || st == fsm.Running || st == fsm.Reported || st == fsm.Expired
}
