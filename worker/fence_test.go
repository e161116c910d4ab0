package worker

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
)

// holdingDaemon holds its first acquire for hold on the worker's clock, as
// a long poll waits for a job, then grants one lease, saying how long it
// held the request when say is set.
type holdingDaemon struct {
	*fakeDaemon
	clock *clocktest.Clock
	hold  time.Duration
	say   bool
	once  sync.Once
	sent  chan time.Time // the worker's clock when the held acquire arrived
}

func (d *holdingDaemon) Acquire(ctx context.Context, worker string, max int, wait time.Duration) ([]api.Grant, error) {
	var gs []api.Grant
	d.once.Do(func() {
		d.sent <- d.clock.Now()
		d.clock.Advance(d.hold)
		g := grant(3, "first")
		if d.say {
			g.HeldSeconds = d.hold.Seconds()
		}
		gs = []api.Grant{g}
	})
	if gs != nil {
		return gs, nil
	}
	return d.fakeDaemon.Acquire(ctx, worker, max, wait)
}

// TestIdleWorkerTakesItsFirstJob: an idle worker's long poll is granted a
// job after longer than the fence (here 1s; the fence is 0.26s). The grant
// counts from when the daemon granted it — the poll's send time plus
// held_seconds — so the job starts, and its supervisor's first deadline is
// that plus toleration − 2×renew, to the nanosecond. A grant that does not
// say how long it was held counts from the send time, and is refused.
func TestIdleWorkerTakesItsFirstJob(t *testing.T) {
	const hold = time.Second
	fence := ConfigOf(daemonTiming).SelfFence()
	if hold <= fence {
		t.Fatalf("hold %v must exceed the fence %v", hold, fence)
	}
	for _, say := range []bool{true, false} {
		t.Run(map[bool]string{true: "held_seconds", false: "no held_seconds"}[say], func(t *testing.T) {
			clock := clocktest.New(clocktest.Epoch)
			d := &holdingDaemon{fakeDaemon: newFakeDaemon(), clock: clock, hold: hold, say: say, sent: make(chan time.Time, 1)}
			e := newFakeExecutor()
			newTestWorker(t, d, e, clock.Now)
			sent := receive(t, d.sent, "the long poll")
			if !say {
				rep := receive(t, d.reports, "the refused grant's report")
				if rep.Outcome != "lost" || rep.Reason != TooLate().Reason {
					t.Fatalf("report %+v, want lost: %s", rep, TooLate().Reason)
				}
				select {
				case <-e.started:
					t.Fatal("a grant past its fence was started")
				default:
				}
				return
			}
			run := receive(t, e.started, "the first job to start")
			if got, want := receive(t, run.fenced, "the first deadline"), sent.Add(hold+fence); !got.Equal(want) {
				t.Fatalf("first deadline %v after the poll was sent, want %v", got.Sub(sent), hold+fence)
			}
			run.finish(Outcome{Outcome: "succeeded"})
			if rep := receive(t, d.reports, "report"); rep.Outcome != "succeeded" {
				t.Fatalf("report %+v", rep)
			}
		})
	}
}

// TestDeadlinesFollowHeartbeats: each acknowledged heartbeat that renews a
// lease gives its run's supervisor the deadline its send time + toleration
// − 2×renew.
func TestDeadlinesFollowHeartbeats(t *testing.T) {
	clock := clocktest.New(clocktest.Epoch)
	d, e := newFakeDaemon(), newFakeExecutor()
	d.queue = []api.Grant{grant(3, "j1")}
	start := clock.Now()
	newTestWorker(t, d, e, clock.Now)
	run := receive(t, e.started, "start")
	fence := ConfigOf(daemonTiming).SelfFence()
	if got := receive(t, run.fenced, "the first deadline"); !got.Equal(start.Add(fence)) {
		t.Fatalf("first deadline %v after the grant, want %v", got.Sub(start), fence)
	}
	for i := 1; i <= 3; i++ {
		clock.Advance(ConfigOf(daemonTiming).Renew) // the next heartbeat is due
		want := start.Add(time.Duration(i)*ConfigOf(daemonTiming).Renew + fence)
		for {
			got := receive(t, run.fenced, fmt.Sprintf("the deadline of heartbeat %d", i))
			if got.Equal(want) {
				break
			}
			if got.After(want) {
				t.Fatalf("deadline %v, past the %v of the heartbeat sent last", got.Sub(start), want.Sub(start))
			}
		}
	}
}

// TestRefusedReportIsSentAgain: the worker never forgets a lease because a
// report came back 4xx about its content: it sends it again, with less the
// daemon could object to each time. Only a lease that is not its (403, 404)
// or a stale report end it.
func TestRefusedReportIsSentAgain(t *testing.T) {
	bad := &api.Error{Status: http.StatusBadRequest, Code: api.CodeBadRequest, Message: "reason: too long"}
	forbidden := &api.Error{Status: http.StatusForbidden, Code: api.CodeForbidden, Message: "lease 3 is not worker \"w1\"'s"}
	unauth := &api.Error{Status: http.StatusUnauthorized, Code: api.CodeUnauthorized, Message: "token"}
	full := Outcome{Outcome: "succeeded", Ref: "refs/leaselog/j1/3", Reason: "", Result: json.RawMessage(`{"score":1}`)}
	for _, tc := range []struct {
		name     string
		errs     []error
		sent     []string // the outcome of each report sent, and whether it carried a result
		accepted bool     // the last one was
	}{
		{name: "400: sent without result and ref", errs: []error{bad}, sent: []string{"succeeded+result", "succeeded"}, accepted: true},
		{name: "400 twice: sent as lost", errs: []error{bad, bad}, sent: []string{"succeeded+result", "succeeded", "lost"}, accepted: true},
		{name: "400 thrice: left to expire", errs: []error{bad, bad, bad}, sent: []string{"succeeded+result", "succeeded", "lost"}},
		{name: "401: sent again as it was", errs: []error{unauth}, sent: []string{"succeeded+result", "succeeded+result"}, accepted: true},
		{name: "403: not its lease", errs: []error{forbidden}, sent: []string{"succeeded+result"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, e := newFakeDaemon(), newFakeExecutor()
			d.queue = []api.Grant{grant(3, "j1")}
			d.reportErr = tc.errs
			w, _, _ := newTestWorker(t, d, e, nil)
			receive(t, e.started, "start").finish(full)
			if tc.accepted {
				receive(t, d.reports, "the accepted report")
			}
			// A lease is forgotten only once its report is over: then it is
			// the sent reports' final list.
			deadline := time.Now().Add(10 * time.Second)
			for len(w.Leases()) > 0 {
				if time.Now().After(deadline) {
					t.Fatalf("lease still held: %v", w.Leases())
				}
				time.Sleep(time.Millisecond)
			}
			d.mu.Lock()
			defer d.mu.Unlock()
			var sent []string
			for _, r := range d.tried {
				s := r.Outcome
				if r.Result != nil {
					s += "+result"
				}
				sent = append(sent, s)
				if r.Result == nil && r.Ref != "" {
					t.Errorf("a report sent again kept its ref: %+v", r)
				}
			}
			if !slices.Equal(sent, tc.sent) {
				t.Fatalf("reports sent %v, want %v", sent, tc.sent)
			}
			for i, r := range d.tried[1:] {
				if tc.errs[i] == error(bad) && r.Reason == "" {
					t.Fatalf("report %d, sent again after a 400, does not say why: %+v", i+2, r)
				}
			}
		})
	}
}
