package server

import (
	"net/http"

	"github.com/leaselog/leaselog/api"
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
	after, err := parseJobCursor(p)
	if err != nil {
		return err
	}
	ws, err := s.svc.Workers(r.Context())
	if err != nil {
		return err
	}
	out := api.Workers{Workers: []api.Worker{}, Timing: TimingOf(s.svc.Config())}
	for _, wk := range ws { // by id
		if wk.ID <= after {
			continue
		}
		if len(out.Workers) == limit {
			out.Next = jobCursor(out.Workers[limit-1].ID)
			break
		}
		out.Workers = append(out.Workers, api.Worker{ID: wk.ID, Reachable: !wk.Unreachable, Seen: unixTime(wk.Seen), LiveLeases: wk.Live})
	}
	s.writeJSON(w, c, http.StatusOK, out)
	return nil
}
