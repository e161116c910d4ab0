package server

import (
	"net/http"

	"github.com/leaselog/leaselog/ops"
)

// listWorkers answers GET /v1/workers?limit=&after=: the workers the table
// knows, by id, a page at a time, with the daemon's timing, by which a
// reader tells how long a worker, or a lease, has before grace and
// toleration (the dashboard's workers and leases pages).
func (s *Server) listWorkers(w http.ResponseWriter, r *http.Request, c *call) error {
	p, limit, err := pageParams(r)
	if err != nil {
		return err
	}
	// The cursor is the last id of a page, encoded as the jobs' are (a
	// worker id is a valid job id).
	after, err := ops.ParseJobCursor(p["after"])
	if err != nil {
		return err
	}
	out, err := ops.Workers(r.Context(), s.svc, after, limit)
	if err != nil {
		return err
	}
	s.writeJSON(w, c, http.StatusOK, out)
	return nil
}
