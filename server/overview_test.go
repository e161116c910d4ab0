package server_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/server"
)

// TestListJobsNewestAndPrefix: order=newest lists the jobs by submission,
// the newest first, once each (a requeue is no submission), a page at a
// time with the filters; prefix= selects ids that start with it, in either
// order, ended jobs (the archive's) included.
func TestListJobsNewestAndPrefix(t *testing.T) {
	f := newFixture(t, server.Options{})
	f.submit("run-b", event.KindRun)
	f.submit("eval-a", event.KindEvaluation)
	f.submit("run-a", event.KindRun)
	// run-b reported (ended: the archive's), then eval-a lost and queued
	// again: a lease.queued that is no submission.
	l := f.grant("w1")
	f.do("POST", fmt.Sprintf("/v1/leases/%d/report", l), "", api.Report{Worker: "w1", Outcome: "succeeded"})
	f.grant("w1")
	f.expireAll()
	f.submit("run-c", event.KindRun)

	ids := func(js api.Jobs) string {
		var out []string
		for _, j := range js.Jobs {
			out = append(out, j.ID)
		}
		return fmt.Sprint(out)
	}
	for _, tc := range []struct{ query, want string }{
		{"?order=newest", "[run-c run-a eval-a run-b]"},
		{"?order=newest&kind=run", "[run-c run-a run-b]"},
		{"?order=newest&state=queued", "[run-c run-a eval-a]"},
		{"?order=newest&state=reported", "[run-b]"},
		{"?order=newest&prefix=run-", "[run-c run-a run-b]"},
		{"?prefix=run-", "[run-a run-b run-c]"},
		{"?prefix=run-b", "[run-b]"},
		{"?prefix=eval&order=id", "[eval-a]"},
		{"?prefix=zzz", "[]"},
	} {
		if got := ids(decode[api.Jobs](t, f.do("GET", "/v1/jobs"+tc.query, "", nil), http.StatusOK)); got != tc.want {
			t.Errorf("jobs%s: %s, want %s", tc.query, got, tc.want)
		}
	}

	// Pages of one: each job once, newest first, and no next on the last.
	var seen []string
	after := ""
	for range 10 {
		p := decode[api.Jobs](t, f.do("GET", "/v1/jobs?order=newest&limit=1&after="+after, "", nil), http.StatusOK)
		seen = append(seen, ids(p))
		if after = p.Next; after == "" {
			break
		}
	}
	if got := fmt.Sprint(seen); got != "[[run-c] [run-a] [eval-a] [run-b]]" {
		t.Errorf("pages of one: %s", got)
	}

	wantError(t, f.do("GET", "/v1/jobs?order=oldest", "", nil), http.StatusBadRequest, api.CodeBadRequest, "order")
	wantError(t, f.do("GET", "/v1/jobs?order=newest&after=x", "", nil), http.StatusBadRequest, api.CodeBadRequest, "after")
	wantError(t, f.do("GET", "/v1/jobs?prefix=a%20b", "", nil), http.StatusBadRequest, api.CodeBadRequest, "prefix")
}

// TestOverview: the daemon at a glance — counts by state and outcome, the
// queue's head, the workers, the minute's reports and expiries, the latest
// failures and stale reports.
func TestOverview(t *testing.T) {
	f := newFixture(t, server.Options{})
	f.submit("bad", event.KindRun)
	f.submit("good", event.KindRun)
	f.submit("lost", event.KindRun)
	lb, lg, ll := f.grant("w1"), f.grant("w1"), f.grant("w2")
	f.do("POST", fmt.Sprintf("/v1/leases/%d/report", lb), "", api.Report{Worker: "w1", Outcome: "failed"})
	f.do("POST", fmt.Sprintf("/v1/leases/%d/report", lg), "", api.Report{Worker: "w1", Outcome: "succeeded"})
	f.expireAll() // w2 is silent: lost's lease expires
	f.do("POST", fmt.Sprintf("/v1/leases/%d/report", ll), "", api.Report{Worker: "w2", Outcome: "succeeded"})
	queuedAt := f.clock.Now()
	f.submit("waiting", event.KindRun)
	f.clock.Advance(3 * time.Second)
	f.submit("later", event.KindRun)

	o := decode[api.Overview](t, f.do("GET", "/v1/overview", "", nil), http.StatusOK)
	if o.Jobs["queued"] != 2 || o.Jobs["reported"] != 2 || o.Jobs["failed"] != 1 || o.Reported["failed"] != 1 || o.Reported["succeeded"] != 1 {
		t.Errorf("counts: jobs %v, reported %v", o.Jobs, o.Reported)
	}
	if o.Queue.Depth != 2 || o.Queue.Job != "waiting" || o.Queue.Oldest == nil || !o.Queue.Oldest.Equal(queuedAt) {
		t.Errorf("queue %+v, want 2 deep, its head waiting, queued at %s", o.Queue, queuedAt)
	}
	if o.Workers.Reachable != 1 || o.Workers.Unreachable != 1 {
		t.Errorf("workers %+v, want w1 reachable, w2 not", o.Workers)
	}
	if !o.Time.Equal(f.clock.Now()) || o.Seq != f.seq() {
		t.Errorf("time %s seq %d, want %s and %d", o.Time, o.Seq, f.clock.Now(), f.seq())
	}
	// Every event fell within the last two minutes; none before.
	sum := func(xs []*int) (n int, unknown int) {
		for _, x := range xs {
			if x == nil {
				unknown++
			} else {
				n += *x
			}
		}
		return n, unknown
	}
	if n, u := sum(o.Minutes.Reported); n != 2 || u != 0 || len(o.Minutes.Reported) != 60 {
		t.Errorf("reports by minute %v: want 2 in all, none unknown, 60 minutes", o.Minutes.Reported)
	}
	if n, _ := sum(o.Minutes.Expired); n != 1 {
		t.Errorf("expiries by minute: %d, want 1", n)
	}
	if end := o.Minutes.Start.Add(time.Hour); !o.Time.Before(end) || o.Time.Before(end.Add(-time.Minute)) {
		t.Errorf("minutes from %s: want the last to hold %s", o.Minutes.Start, o.Time)
	}
	if len(o.Failures) != 2 || o.Failures[0].Job != "lost" || o.Failures[0].Type != "lease.expired" ||
		o.Failures[1].Job != "bad" || o.Failures[1].Outcome != "failed" {
		t.Errorf("failures %+v: want lost's expiry, then bad's report", o.Failures)
	}
	if !o.Admin {
		t.Errorf("admin false on a daemon that takes no token")
	}
	if len(o.Stale) != 1 || o.Stale[0].Job != "lost" || o.Stale[0].Worker != "w2" {
		t.Errorf("stale reports %+v: want w2's for lost", o.Stale)
	}
}

// TestOverviewSaysWhetherTheCallerIsAdmin: the dashboard shows its actions
// by it.
func TestOverviewSaysWhetherTheCallerIsAdmin(t *testing.T) {
	f := newFixture(t, server.Options{Auth: testAuth()})
	for _, tc := range []struct {
		token string
		want  bool
	}{{adminTok, true}, {auditorTok, false}} {
		if o := decode[api.Overview](t, f.do("GET", "/v1/overview", tc.token, nil), http.StatusOK); o.Admin != tc.want {
			t.Errorf("admin %v for the %s token, want %v", o.Admin, map[bool]string{true: "admin", false: "auditor"}[tc.want], tc.want)
		}
	}
}
