package linearize

import (
	"bytes"
	"encoding/json"
	"errors"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
)

// Req is a call's request in the model's terms: what CallOps reads of it.
// The simulation's requests and the Recorder's calls are both given as one.
type Req struct {
	Op     Op     // OpSubmit, OpRead, OpCancel, OpKill, OpAcquire, OpStart, OpBeat, OpHolds or OpReport
	Job    string // OpSubmit, OpRead, OpCancel, OpKill
	Kind   string // OpSubmit: the job's kind
	Spec   string // OpSubmit
	Worker string // OpAcquire, OpStart, OpBeat, OpHolds (OpReport: Report.Worker)
	Lease  uint64 // OpStart, OpReport
	Max    int    // OpAcquire
	Start  bool   // OpAcquire: the grants come back running
	Report api.Report
	// Labels and Priority are a submission's scheduling (OpSubmit); Offer
	// what an acquire's worker takes (OpAcquire).
	Labels   map[string]string
	Priority int
	Offer    api.Offer
	// MaxRequeues is the cap a submission names (OpSubmit), nil for none:
	// the daemon's default, which the model takes as no cap (the callers
	// checked here run daemons without one).
	MaxRequeues *int
}

// JobOp is one operation of a call on one job, before its times.
type JobOp struct {
	In  Input
	Out Output
}

// Acquired gives the operations of an acquire by worker, for up to max
// jobs (a report's next acquire for 0 is for 1, as the daemon takes it),
// that granted gs: one per grant, and the misses its caller can bound
// in time. CallOps calls it for an acquire answered without error, and for
// the acquire a report carried, made by the call that accepted the report.
// offer is what the worker takes: an acquire grants no job it cannot take,
// and misses none.
type Acquired func(gs []api.Grant, worker string, max int, start bool, offer Route) []JobOp

// CallOps returns what one processing of the call q did, per job, given
// what it answered: reply is the Daemon method's (for OpSubmit, whether it
// created the job), err its error. known says whether the caller saw the
// answer; an answer nobody saw is kept only where it changed something the
// model tracks (the caller makes its output unknown). jobOf names the job
// of a lease; a lease it does not know is no operation.
func CallOps(q Req, reply any, err error, known bool, jobOf func(lease uint64) (string, bool), acquired Acquired) []JobOp {
	code := ""
	if err != nil {
		code = codeOf(err)
	}
	switch q.Op {
	case OpSubmit:
		o := Output{Code: code}
		if err == nil {
			o.Created = reply.(bool)
		}
		in := Input{Op: OpSubmit, Job: q.Job, JobKind: q.Kind, Spec: q.Spec, Labels: LabelsOf(q.Labels), Priority: q.Priority}
		if q.MaxRequeues != nil {
			in.MaxRequeues, in.NamesCap = *q.MaxRequeues, true
		}
		return []JobOp{{in, o}}
	case OpCancel, OpKill:
		o := Output{Code: code}
		if err == nil {
			o.State = reply.(api.Job).State
		}
		return []JobOp{{Input{Op: q.Op, Job: q.Job}, o}}
	case OpRead:
		if !known {
			return nil
		}
		o := Output{Code: code}
		if err == nil {
			j := reply.(api.Job)
			o.State, o.Attempts = j.State, j.Attempts
			if j.Lease != nil {
				o.Lease = j.Lease.Lease
			}
		}
		return []JobOp{{Input{Op: OpRead, Job: q.Job}, o}}
	case OpAcquire:
		if err != nil {
			return nil // a refused acquire grants nothing
		}
		return acquired(reply.([]api.Grant), q.Worker, q.Max, q.Start, RouteOf(q.Offer))
	case OpStart:
		if job, ok := jobOf(q.Lease); ok {
			return []JobOp{{Input{Op: OpStart, Job: job, Worker: q.Worker, Lease: q.Lease}, Output{Code: code}}}
		}
	case OpBeat:
		if !known || err != nil {
			return nil
		}
		var ops []JobOp
		for _, d := range reply.(api.HeartbeatReply).Leases {
			if job, ok := jobOf(d.Lease); ok {
				ops = append(ops, JobOp{Input{Op: OpBeat, Job: job, Worker: q.Worker, Lease: d.Lease}, Output{Directive: string(d.Directive)}})
			}
		}
		return ops
	case OpHolds:
		if !known || err != nil {
			return nil
		}
		var ops []JobOp
		for _, g := range reply.([]api.Grant) {
			ops = append(ops, JobOp{Input{Op: OpHolds, Job: g.Job.ID, Worker: q.Worker, Lease: g.Lease}, Output{}})
		}
		return ops
	case OpReport:
		var ops []JobOp
		if job, ok := jobOf(q.Lease); ok {
			o := Output{Code: code}
			var ae *api.Error
			switch {
			case err == nil:
				o.Seq = reply.(api.ReportReply).Seq
			case errors.As(err, &ae):
				o.Seq = ae.StaleReportSeq
			}
			r := q.Report
			ops = append(ops, JobOp{Input{Op: OpReport, Job: job, Worker: r.Worker, Lease: q.Lease,
				Outcome: r.Outcome, Ref: r.Ref, Reason: r.Reason, Result: compactResult(r.Result)}, o})
		}
		// The acquire it carried, made by the processing that accepted it;
		// an answer without its next repeats an earlier one, which made it.
		if err == nil && q.Report.Next != nil {
			if next := reply.(api.ReportReply).Next; next != nil {
				ops = append(ops, acquired(next.Leases, q.Report.Worker, max(q.Report.Next.Max, 1), q.Report.Next.Start, RouteOf(q.Report.Next.Offer))...)
			}
		}
		return ops
	}
	return nil
}

// compactResult is a report's result as the daemon compares it: compact
// JSON, "" for none (or null). (The daemon also drops a result past its
// limit and cuts a ref or reason past theirs; the callers checked here send
// none so long.) A result that is not JSON is kept as sent: the daemon
// refuses it.
func compactResult(r json.RawMessage) string {
	var b bytes.Buffer
	if err := json.Compact(&b, r); err != nil {
		return string(r)
	}
	if b.String() == "null" {
		return ""
	}
	return b.String()
}

func codeOf(err error) string {
	var ae *api.Error
	if errors.As(err, &ae) {
		return ae.Code
	}
	return "transport"
}

// ExpiryState is the state the lease.expired at evs[i] left its job in, as
// the event after it says: queued again, cancelled, or failed.
func ExpiryState(evs []event.Event, i int) string {
	if i+1 < len(evs) && evs[i+1].Job == evs[i].Job {
		switch evs[i+1].Type {
		case event.TypeQueued:
			return "queued"
		case event.TypeCancelled:
			return "cancelled"
		}
	}
	return "failed"
}
