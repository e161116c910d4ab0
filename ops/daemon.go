package ops

import (
	"context"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/lease"
)

// Daemon is the daemon as a worker in its own process sees it: the
// worker.Daemon and worker.Rounder of package worker on a lease.Service,
// each call one of this package's operations, so that it answers as the
// HTTP API does — errors as *api.Error, held_seconds as the server counts
// them — without the network. The daemon's local worker and the
// simulation use it; it keeps package worker free of the service and its
// store.
type Daemon struct{ svc *lease.Service }

// NewDaemon returns svc as a worker in its process sees it.
func NewDaemon(svc *lease.Service) *Daemon { return &Daemon{svc} }

// Acquire is Acquire, wait given as a duration. Its hold is counted on
// CLOCK_BOOTTIME from the call, as the server counts it from a request's
// headers; a grant made at once held it for no time at all, so that a
// caller on a simulated clock (the simulation calls Acquire with no wait)
// sees no real time in it.
func (d *Daemon) Acquire(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error) {
	return d.AcquireOffer(ctx, worker, max, wait, api.Offer{})
}

// AcquireOffer is Acquire for a worker offering o (api.Client's).
func (d *Daemon) AcquireOffer(ctx context.Context, worker string, max int, wait time.Duration, o api.Offer) ([]api.Grant, error) {
	g, err := Acquire(ctx, d.svc, worker, api.Acquire{Max: max, WaitSeconds: wait.Seconds(), Offer: o}, Hold{})
	return g.Leases, apiError(err)
}

// AcquireStart is Acquire whose grants come back running.
func (d *Daemon) AcquireStart(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error) {
	g, err := Acquire(ctx, d.svc, worker, api.Acquire{Max: max, WaitSeconds: wait.Seconds(), Start: true}, Hold{})
	return g.Leases, apiError(err)
}

// Heartbeat is Heartbeat.
func (d *Daemon) Heartbeat(ctx context.Context, worker string, leases []uint64) (api.HeartbeatReply, error) {
	r, err := Heartbeat(ctx, d.svc, worker, api.Heartbeat{Leases: leases})
	return r, apiError(err)
}

// HeartbeatDetails is Heartbeat with its details (worker.Detailer).
func (d *Daemon) HeartbeatDetails(ctx context.Context, worker string, hb api.Heartbeat) (api.HeartbeatReply, error) {
	r, err := Heartbeat(ctx, d.svc, worker, hb)
	return r, apiError(err)
}

// WorkerLeases is every page of WorkerLeases.
func (d *Daemon) WorkerLeases(ctx context.Context, worker string) ([]api.Grant, error) {
	var out []api.Grant
	for after := uint64(0); ; {
		g, err := WorkerLeases(ctx, d.svc, worker, after, api.MaxLimit)
		if err != nil {
			return nil, apiError(err)
		}
		out = append(out, g.Leases...)
		if g.Next == "" {
			return out, nil
		}
		after = g.Leases[len(g.Leases)-1].Lease
	}
}

// Start is Start.
func (d *Daemon) Start(ctx context.Context, worker string, lease uint64) (api.Lease, error) {
	l, err := Start(ctx, d.svc, lease, api.Start{Worker: worker}, nil)
	return l, apiError(err)
}

// Report is Report (with r.Next, ReportNext).
func (d *Daemon) Report(ctx context.Context, lease uint64, r api.Report) (api.ReportReply, error) {
	rr, err := Report(ctx, d.svc, lease, r, nil)
	if err != nil {
		return api.ReportReply{}, apiError(err)
	}
	return rr, nil
}

// ReportNext is Report carrying the next acquire: the reply's Next holds
// its grants when this call accepted the report.
func (d *Daemon) ReportNext(ctx context.Context, lease uint64, r api.Report, next api.Next) (api.ReportReply, error) {
	r.Next = &next
	return d.Report(ctx, lease, r)
}

// apiError is err as an API client gets it: an *api.Error, or nil.
func apiError(err error) error {
	if err == nil {
		return nil
	}
	return ErrorOf(err)
}
