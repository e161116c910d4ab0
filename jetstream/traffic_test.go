package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/testkit/linearize"
)

// traffic is a little concurrent load a scenario keeps on its daemons from
// before its fault to after it, every call through the recorder and through
// a client of the daemons (daemons.client), so that calls are in flight
// when the fault comes: answered by the old daemon, refused, never answered
// (killed), or sent again to the daemon that took over. A client submits
// jobs (every third twice), cancelling and reading some; workers each loop
// acquire, start, heartbeat and report (worker 0 reporting with its next
// acquire). A call no daemon answered is sent again, as a worker's retry,
// once a daemon changed state (daemons.changes); a worker that went without
// an answer re-attaches (its leases from the daemon, each started), as a
// worker does after its daemon's restart.
type traffic struct {
	t    *testing.T
	ds   *daemons
	stop chan struct{}
	wg   sync.WaitGroup
	done [trafficWorkers + 1]atomic.Int64 // rounds each actor finished: the workers', the client's
}

// trafficWorkers is the number of workers of the load; trafficRounds how
// many rounds each actor does before a fault, and after it (tens of calls
// each: a fraction of a second).
const (
	trafficWorkers = 3
	trafficRounds  = 10
)

// errHalted is a call given up because the load stops.
var errHalted = errors.New("traffic: halted")

// startTraffic starts the load on ds, its calls recorded by rec.
func startTraffic(t *testing.T, rec *linearize.Recorder, ds *daemons) *traffic {
	tr := &traffic{t: t, ds: ds, stop: make(chan struct{})}
	for w := range trafficWorkers {
		d := rec.Client(fmt.Sprintf("tw%d", w), ds.client())
		tr.wg.Go(func() { tr.work(w, d) })
	}
	d := rec.Client("tc", ds.client())
	tr.wg.Go(func() { tr.client(d) })
	t.Cleanup(tr.halt)
	return tr
}

// rounds waits until every actor has finished n rounds more than when it
// was called.
func (tr *traffic) rounds(t *testing.T, n int) {
	t.Helper()
	var from [len(tr.done)]int64
	for i := range tr.done {
		from[i] = tr.done[i].Load()
	}
	waitFor(t, 20*time.Second, fmt.Sprintf("every actor of the load to do %d rounds", n), func() bool {
		for i := range tr.done {
			if tr.done[i].Load() < from[i]+int64(n) {
				return false
			}
		}
		return true
	})
}

// halt stops the load and returns when every actor has.
func (tr *traffic) halt() {
	select {
	case <-tr.stop:
	default:
		close(tr.stop)
	}
	tr.wg.Wait()
}

func (tr *traffic) halted() bool {
	select {
	case <-tr.stop:
		return true
	default:
		return false
	}
}

// call makes a call (f) until a daemon answers it: a call that failed
// without an answer (api.Retryable) is sent again once a daemon has changed
// state since it was sent. It returns the answer's error and whether the
// call was sent more than once; errHalted when the load stops first.
func (tr *traffic) call(f func() error) (retried bool, err error) {
	for {
		changed := tr.ds.changes()
		if err = f(); !api.Retryable(err) {
			return retried, err
		}
		retried = true
		select {
		case <-changed:
		case <-tr.stop:
			return retried, errHalted
		}
	}
}

// step makes a call of an actor (call) and says whether its answer is to be
// used. A definite refusal of a call sent more than once is what the design
// allows (a report done by the attempt whose answer was lost is stale on
// the next): the actor goes on (a worker re-attaches); one of a call sent
// once fails the test. lost is set when the call went without an answer.
func (tr *traffic) step(who, what string, lost *bool, f func() error) (ok, quit bool) {
	retried, err := tr.call(f)
	*lost = *lost || retried
	switch {
	case err == nil:
		return true, false
	case errors.Is(err, errHalted):
		return false, true
	case retried:
		return false, false
	}
	tr.t.Errorf("traffic: %s: %s: %v", who, what, err)
	return false, true
}

