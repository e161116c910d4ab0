package api

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// The calls that save round trips: an acquire whose grants come back
// running, a report that carries the next acquire, and a submit of many jobs
// in one call.

// AcquireStart is Acquire whose grants come back running: each lease's start
// is recorded with its grant, and no Start call follows.
func (c *Client) AcquireStart(ctx context.Context, worker string, max int, wait time.Duration) ([]Grant, error) {
	var g Grants
	err := c.workerDo(ctx, worker, OpAcquire, "", "/v1/workers/"+url.PathEscape(worker)+"/acquire",
		Acquire{Max: max, WaitSeconds: wait.Seconds(), Start: true}, &g)
	return g.Leases, err
}

// ReportNext is Report carrying the next acquire for r.Worker: once the
// report is accepted, up to next.Max leases, without waiting, their grants in
// the reply's Next. A reply without Next (nil) repeats an earlier call's
// answer: the grants of that call, if its answer was lost, are among
// WorkerLeases. A refused report acquires nothing.
func (c *Client) ReportNext(ctx context.Context, lease uint64, r Report, next Next) (ReportReply, error) {
	r.Next = &next
	var rr ReportReply
	id := strconv.FormatUint(lease, 10)
	err := c.workerDo(ctx, r.Worker, OpReport, id, "/v1/leases/"+id+"/report", r, &rr)
	return rr, err
}

// SubmitBatch submits jobs in one call: each is answered in its place, the
// refused ones (Status >= 400) without the others being refused with them.
// The call itself fails for a batch of no job or of more than 1000.
func (c *Client) SubmitBatch(ctx context.Context, jobs []Submit) ([]Submitted, error) {
	var out SubmitBatchReply
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs/batch", SubmitBatch{Jobs: jobs}, &out)
	return out.Jobs, err
}
