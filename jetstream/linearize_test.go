package jetstream

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/testkit/linearize"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/ops"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/worker"
)

// porcupineTimeout bounds the linearizability check of a scenario's
// history: a few hundred operations, checked in milliseconds.
const porcupineTimeout = 30 * time.Second

// daemonOf is svc as the API's Go client shows it (linearize.Daemon), for a
// recorder to wrap: the worker's calls through ops.Daemon (the adapter
// the built-in worker uses), the client's through the operations and
// conversions of package ops, as the server's. A client call's error is the API's and the service's at
// once, so that the recorder reads its code and a test matches
// lease.ErrFailed or lease.ErrNotFound.
func daemonOf(svc *lease.Service) linearize.Daemon { return serviceDaemon{ops.NewDaemon(svc), svc} }

type serviceDaemon struct {
	worker.Daemon
	svc *lease.Service
}

func apiErr(err error) error { return fmt.Errorf("%w (%w)", ops.ErrorOf(err), err) }

func (d serviceDaemon) Submit(ctx context.Context, s api.Submit) (api.Job, bool, error) {
	kind, err := event.ParseKind(s.Kind)
	if err != nil {
		return api.Job{}, false, apiErr(err)
	}
	j, created, err := d.svc.Submit(ctx, s.ID, kind, s.Spec)
	if err != nil {
		return api.Job{}, false, apiErr(err)
	}
	return ops.JobOf(j, nil), created, nil
}

// Job reads the job with its live lease in one read, as GET /v1/jobs/{id}.
func (d serviceDaemon) Job(ctx context.Context, id string) (api.Job, error) {
	j, err := ops.Job(ctx, d.svc, id)
	if err != nil {
		return api.Job{}, apiErr(err)
	}
	return j, nil
}

func (d serviceDaemon) Cancel(ctx context.Context, id string) (api.Job, error) {
	return d.revoke(ctx, id, d.svc.Cancel)
}

func (d serviceDaemon) Kill(ctx context.Context, id string) (api.Job, error) {
	return d.revoke(ctx, id, d.svc.Kill)
}

// revoke answers with the job as the revoke left it (its state is what the
// model judges), not as a later read would find it.
func (d serviceDaemon) revoke(ctx context.Context, id string, f func(context.Context, string) (projection.Job, error)) (api.Job, error) {
	j, err := f(ctx, id)
	if err != nil {
		return api.Job{}, apiErr(err)
	}
	return ops.JobOf(j, nil), nil
}

// checkLinearizable holds the calls recorded in a scenario, with the
// stream's events, to the lease service's porcupine model.
func checkLinearizable(t *testing.T, rec *linearize.Recorder, evs []event.Event) {
	t.Helper()
	ops, err := rec.Operations(evs)
	if err != nil {
		t.Fatalf("porcupine: %v", err)
	}
	res, err := linearize.Check(ops, porcupineTimeout)
	if err != nil {
		t.Fatalf("porcupine: %v", err)
	}
	unknown := 0
	for _, op := range ops {
		if op.Output.(linearize.Output).Unknown {
			unknown++
		}
	}
	t.Logf("porcupine: %d operations (%d without an answer) linearizable, checked in %v", res.Ops, unknown, res.Elapsed.Round(time.Millisecond))
}
