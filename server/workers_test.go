package server_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/ops"
	"github.com/leaselog/leaselog/server"
)

func TestAcquireGrantsCarryJobAndTiming(t *testing.T) {
	f := newFixture(t, server.Options{})
	f.submit("j1", event.KindRun)
	f.submit("j2", event.KindEvaluation)
	g := decode[api.Grants](t, f.do("POST", "/v1/workers/w1/acquire", "", `{"max":5}`), http.StatusOK)
	if len(g.Leases) != 2 {
		t.Fatalf("%d grants, want 2: %+v", len(g.Leases), g)
	}
	want := ops.TimingOf(leasetest.Timing())
	for i, gr := range g.Leases {
		if gr.Timing != want {
			t.Errorf("grant %d timing %+v, want %+v", i, gr.Timing, want)
		}
		if gr.Job.Lease == nil || gr.Job.Lease.Lease != gr.Lease || gr.Job.Lease.Worker != "w1" || gr.Job.State != "acquired" {
			t.Errorf("grant %d job %+v does not carry its live lease", i, gr.Job)
		}
	}
	if g.Leases[0].Job.ID != "j1" || g.Leases[1].Job.ID != "j2" || string(g.Leases[0].Job.Spec) != `{"run":"true"}` {
		t.Fatalf("grants %+v, want j1 then j2 with their specs", g)
	}

	// The same grants, for re-attaching.
	again := decode[api.Grants](t, f.do("GET", "/v1/workers/w1/leases", "", nil), http.StatusOK)
	if len(again.Leases) != 2 || again.Leases[0].Lease != g.Leases[0].Lease || again.Leases[1].Timing != want {
		t.Fatalf("worker leases %+v, want the two grants", again)
	}
	if r := f.do("GET", "/v1/workers/w2/leases", "", nil); !bytes.Equal(r.body, []byte(`{"leases":[]}`+"\n")) {
		t.Fatalf("leases of a worker with none: %s", r.body)
	}
}

// TestAcquireAtOnceHeldNoTime: a grant made at once was held no time at
// all — no held_seconds (docs/openapi.yaml), on the daemon's real clock too,
// as the local worker is told in process — whatever the call's commit took.
func TestAcquireAtOnceHeldNoTime(t *testing.T) {
	f := newFixture(t, server.Options{Clock: lease.BoottimeClock()})
	f.submit("j1", event.KindRun)
	r := f.do("POST", "/v1/workers/w1/acquire", "", api.Acquire{WaitSeconds: 30})
	if g := decode[api.Grants](t, r, http.StatusOK); len(g.Leases) != 1 || bytes.Contains(r.body, []byte("held_seconds")) {
		t.Fatalf("a grant at once: %s, want one without held_seconds", r.body)
	}
}

// TestAcquireWaitsForASubmit holds an acquire in its long-poll, submits a job
// while it waits, and gets the lease from the waiting call.
func TestAcquireWaitsForASubmit(t *testing.T) {
	waiting := make(chan struct{})
	var once sync.Once
	f := newFixtureHooked(t, server.Options{}, func(s *server.Server) {
		server.SetWaitHook(s, func(ctx context.Context) context.Context {
			return &waitSpy{Context: ctx, waiting: func() { once.Do(func() { close(waiting) }) }}
		})
	})
	got := make(chan reply, 1)
	go func() {
		got <- f.send(request{method: "POST", path: "/v1/workers/w1/acquire", body: `{"wait_seconds":30}`})
	}()
	<-waiting // the service found nothing and is waiting on the context
	select {
	case r := <-got:
		t.Fatalf("acquire answered before any job was queued: %s", r)
	default:
	}
	f.submit("j1", event.KindRun)
	r := <-got
	g := decode[api.Grants](t, r, http.StatusOK)
	if len(g.Leases) != 1 || g.Leases[0].Job.ID != "j1" || g.Leases[0].Job.Lease == nil {
		t.Fatalf("grants %+v, want j1's lease", g)
	}
}

