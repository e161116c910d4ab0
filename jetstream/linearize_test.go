package jetstream

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/inprocess"
	"github.com/leaselog/leaselog/internal/linearize"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/server"
	"github.com/leaselog/leaselog/worker"
)

// porcupineTimeout bounds the linearizability check of a scenario's
// history: a few hundred operations, checked in milliseconds.
const porcupineTimeout = 30 * time.Second

// daemonOf is svc as the API's Go client shows it (linearize.Daemon), for a
// recorder to wrap: the worker's calls through package inprocess (the
// adapter the built-in worker uses), the client's through the server's own
// conversions. A client call's error is the API's and the service's at
// once, so that the recorder reads its code and a test matches
// lease.ErrFailed or lease.ErrNotFound.
func daemonOf(svc *lease.Service) linearize.Daemon { return serviceDaemon{inprocess.New(svc), svc} }

type serviceDaemon struct {
	worker.Daemon
	svc *lease.Service
}

func apiErr(err error) error { return fmt.Errorf("%w (%w)", server.ErrorOf(err), err) }

func (d serviceDaemon) Submit(ctx context.Context, s api.Submit) (api.Job, bool, error) {
	kind, err := event.ParseKind(s.Kind)
	if err != nil {
		return api.Job{}, false, apiErr(err)
	}
	j, created, err := d.svc.Submit(ctx, s.ID, kind, s.Spec)
	if err != nil {
		return api.Job{}, false, apiErr(err)
	}
	return server.JobOf(j, nil), created, nil
}

// Job reads the job with its live lease in one read, as GET /v1/jobs/{id}.
func (d serviceDaemon) Job(ctx context.Context, id string) (api.Job, error) {
	v, err := d.svc.JobView(ctx, id)
	if err != nil {
		return api.Job{}, apiErr(err)
	}
	return server.JobOf(v.Job, v.Live), nil
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
	return server.JobOf(j, nil), nil
}

// traffic is a little concurrent load a scenario puts on its daemon, every
// call through the recorder: a client submitting jobs (some twice), reading
// and cancelling one; workers each looping acquire, start, heartbeat and
// report (worker 0 reporting with its next acquire). A worker keeps what it
// holds from one burst to the next, so that a lease one daemon granted is
// heartbeated and reported to the daemon that took over.
type traffic struct {
	rec    *linearize.Recorder
	bursts int
	held   [trafficWorkers][]uint64
}

// The load of a burst: trafficWorkers workers and a client, trafficRounds
// rounds each (a few hundred calls, a fraction of a second).
const (
	trafficWorkers = 3
	trafficRounds  = 10
)

func newTraffic(rec *linearize.Recorder) *traffic { return &traffic{rec: rec} }

// burst runs the client and the workers on svc for rounds rounds each, and
// returns when all have done theirs.
func (tr *traffic) burst(t *testing.T, svc *lease.Service, rounds int) {
	t.Helper()
	tr.bursts++
	b := tr.bursts
	var wg sync.WaitGroup
	wg.Go(func() { tr.client(t, tr.rec.Client("tc", daemonOf(svc)), b, rounds) })
	for w := range trafficWorkers {
		wg.Go(func() { tr.work(t, tr.rec.Client(fmt.Sprintf("tw%d", w), daemonOf(svc)), w, rounds) })
	}
	wg.Wait()
}

func (tr *traffic) client(t *testing.T, d linearize.Daemon, burst, rounds int) {
	ctx := context.Background()
	for n := range rounds {
		s := api.Submit{ID: fmt.Sprintf("t%d-%d", burst, n), Kind: "run", Spec: []byte(`{"cmd":"true"}`)}
		if n%2 == 1 {
			s.Kind = "evaluation"
		}
		again := 1 + n%3/2 // every third job twice: the second is no creation
		for range again {
			if _, _, err := d.Submit(ctx, s); err != nil {
				t.Errorf("traffic: submit %s: %v", s.ID, err)
				return
			}
		}
		var err error
		switch n {
		case rounds / 2:
			_, err = d.Cancel(ctx, fmt.Sprintf("t%d-0", burst))
		case rounds - 1:
			_, err = d.Job(ctx, fmt.Sprintf("t%d-1", burst))
		}
		if err != nil {
			t.Errorf("traffic: client: %v", err)
			return
		}
	}
}

func (tr *traffic) work(t *testing.T, d linearize.Daemon, w, rounds int) {
	ctx := context.Background()
	name := fmt.Sprintf("tw%d", w)
	held := tr.held[w]
	defer func() { tr.held[w] = held }()
	report := func(lease uint64, outcome event.Outcome, next bool) ([]api.Grant, error) {
		r := api.Report{Worker: name, Outcome: outcome.String()}
		if next {
			r.Next = &api.Next{Max: 1}
		}
		a, err := d.Report(ctx, lease, r)
		if err != nil || a.Next == nil {
			return nil, err
		}
		return a.Next.Leases, nil
	}
	for range rounds {
		var gs []api.Grant
		var err error
		if w == 0 && len(held) > 1 {
			gs, err = report(held[0], event.OutcomeSucceeded, true)
			held = held[1:]
		} else {
			gs, err = d.Acquire(ctx, name, 1, 0)
		}
		if err != nil {
			t.Errorf("traffic: %s: acquire: %v", name, err)
			return
		}
		for _, g := range gs {
			if _, err := d.Start(ctx, name, g.Lease); err != nil {
				t.Errorf("traffic: %s: start %d: %v", name, g.Lease, err)
				return
			}
			held = append(held, g.Lease)
		}
		if len(held) == 0 {
			continue
		}
		hb, err := d.Heartbeat(ctx, name, held)
		if err != nil {
			t.Errorf("traffic: %s: heartbeat: %v", name, err)
			return
		}
		held = held[:0]
		for _, l := range hb.Leases {
			switch l.Directive {
			case api.DirectiveContinue:
				held = append(held, l.Lease)
			case api.DirectiveCancel, api.DirectiveKill:
				if _, err := report(l.Lease, event.OutcomeCancelled, false); err != nil {
					t.Errorf("traffic: %s: report revoked %d: %v", name, l.Lease, err)
					return
				}
			}
		}
		if w != 0 && len(held) > 1 {
			if _, err := report(held[0], event.OutcomeSucceeded, false); err != nil {
				t.Errorf("traffic: %s: report %d: %v", name, held[0], err)
				return
			}
			held = held[1:]
		}
	}
}

// checkLinearizable holds the calls recorded in a scenario, with the
// stream's events, to the lease service's porcupine model.
func checkLinearizable(t *testing.T, rec *linearize.Recorder, evs []event.Event) {
	t.Helper()
	res, err := rec.Check(evs, porcupineTimeout)
	if err != nil {
		t.Fatalf("porcupine: %v", err)
	}
	t.Logf("porcupine: %d operations linearizable, checked in %v", res.Ops, res.Elapsed.Round(time.Millisecond))
}
