package ops

import (
	"encoding/json"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/timing"
)

// The conversions from the lease table, the log and the service to the
// documents of package api.

func unixTime(ns int64) time.Time { return time.Unix(0, ns).UTC() }

// JobOf converts a table job; live is its live lease, if any.
func JobOf(j projection.Job, live *projection.Lease) api.Job {
	out := api.Job{
		ID: j.ID, Kind: j.Kind.String(), State: j.State.String(), Attempts: j.Attempts, Leases: j.Leases,
		Outcome: j.Outcome.String(), Reason: j.Reason, Ref: j.Ref, Result: json.RawMessage(j.Result),
		Spec: json.RawMessage(j.Spec), Submitted: unixTime(j.Submitted), Updated: unixTime(j.Updated),
		MaxRequeues: j.MaxRequeues, Labels: j.Labels.Map(), Priority: j.Priority,
		Timing: ownTimingOf(j.Timing), Details: rawJSON(j.Details),
	}
	if j.NotBefore != 0 {
		t := unixTime(j.NotBefore)
		out.NotBefore = &t
	}
	if len(out.Spec) == 0 {
		out.Spec = json.RawMessage("{}")
	}
	if live != nil {
		l := LeaseOf(*live)
		out.Lease = &l
	}
	return out
}

// LeaseOf converts a table lease.
func LeaseOf(l projection.Lease) api.Lease {
	return api.Lease{
		Lease: l.ID, Job: l.Job, Kind: l.Kind.String(), Worker: l.Worker, State: l.State.String(),
		Revoke: l.Mode.String(), Acquired: unixTime(l.Acquired), Heard: unixTime(l.Heard), Report: l.ReportSeq,
		Timing: ownTimingOf(l.Timing), Details: rawJSON(l.Details),
	}
}

// EventOf converts a log event. It copies what it keeps, so e may alias an
// iterator.
func EventOf(e *event.Event) api.Event {
	c := e.Clone()
	e = &c
	out := api.Event{
		Seq: e.Seq, ID: e.ID.String(), Type: e.Type.String(), Time: unixTime(e.Time), Job: e.Job, Lease: e.Lease,
		Worker: e.Worker, Kind: e.Kind.String(), Outcome: e.Outcome.String(), Revoke: e.Mode.String(),
		Ref: e.Ref, Reason: e.Reason, GapSeconds: time.Duration(e.Gap).Seconds(),
		Spec: json.RawMessage(e.Spec), Result: json.RawMessage(e.Result),
		Timing: ownTimingOf(e.Timing), Details: json.RawMessage(e.Details),
	}
	if b := e.Beats; b.Count != 0 {
		out.Heartbeats = &api.Heartbeats{Count: b.Count, FirstSeq: b.FirstSeq, FirstTime: unixTime(b.FirstTime)}
	}
	return out
}

// GrantsOf converts the grants of an acquire, read back as vs (the service's
// GrantViews), the daemon having held the request held seconds.
func GrantsOf(gs []lease.Grant, vs []lease.JobView, held float64, t api.Timing) []api.Grant {
	out := make([]api.Grant, 0, len(gs))
	for i, v := range vs {
		out = append(out, api.Grant{Lease: gs[i].Lease, Job: ViewOf(v), HeldSeconds: held, Timing: t})
	}
	return out
}

// WorkerOf converts a table worker.
func WorkerOf(w projection.Worker) api.Worker {
	return api.Worker{ID: w.ID, Reachable: !w.Unreachable, Seen: unixTime(w.Seen), LiveLeases: w.Live}
}

// TimingOf converts the service's timing to what a worker is told of it.
func TimingOf(c timing.Config) api.Timing {
	return api.Timing{RenewSeconds: c.Renew.Seconds(), GraceSeconds: c.Grace.Seconds(), TolerationSeconds: c.Toleration.Seconds()}
}

// directives are the service's directives as the API spells them.
var directives = map[lease.Directive]api.Directive{
	lease.Continue: api.DirectiveContinue,
	lease.Cancel:   api.DirectiveCancel,
	lease.Kill:     api.DirectiveKill,
	lease.Gone:     api.DirectiveGone,
}

// DirectivesOf converts the service's answer to a heartbeat; never nil, so
// that an answer naming no lease is [] on the wire.
func DirectivesOf(ds []lease.LeaseDirective) []api.LeaseDirective {
	out := make([]api.LeaseDirective, 0, len(ds))
	for _, d := range ds {
		a, ok := directives[d.Directive]
		if !ok {
			a = api.Directive(d.Directive) // a directive the table lacks: TestDirectivesOf fails
		}
		out = append(out, api.LeaseDirective{Lease: d.Lease, Directive: a})
	}
	return out
}