// TestLongPollWokenOverBothTransports: over HTTP and in a session alike, a
// long poll that waits is answered by the submit that queues a job, with
// its lease, and the worker then heartbeats and reports it on the same
// transport.
func TestLongPollWokenOverBothTransports(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			waiting := make(chan struct{}, 1)
			f := newFixtureHooked(t, server.Options{}, func(s *server.Server) {
				server.SetWaitHook(s, func(ctx context.Context) context.Context {
					select {
					case waiting <- struct{}{}:
					default: // told once is enough
					}
					return ctx
				})
			})
			ctx := context.Background()
			c, err := api.NewClient(f.ts.URL, "", tr.opts...)
			f.must(err)
			type acquired struct {
				gs  []api.Grant
				err error
			}
			got := make(chan acquired, 1)
			go func() {
				gs, err := c.Acquire(ctx, "w1", 1, 30*time.Second)
				got <- acquired{gs, err}
			}()
			<-waiting // the service found nothing and waits
			select {
			case a := <-got:
				t.Fatalf("acquire answered before any job was queued: %v %v", a.gs, a.err)
			default:
			}
			f.submit("j1", event.KindRun)
			a := <-got
			if a.err != nil || len(a.gs) != 1 || a.gs[0].Job.ID != "j1" {
				t.Fatalf("acquire: %v %v, want j1's lease", a.gs, a.err)
			}
			if _, err := c.Heartbeat(ctx, "w1", []uint64{a.gs[0].Lease}); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Report(ctx, a.gs[0].Lease, api.Report{Worker: "w1", Outcome: "succeeded"}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// waitSpy tells when the service starts waiting on it: the service asks
// for Done only once it found nothing to take.
type waitSpy struct {
	context.Context
	waiting func()
}

func (c *waitSpy) Done() <-chan struct{} {
	c.waiting()
	return c.Context.Done()
}

func TestAcquireEmptyWaitIsEmptyList(t *testing.T) {
	f := newFixture(t, server.Options{})
	for _, body := range []string{`{"wait_seconds":0.05}`, `{}`, ``} {
		r := f.do("POST", "/v1/workers/w1/acquire", "", body)
		if r.status != http.StatusOK || string(r.body) != `{"leases":[]}`+"\n" {
			t.Fatalf("acquire %s: %s, want {\"leases\":[]}", body, r)
		}
	}
}

func TestAcquireWaitIsCapped(t *testing.T) {
	// MaxWait caps what a client asks for: a day's wait_seconds ends when
	// the cap does.
	f := newFixture(t, server.Options{MaxWait: 50 * time.Millisecond})
	r := f.do("POST", "/v1/workers/w1/acquire", "", `{"wait_seconds":86400}`)
	if r.status != http.StatusOK || string(r.body) != `{"leases":[]}`+"\n" {
		t.Fatalf("capped acquire: %s", r)
	}
}

func TestCloseEndsLongPolls(t *testing.T) {
	waiting := make(chan struct{})
	var once sync.Once
	f := newFixtureHooked(t, server.Options{}, func(s *server.Server) {
		server.SetWaitHook(s, func(ctx context.Context) context.Context {
			return &waitSpy{Context: ctx, waiting: func() { once.Do(func() { close(waiting) }) }}
		})
	})
	got := make(chan reply, 1)
	go func() {
		got <- f.send(request{method: "POST", path: "/v1/workers/w1/acquire", body: `{"wait_seconds":60}`})
	}()
	<-waiting
	f.srv.Close()
	if r := <-got; r.status != http.StatusOK || string(r.body) != `{"leases":[]}`+"\n" {
		t.Fatalf("acquire after Close: %s", r)
	}
}

// TestWorkerCannotTouchAnothersLease: start and report of another worker's
// lease are refused with 403; a heartbeat naming it answers gone and
// records nothing.
func TestWorkerCannotTouchAnothersLease(t *testing.T) {
	f := newFixture(t, server.Options{})
	l := f.grantViaHTTP("w1", "j1")
	last := f.log.LastSeq()

	wantError(t, f.do("POST", fmt.Sprintf("/v1/leases/%d/start", l), "", api.Start{Worker: "w2"}),
		http.StatusForbidden, api.CodeForbidden, `"w2"`)
	wantError(t, f.do("POST", fmt.Sprintf("/v1/leases/%d/report", l), "", api.Report{Worker: "w2", Outcome: "succeeded"}),
		http.StatusForbidden, api.CodeForbidden, `"w2"`)
	hb := decode[api.HeartbeatReply](t, f.do("POST", "/v1/workers/w2/heartbeat", "", api.Heartbeat{Leases: []uint64{l}}), http.StatusOK)
	if len(hb.Leases) != 1 || hb.Leases[0].Lease != l || hb.Leases[0].Directive != api.DirectiveGone {
		t.Fatalf("heartbeat of another's lease: %+v, want gone", hb)
	}
	if hb.Timing != ops.TimingOf(leasetest.Timing()) {
		t.Fatalf("heartbeat timing %+v", hb.Timing)
	}
	if got := f.log.LastSeq(); got != last {
		t.Fatalf("log grew from %d to %d", last, got)
	}

	// The holder's own heartbeat is recorded and says continue.
	hb = decode[api.HeartbeatReply](t, f.do("POST", "/v1/workers/w1/heartbeat", "", api.Heartbeat{Leases: []uint64{l, 999}}), http.StatusOK)
	if len(hb.Leases) != 2 || hb.Leases[0].Directive != api.DirectiveContinue || hb.Leases[1].Directive != api.DirectiveGone {
		t.Fatalf("own heartbeat: %+v", hb)
	}
	if got := f.log.LastSeq(); got != last+1 {
		t.Fatalf("own heartbeat: log at %d, want %d", got, last+1)
	}
	// An empty heartbeat has an empty list, not null.
	if r := f.do("POST", "/v1/workers/w1/heartbeat", "", `{"leases":[]}`); !bytes.Contains(r.body, []byte(`"leases":[]`)) {
		t.Fatalf("empty heartbeat: %s", r)
	}
}

func TestStartAndUnknownLease(t *testing.T) {
	f := newFixture(t, server.Options{})
	l := f.grantViaHTTP("w1", "j1")
	got := decode[api.Lease](t, f.do("POST", fmt.Sprintf("/v1/leases/%d/start", l), "", api.Start{Worker: "w1"}), http.StatusOK)
	if got.Lease != l || got.State != "running" || got.Job != "j1" || got.Worker != "w1" {
		t.Fatalf("started lease %+v", got)
	}
	wantError(t, f.do("POST", "/v1/leases/9999/start", "", api.Start{Worker: "w1"}), http.StatusNotFound, api.CodeNotFound, "9999")
	wantError(t, f.do("POST", "/v1/leases/9999/report", "", api.Report{Worker: "w1", Outcome: "failed"}), http.StatusNotFound, api.CodeNotFound, "9999")
}

// TestReports: the same report twice gets the same body byte for byte, and
// so does the worker's own report shortened after a refusal; a report on the
// reported lease that says otherwise (a late claim), like a report on an
// expired lease, is a 409 with stale_report_seq, the same again gets the same
// body, and the log keeps one lease.stale_report for each, with its ref.
func TestReports(t *testing.T) {
	f := newFixture(t, server.Options{})
	l := f.grantViaHTTP("w1", "j1")
	path := fmt.Sprintf("/v1/leases/%d/report", l)
	rep := api.Report{Worker: "w1", Outcome: "succeeded", Ref: "refs/leaselog/j1/1", Result: []byte(`{"score": 1}`)}

	first := f.do("POST", path, "", rep)
	rr := decode[api.ReportReply](t, first, http.StatusOK)
	if !rr.Accepted || rr.Job != "j1" || rr.Lease != l || rr.Seq == 0 {
		t.Fatalf("report reply %+v", rr)
	}
	last := f.log.LastSeq()
	second := f.do("POST", path, "", rep)
	if second.status != http.StatusOK || !bytes.Equal(first.body, second.body) {
		t.Fatalf("same report again: %s, first was %s", second, first)
	}
	shortened := api.Report{Worker: "w1", Outcome: "succeeded", Reason: "report refused (400 bad_request: x); sent again without result and ref"}
	if third := f.do("POST", path, "", shortened); third.status != http.StatusOK || !bytes.Equal(first.body, third.body) {
		t.Fatalf("the report shortened after a refusal: %s, first was %s", third, first)
	}
	if got := f.log.LastSeq(); got != last {
		t.Fatalf("repeated reports grew the log from %d to %d", last, got)
	}
	// A report that says otherwise is a late claim: stale, and kept.
	claim := api.Report{Worker: "w1", Outcome: "failed", Ref: "refs/leaselog/j1/claim"}
	claimed := f.do("POST", path, "", claim)
	eb := wantError(t, claimed, http.StatusConflict, api.CodeStaleLease, fmt.Sprintf("reported at seq %d", rr.Seq))
	if eb.StaleReportSeq != last+1 || f.log.LastSeq() != last+1 {
		t.Fatalf("stale_report_seq %d, log at %d; want the one event recorded, %d", eb.StaleReportSeq, f.log.LastSeq(), last+1)
	}
	if again := f.do("POST", path, "", claim); again.status != http.StatusConflict || !bytes.Equal(claimed.body, again.body) || f.log.LastSeq() != last+1 {
		t.Fatalf("the same late claim again: %s, first was %s; log at %d", again, claimed, f.log.LastSeq())
	}
	claims := decode[api.Events](t, f.do("GET", "/v1/events?type=lease.stale_report&job=j1", "", nil), http.StatusOK)
	if len(claims.Events) != 1 || claims.Events[0].Seq != eb.StaleReportSeq || claims.Events[0].Ref != claim.Ref || claims.Events[0].Outcome != "failed" {
		t.Fatalf("late claims in the log: %+v", claims)
	}
	j := decode[api.Job](t, f.do("GET", "/v1/jobs/j1", "", nil), http.StatusOK)
	if j.State != "reported" || j.Attempts != 1 || j.Outcome != "succeeded" || string(j.Result) != `{"score":1}` || j.Lease != nil {
		t.Fatalf("reported job %+v", j)
	}

	// A lease that expired: its report is stale.
	l2 := f.grantViaHTTP("w1", "j2")
	f.expireAll()
	path2 := fmt.Sprintf("/v1/leases/%d/report", l2)
	late := api.Report{Worker: "w1", Outcome: "succeeded", Ref: "refs/leaselog/j2/late"}
	stale := f.do("POST", path2, "", late)
	eb = wantError(t, stale, http.StatusConflict, api.CodeStaleLease, fmt.Sprint(l2))
	if eb.StaleReportSeq == 0 || eb.StaleReportSeq != f.log.LastSeq() {
		t.Fatalf("stale_report_seq %d, log at %d", eb.StaleReportSeq, f.log.LastSeq())
	}
	again := f.do("POST", path2, "", late)
	if again.status != http.StatusConflict || !bytes.Equal(stale.body, again.body) {
		t.Fatalf("same stale report again: %s, first was %s", again, stale)
	}
	evs := decode[api.Events](t, f.do("GET", "/v1/events?type=lease.stale_report&job=j2", "", nil), http.StatusOK)
	if len(evs.Events) != 1 || evs.Events[0].Seq != eb.StaleReportSeq || evs.Events[0].Ref != late.Ref || evs.Events[0].Lease != l2 {
		t.Fatalf("stale reports in the log: %+v", evs)
	}
	// A start on the expired lease is stale too, with no report to name.
	eb = wantError(t, f.do("POST", fmt.Sprintf("/v1/leases/%d/start", l2), "", api.Start{Worker: "w1"}), http.StatusConflict, api.CodeStaleLease)
	if eb.StaleReportSeq != 0 {
		t.Fatalf("stale start names a report: %+v", eb)
	}
}

func TestListLeases(t *testing.T) {
	f := newFixture(t, server.Options{})
	l1 := f.grantViaHTTP("w1", "j1")
	l2 := f.grantViaHTTP("w2", "j2")
	f.do("POST", fmt.Sprintf("/v1/leases/%d/start", l2), "", api.Start{Worker: "w2"})
	f.do("POST", fmt.Sprintf("/v1/leases/%d/report", l1), "", api.Report{Worker: "w1", Outcome: "failed"})

	ids := func(path string) []uint64 {
		t.Helper()
		var out []uint64
		for _, l := range decode[api.Leases](t, f.do("GET", path, "", nil), http.StatusOK).Leases {
			out = append(out, l.Lease)
		}
		return out
	}
	for _, tc := range []struct {
		path string
		want []uint64
	}{
		{"/v1/leases", []uint64{l2}},
		{"/v1/leases?state=reported", []uint64{l1}},
		{"/v1/leases?state=running&worker=w2&kind=run", []uint64{l2}},
		{"/v1/leases?worker=w1", nil},
		{"/v1/leases?kind=evaluation", nil},
	} {
		if got := ids(tc.path); fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%s: %v, want %v", tc.path, got, tc.want)
		}
	}
	if r := f.do("GET", "/v1/leases?kind=evaluation", "", nil); string(r.body) != `{"leases":[]}`+"\n" {
		t.Fatalf("no leases: %s", r.body)
	}
}
