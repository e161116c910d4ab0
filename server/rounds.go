package server

import (
	"bytes"
	"net/http"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/ops"
)

// The calls that save round trips (lease/rounds.go) that are not worker
// calls: a submit of many jobs. The acquire that starts its jobs and the
// report that carries the next acquire are ops.Acquire's and ops.Report's.

// submitBatch answers POST /v1/jobs/batch: 200 and, in the place of each
// item, what POST /v1/jobs would have answered it — its status with the job,
// or with the error that refused it. A refused item records nothing; the
// others are kept. The batch itself is refused (400, recording nothing) when
// it holds no job or more than lease.MaxSubmitBatch.
func (s *Server) submitBatch(w http.ResponseWriter, r *http.Request, c *call) error {
	if _, err := params(r); err != nil {
		return err
	}
	var in api.SubmitBatch
	if err := decodeBody(r, &in, false); err != nil {
		return err
	}
	if n := len(in.Jobs); n == 0 || n > lease.MaxSubmitBatch {
		return badRequest("jobs: a batch holds 1 to %d jobs, this one %d", lease.MaxSubmitBatch, n)
	}
	items := make([]lease.SubmitItem, len(in.Jobs))
	refused := make([]error, len(in.Jobs)) // by the server, before the service
	for i, j := range in.Jobs {
		items[i] = lease.SubmitItem{ID: j.ID, Spec: j.Spec, MaxRequeues: j.MaxRequeues}
		if string(bytes.TrimSpace(j.Spec)) == "null" {
			items[i].Spec = nil
		}
		if err := lease.CheckID("job", j.ID); err != nil {
			refused[i] = err
			continue
		}
		if j.Kind == "" {
			refused[i] = badRequest("missing kind: want run or evaluation")
			continue
		}
		if items[i].Kind, refused[i] = parseKind(j.Kind); refused[i] != nil {
			continue
		}
		if refused[i] = ops.ScheduleOf(j, &items[i]); refused[i] != nil {
			continue
		}
		if items[i].Timing, refused[i] = ops.TimingAsked(j); refused[i] != nil {
			continue
		}
	}
	res, err := s.svc.SubmitBatch(r.Context(), items)
	if err != nil {
		return err
	}
	out := api.SubmitBatchReply{Jobs: make([]api.Submitted, len(res))}
	for i, v := range res {
		o := api.Submitted{ID: in.Jobs[i].ID, Status: http.StatusOK}
		if err := refused[i]; err != nil || v.Err != nil {
			if err == nil {
				err = v.Err
			}
			e := ops.ErrorOf(err)
			o.Status, o.Error = e.Status, &api.Error{Code: e.Code, Message: e.Message}
		} else {
			j := ops.ViewOf(v.JobView)
			o.Job = &j
			if v.Created {
				o.Status = http.StatusCreated
			}
		}
		out.Jobs[i] = o
	}
	s.writeJSON(w, c, http.StatusOK, out)
	return nil
}