func (tr *traffic) client(d linearize.Daemon) {
	ctx := context.Background()
	var lost bool
	step := func(what string, f func() error) bool {
		_, quit := tr.step("client", what, &lost, f)
		return quit
	}
	job := func(n int) string { return fmt.Sprintf("t%d", n) }
	for n := 0; !tr.halted(); n++ {
		s := api.Submit{ID: job(n), Kind: "run", Spec: []byte(`{"cmd":"true"}`)}
		if n%2 == 1 {
			s.Kind = "evaluation"
		}
		for range 1 + n%3/2 { // every third job twice: the second is no creation
			if step("submit "+s.ID, func() error { _, _, err := d.Submit(ctx, s); return err }) {
				return
			}
		}
		switch n % 10 {
		case 5:
			if step("cancel", func() error { _, err := d.Cancel(ctx, job(n-5)); return err }) {
				return
			}
		case 9:
			if step("read", func() error { _, err := d.Job(ctx, job(n-8)); return err }) {
				return
			}
		}
		tr.done[trafficWorkers].Add(1)
	}
}

func (tr *traffic) work(w int, d linearize.Daemon) {
	ctx := context.Background()
	name := fmt.Sprintf("tw%d", w)
	var held []uint64
	lost := false // went without an answer: re-attach
	step := func(what string, f func() error) (ok, quit bool) { return tr.step(name, what, &lost, f) }
	report := func(lease uint64, outcome event.Outcome, next bool) (gs []api.Grant, ok, quit bool) {
		r := api.Report{Worker: name, Outcome: outcome.String()}
		if next {
			r.Next = &api.Next{Max: 1}
		}
		var a api.ReportReply
		ok, quit = step(fmt.Sprintf("report %d", lease), func() (err error) { a, err = d.Report(ctx, lease, r); return err })
		if ok && a.Next != nil {
			gs = a.Next.Leases
		}
		return gs, ok, quit
	}
	start := func(lease uint64) (ok, quit bool) {
		return step(fmt.Sprintf("start %d", lease), func() error { _, err := d.Start(ctx, name, lease); return err })
	}
	for ; !tr.halted(); tr.done[w].Add(1) {
		if lost { // re-attach: the leases the daemon says it holds, started
			lost = false
			var gs []api.Grant
			ok, quit := step("re-attach", func() (err error) { gs, err = d.WorkerLeases(ctx, name); return err })
			if quit {
				return
			}
			if !ok {
				continue
			}
			was := held
			held = held[:0:0]
			for _, g := range gs {
				if !slices.Contains(was, g.Lease) {
					if ok, quit := start(g.Lease); quit {
						return
					} else if !ok {
						continue
					}
				}
				held = append(held, g.Lease)
			}
		}
		var gs []api.Grant
		var ok, quit bool
		if w == 0 && len(held) > 1 {
			gs, ok, quit = report(held[0], event.OutcomeSucceeded, true)
			held = held[1:]
		} else {
			ok, quit = step("acquire", func() (err error) { gs, err = d.Acquire(ctx, name, 1, 0); return err })
		}
		if quit {
			return
		}
		if !ok {
			continue
		}
		for _, g := range gs {
			if ok, quit := start(g.Lease); quit {
				return
			} else if ok {
				held = append(held, g.Lease)
			}
		}
		if len(held) == 0 {
			continue
		}
		var hb api.HeartbeatReply
		if ok, quit := step("heartbeat", func() (err error) { hb, err = d.Heartbeat(ctx, name, held); return err }); quit {
			return
		} else if !ok {
			continue
		}
		held = held[:0]
		for _, l := range hb.Leases {
			switch l.Directive {
			case api.DirectiveContinue:
				held = append(held, l.Lease)
			case api.DirectiveCancel, api.DirectiveKill:
				if _, _, quit := report(l.Lease, event.OutcomeCancelled, false); quit {
					return
				}
			}
		}
		if w != 0 && len(held) > 1 {
			if _, _, quit := report(held[0], event.OutcomeSucceeded, false); quit {
				return
			}
			held = held[1:]
		}
	}
}
