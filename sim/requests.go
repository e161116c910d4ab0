package sim

import (
	"fmt"
	"strings"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/testkit/linearize"
	"github.com/leaselog/leaselog/timing"
)

// request is what a call asks the daemon: the worker API (through
// ops.Daemon, the adapter the built-in worker uses) and the client API.
type request interface {
	kind() string
	String() string
	model() linearize.Req // in the model's terms, for the history
}

type reqHeartbeat struct {
	worker string
	leases []uint64
}

type reqAcquire struct {
	worker string
	max    int
	wait   time.Duration
	start  bool // the grants come back running (the worker does not ask it)
	offer  api.Offer
}

type reqStart struct {
	worker string
	lease  uint64
}

type reqReport struct {
	lease uint64
	r     api.Report
}

type reqWorkerLeases struct{ worker string }

type reqSubmit struct {
	job, jobKind, spec string
	maxRequeues        int  // the cap the submission names, if namesCap
	namesCap           bool // else the daemon's default: none
	sched              schedule
}

type reqRevoke struct {
	job  string
	kill bool
}

type reqJob struct{ job string }

func (reqHeartbeat) kind() string    { return "heartbeat" }
func (reqAcquire) kind() string      { return "acquire" }
func (reqStart) kind() string        { return "start" }
func (reqReport) kind() string       { return "report" }
func (reqWorkerLeases) kind() string { return "leases" }
func (reqSubmit) kind() string       { return "submit" }
func (r reqRevoke) kind() string {
	if r.kill {
		return "kill"
	}
	return "cancel"
}
func (reqJob) kind() string { return "job" }

func (r reqHeartbeat) model() linearize.Req {
	return linearize.Req{Op: linearize.OpBeat, Worker: r.worker}
}
func (r reqAcquire) model() linearize.Req {
	return linearize.Req{Op: linearize.OpAcquire, Worker: r.worker, Max: r.max, Start: r.start, Offer: r.offer}
}
func (r reqStart) model() linearize.Req {
	return linearize.Req{Op: linearize.OpStart, Worker: r.worker, Lease: r.lease}
}
func (r reqWorkerLeases) model() linearize.Req {
	return linearize.Req{Op: linearize.OpHolds, Worker: r.worker}
}
func (r reqReport) model() linearize.Req {
	return linearize.Req{Op: linearize.OpReport, Lease: r.lease, Report: r.r}
}
func (r reqSubmit) model() linearize.Req {
	q := linearize.Req{Op: linearize.OpSubmit, Job: r.job, Kind: r.jobKind, Spec: r.spec, Labels: r.sched.labels, Priority: r.sched.priority}
	if r.namesCap {
		q.MaxRequeues = &r.maxRequeues
	}
	return q
}
func (r reqRevoke) model() linearize.Req {
	if r.kill {
		return linearize.Req{Op: linearize.OpKill, Job: r.job}
	}
	return linearize.Req{Op: linearize.OpCancel, Job: r.job}
}
func (r reqJob) model() linearize.Req { return linearize.Req{Op: linearize.OpRead, Job: r.job} }

func (r reqHeartbeat) String() string { return fmt.Sprintf("heartbeat %s %v", r.worker, r.leases) }
func (r reqAcquire) String() string {
	return fmt.Sprintf("acquire %s max=%d%s", r.worker, r.max, map[bool]string{true: " start"}[r.start])
}
func (r reqStart) String() string        { return fmt.Sprintf("start %s lease=%d", r.worker, r.lease) }
func (r reqWorkerLeases) String() string { return "leases " + r.worker }
func (r reqReport) String() string {
	s := fmt.Sprintf("report %s lease=%d %s%s", r.r.Worker, r.lease, r.r.Outcome, noteIf(" ref=", r.r.Ref))
	if r.r.Next != nil {
		s += fmt.Sprintf(" next=%d", r.r.Next.Max)
	}
	return s
}
func (r reqSubmit) String() string {
	s := fmt.Sprintf("submit %s %s %s", r.job, r.jobKind, r.spec)
	if r.namesCap {
		s += fmt.Sprintf(" max_requeues=%d", r.maxRequeues)
	}
	if len(r.sched.labels) > 0 {
		s += " labels=" + linearize.LabelsOf(r.sched.labels)
	}
	if r.sched.priority != 0 {
		s += fmt.Sprintf(" priority=%d", r.sched.priority)
	}
	if r.sched.delay != 0 {
		s += fmt.Sprintf(" delay=%v", r.sched.delay)
	}
	if r.sched.timing != (timing.Config{}) {
		s += " timing=" + event.TimingString(r.sched.timing)
	}
	return s
}
func (r reqRevoke) String() string { return r.kind() + " " + r.job }
func (r reqJob) String() string    { return "job " + r.job }

func noteIf(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

func describeReply(reply any) string {
	switch r := reply.(type) {
	case api.HeartbeatReply:
		var b strings.Builder
		for i, d := range r.Leases {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%d:%s", d.Lease, d.Directive)
		}
		return "[" + b.String() + "]"
	case []api.Grant:
		var b strings.Builder
		for i, g := range r {
			if i > 0 {
				b.WriteByte(' ')
			}
			fmt.Fprintf(&b, "%s@%d", g.Job.ID, g.Lease)
		}
		return "grants [" + b.String() + "]"
	case api.Lease:
		return fmt.Sprintf("lease %d %s", r.Lease, r.State)
	case api.ReportReply:
		if r.Next != nil {
			return fmt.Sprintf("accepted seq=%d next %s", r.Seq, describeReply(r.Next.Leases))
		}
		return fmt.Sprintf("accepted seq=%d", r.Seq)
	case api.Job:
		lease := uint64(0)
		if r.Lease != nil {
			lease = r.Lease.Lease
		}
		return fmt.Sprintf("job %s %s attempts=%d lease=%d", r.ID, r.State, r.Attempts, lease)
	case submitted:
		return fmt.Sprintf("job %s %s created=%v", r.job.ID, r.job.State, r.created)
	}
	return fmt.Sprint(reply)
}

// submitted is the answer to a submit.
type submitted struct {
	job     api.Job
	created bool
}
