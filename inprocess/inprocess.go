// Package inprocess is where the daemon's own local worker meets its lease
// service: an adapter that gives the worker (worker.Daemon) the service's
// answers as the HTTP API would give them, without the network. The daemon
// (cmd/leaselog) and the simulation wire a worker through it; it converts
// with the server's own conversions, so that the two paths cannot drift
// apart, and keeps the worker package free of the service and its store.
package inprocess

import (
	"context"
	"net/http"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/server"
	"github.com/leaselog/leaselog/worker"
)

// New adapts a lease.Service to worker.Daemon, for the worker built into the
// daemon. Errors come back as *api.Error, as they would over HTTP.
func New(svc *lease.Service) worker.Daemon { return inProcess{svc} }

type inProcess struct{ svc *lease.Service }

func (d inProcess) grants(ctx context.Context, gs []lease.Grant, held time.Duration) ([]api.Grant, error) {
	vs, err := d.svc.GrantViews(ctx, gs)
	if err != nil {
		return nil, server.ErrorOf(err)
	}
	return server.GrantsOf(gs, vs, held.Seconds(), server.TimingOf(d.svc.Config())), nil
}

// Acquire fills api.Grant.HeldSeconds as the HTTP server does: how long the
// request waited for a job. A grant made at once held it for no time at
// all, whatever the call took, so that a caller on a simulated clock (the
// simulation calls Acquire with no wait) sees no real time in it.
func (d inProcess) Acquire(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error) {
	return d.acquire(ctx, worker, lease.AcquireOptions{Max: max}, wait)
}

// AcquireStart is Acquire whose grants come back running (worker.Rounder).
func (d inProcess) AcquireStart(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error) {
	return d.acquire(ctx, worker, lease.AcquireOptions{Max: max, Start: true}, wait)
}

func (d inProcess) acquire(ctx context.Context, worker string, o lease.AcquireOptions, wait time.Duration) ([]api.Grant, error) {
	gs, err := d.svc.AcquireWith(ctx, worker, o)
	if err != nil {
		return nil, server.ErrorOf(err)
	}
	var held time.Duration
	if len(gs) == 0 && wait > 0 {
		waitCtx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		since := time.Now()
		gs, err = d.svc.AcquireWaitWith(waitCtx, worker, o)
		held = time.Since(since)
		if err != nil {
			return nil, server.ErrorOf(err)
		}
	}
	return d.grants(context.WithoutCancel(ctx), gs, held)
}

func (d inProcess) Heartbeat(ctx context.Context, worker string, leases []uint64) (api.HeartbeatReply, error) {
	ds, err := d.svc.Heartbeat(ctx, worker, leases)
	if err != nil {
		return api.HeartbeatReply{}, server.ErrorOf(err)
	}
	return api.HeartbeatReply{Leases: server.DirectivesOf(ds), Timing: server.TimingOf(d.svc.Config())}, nil
}

func (d inProcess) WorkerLeases(ctx context.Context, worker string) ([]api.Grant, error) {
	gs, err := d.svc.WorkerLeases(ctx, worker)
	if err != nil {
		return nil, server.ErrorOf(err)
	}
	return d.grants(ctx, gs, 0)
}

func (d inProcess) Start(ctx context.Context, worker string, id uint64) (api.Lease, error) {
	l, err := d.svc.Start(ctx, worker, id)
	if err != nil {
		return api.Lease{}, server.ErrorOf(err)
	}
	return server.LeaseOf(l), nil
}

func (d inProcess) Report(ctx context.Context, id uint64, r api.Report) (api.ReportReply, error) {
	if r.Next != nil {
		return d.ReportNext(ctx, id, r, *r.Next)
	}
	o, err := event.ParseOutcome(r.Outcome)
	if err != nil {
		return api.ReportReply{}, &api.Error{Status: http.StatusBadRequest, Code: api.CodeBadRequest, Message: err.Error()}
	}
	a, err := d.svc.Report(ctx, r.Worker, id, lease.Report{Outcome: o, Ref: r.Ref, Reason: r.Reason, Result: r.Result})
	if err != nil {
		return api.ReportReply{}, reportError(a, err)
	}
	return api.ReportReply{Accepted: true, Job: a.Job, Lease: a.Lease, Seq: a.Seq}, nil
}

// ReportNext is Report carrying the next acquire (worker.Rounder): the
// reply's Next holds its grants when this call accepted the report.
func (d inProcess) ReportNext(ctx context.Context, id uint64, r api.Report, next api.Next) (api.ReportReply, error) {
	o, err := event.ParseOutcome(r.Outcome)
	if err != nil {
		return api.ReportReply{}, &api.Error{Status: http.StatusBadRequest, Code: api.CodeBadRequest, Message: err.Error()}
	}
	if next.Max == 0 {
		next.Max = 1
	}
	a, gs, err := d.svc.ReportNext(ctx, r.Worker, id, lease.Report{Outcome: o, Ref: r.Ref, Reason: r.Reason, Result: r.Result},
		lease.AcquireOptions{Max: next.Max, Start: next.Start})
	if err != nil {
		return api.ReportReply{}, reportError(a, err)
	}
	out := api.ReportReply{Accepted: true, Job: a.Job, Lease: a.Lease, Seq: a.Seq}
	if gs != nil {
		grants, err := d.grants(context.WithoutCancel(ctx), gs, 0)
		if err != nil {
			return api.ReportReply{}, err
		}
		out.Next = &api.Grants{Leases: grants}
	}
	return out, nil
}

func reportError(a lease.Answer, err error) error {
	e := server.ErrorOf(err)
	if a.Stale {
		e.StaleReportSeq = a.Seq
	}
	return e
}
