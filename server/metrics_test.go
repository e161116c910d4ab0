package server_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/server"
)

// busy puts f's service mid-scenario: three leases expired (a stale report
// kept for one), one acquired, one running.
func (f *fixture) busy() {
	f.t.Helper()
	for _, id := range []string{"r1", "r2"} {
		f.submit(id, event.KindRun)
	}
	f.submit("e1", event.KindEvaluation)
	gs, err := f.svc.Acquire(context.Background(), "w1", 3)
	f.must(err)
	f.submit("q1", event.KindRun)
	_, err = f.svc.Start(context.Background(), "w1", gs[0].Lease)
	f.must(err)
	f.expireAll() // r1, r2 fail; e1 goes back to the queue, behind q1
	r := f.do("POST", fmt.Sprintf("/v1/leases/%d/report", gs[0].Lease), w1Tok, api.Report{Worker: "w1", Outcome: "succeeded"})
	wantError(f.t, r, http.StatusConflict, api.CodeStaleLease)
	gs, err = f.svc.Acquire(context.Background(), "w2", 2)
	f.must(err)
	_, err = f.svc.Start(context.Background(), "w2", gs[0].Lease)
	f.must(err)
}

func TestMetrics(t *testing.T) {
	f := newFixture(t, server.Options{Auth: testAuth()})
	f.busy()
	f.do("POST", "/v1/jobs", adminTok, api.Submit{ID: "n1", Kind: "run"})
	f.do("GET", "/v1/jobs/nope", adminTok, nil)
	f.srv.SyncObserver()(3 * time.Millisecond)

	r := f.do("GET", "/metrics", auditorTok, nil)
	if r.status != http.StatusOK || !strings.HasPrefix(r.header.Get("Content-Type"), "text/plain") {
		t.Fatalf("metrics: %d %s", r.status, r.header.Get("Content-Type"))
	}
	text := string(r.body)
	for _, want := range []string{
		"leaselog_up 1",
		`leaselog_leases{state="acquired"} 1`,
		`leaselog_leases{state="running"} 1`,
		`leaselog_jobs{state="failed"} 2`,
		`leaselog_jobs{state="queued"} 1`,
		`leaselog_jobs{state="running"} 1`,
		`leaselog_jobs{state="cancelled"} 0`,
		`leaselog_jobs_reported_total{outcome="succeeded"} 0`,
		`leaselog_jobs_reported_total{outcome="killed"} 0`,
		`leaselog_events_total{type="lease.expired"} 3`,
		`leaselog_events_total{type="lease.stale_report"} 1`,
		`leaselog_events_total{type="lease.queued"} 6`,
		fmt.Sprintf("leaselog_log_seq %d", f.log.DurableSeq()),
		`leaselog_workers{state="unreachable"} 1`,
		`leaselog_http_requests_total{route="POST /v1/jobs",status="201"} 1`,
		`leaselog_http_requests_total{route="GET /v1/jobs/{id}",status="404"} 1`,
		`leaselog_http_requests_total{route="POST /v1/leases/{lease}/report",status="409"} 1`,
		`leaselog_http_request_duration_seconds_count{route="POST /v1/jobs",status="201"} 1`,
		`leaselog_fsync_seconds_bucket{le="0.0032"} 1`,
		"leaselog_fsync_seconds_count 1",
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("metrics lack %q", want)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", grep(text, "leaselog_"))
	}
	// The metrics live on the registry the server was given.
	if n := series(t, f.reg, "leaselog_events_total") + series(t, f.reg, "leaselog_http_requests_total"); n == 0 {
		t.Fatalf("registry: %d series", n)
	}
	// Unmatched paths count under one label, not one per path.
	f.do("GET", "/no/such/path", adminTok, nil)
	f.do("GET", "/another/one", adminTok, nil)
	if got := counter(t, f.reg, "leaselog_http_requests_total", "unmatched", "404"); got != 2 {
		t.Fatalf("unmatched 404s: %v", got)
	}
}

func grep(text, prefix string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// series counts the series of metric name in reg.
func series(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

// counter returns the value of one series of a counter vector in reg, by its
// label values in order.
func counter(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var vals []string
			for _, lp := range m.GetLabel() {
				vals = append(vals, lp.GetValue())
			}
			if fmt.Sprint(vals) == fmt.Sprint(labels) {
				return m.GetCounter().GetValue()
			}
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return 0
}

// TestMetricsSurviveRestart: the event counts are a fold of the log, so a
// restarted daemon reports the same.
func TestMetricsSurviveRestart(t *testing.T) {
	fs := vfs.NewMem()
	clock := clocktest.New(clocktest.Epoch)
	open := func() (*eventlog.Log, *lease.Service) {
		return leasetest.Open(t, leasetest.FS(fs), leasetest.Clock(clock))
	}
	scrape := func(svc *lease.Service) string {
		h := server.New(svc, server.Options{Registerer: prometheus.NewRegistry()})
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		return grep(rec.Body.String(), "leaselog_events_total") + "\n" + grep(rec.Body.String(), "leaselog_jobs_reported_total")
	}

	log, svc := open()
	ctx := context.Background()
	for _, id := range []string{"a", "b"} {
		if _, _, err := svc.Submit(ctx, id, event.KindRun, nil); err != nil {
			t.Fatal(err)
		}
	}
	gs, err := svc.Acquire(ctx, "w1", 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range []event.Outcome{event.OutcomeFailed, event.OutcomeKilled} {
		if _, err := svc.Report(ctx, "w1", gs[i].Lease, lease.Report{Outcome: o}); err != nil {
			t.Fatal(err)
		}
	}
	before := scrape(svc)
	if err := svc.Close(); err != nil {
		t.Fatal(err)
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}

	log, svc = open()
	defer log.Close()
	after := scrape(svc)
	// One more daemon.started; every other count as it was: the reports by
	// outcome too, which the restart neither resets nor counts twice.
	want := strings.Replace(before, `{type="daemon.started"} 1`, `{type="daemon.started"} 2`, 1)
	if after != want || !strings.Contains(before, `{type="lease.acquired"} 2`) ||
		!strings.Contains(before, `leaselog_jobs_reported_total{outcome="failed"} 1`) || !strings.Contains(before, `leaselog_jobs_reported_total{outcome="killed"} 1`) ||
		!strings.Contains(before, `leaselog_jobs_reported_total{outcome="succeeded"} 0`) {
		t.Fatalf("after restart:\n%s\nbefore:\n%s", after, before)
	}
}

func TestMetricsMadeBeforehand(t *testing.T) {
	// The daemon makes its metrics before it opens the log, to hand the log
	// the fsync observer; the server then takes them as they are.
	reg := prometheus.NewRegistry()
	m := server.NewMetrics(reg)
	f := newFixture(t, server.Options{Metrics: m})
	m.ObserveCommit(time.Millisecond)
	f.srv.SyncObserver()(time.Millisecond)
	f.do("GET", "/healthz", "", nil)
	text := string(f.do("GET", "/metrics", "", nil).body)
	for _, want := range []string{"leaselog_fsync_seconds_count 2\n", `leaselog_http_requests_total{route="GET /healthz",status="200"} 1` + "\n", "leaselog_up 1\n"} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if n := series(t, f.reg, "leaselog_up"); n != 0 {
		t.Fatalf("the fixture's own registry was used: %d series", n)
	}
}
