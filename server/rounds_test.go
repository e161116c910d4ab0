package server_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/server"
)

// TestRoundsBadInputWritesNothing: the calls that save round trips refuse
// bad input as the others do — 400, a JSON error naming what is wrong, and
// nothing written — a batch over its limit included.
func TestRoundsBadInputWritesNothing(t *testing.T) {
	f := newFixture(t, server.Options{})
	f.submit("j1", event.KindRun)
	l := f.grant("w1")
	f.submit("q1", event.KindRun)
	report := fmt.Sprintf("/v1/leases/%d/report", l)
	var many strings.Builder
	many.WriteString(`{"jobs":[`)
	for i := range 1001 {
		if i > 0 {
			many.WriteByte(',')
		}
		fmt.Fprintf(&many, `{"id":"m%d","kind":"run"}`, i)
	}
	many.WriteString(`]}`)

	cases := []struct {
		name   string
		req    request
		saying string
	}{
		{"acquire start not bool", request{method: "POST", path: "/v1/workers/w2/acquire", body: `{"start":"yes"}`}, `"start"`},
		{"acquire start max too big", request{method: "POST", path: "/v1/workers/w2/acquire", body: `{"max":101,"start":true}`}, "max"},
		{"acquire start bad worker", request{method: "POST", path: "/v1/workers/a%20b/acquire", body: `{"start":true}`}, "worker id"},

		{"next not object", request{method: "POST", path: report, body: `{"worker":"w1","outcome":"succeeded","next":1}`}, `"next"`},
		{"next max too big", request{method: "POST", path: report, body: `{"worker":"w1","outcome":"succeeded","next":{"max":101}}`}, "next: max must be 1 to 100"},
		{"next max negative", request{method: "POST", path: report, body: `{"worker":"w1","outcome":"succeeded","next":{"max":-1}}`}, "next: max"},
		{"next unknown field", request{method: "POST", path: report, body: `{"worker":"w1","outcome":"succeeded","next":{"wait_seconds":5}}`}, `unknown field "wait_seconds"`},
		{"next with bad outcome", request{method: "POST", path: report, body: `{"worker":"w1","outcome":"ok","next":{}}`}, `outcome "ok"`},
		{"next key twice", request{method: "POST", path: report, body: `{"worker":"w1","outcome":"failed","next":{"max":1,"max":2}}`}, `key "max" given twice in next`},

		{"batch empty body", request{method: "POST", path: "/v1/jobs/batch", body: ``}, "missing body"},
		{"batch no jobs", request{method: "POST", path: "/v1/jobs/batch", body: `{}`}, "1 to 1000 jobs, this one 0"},
		{"batch empty jobs", request{method: "POST", path: "/v1/jobs/batch", body: `{"jobs":[]}`}, "1 to 1000 jobs, this one 0"},
		{"batch too many", request{method: "POST", path: "/v1/jobs/batch", body: many.String()}, "1 to 1000 jobs, this one 1001"},
		{"batch not array", request{method: "POST", path: "/v1/jobs/batch", body: `{"jobs":{"id":"x"}}`}, `"jobs"`},
		{"batch item unknown field", request{method: "POST", path: "/v1/jobs/batch", body: `{"jobs":[{"id":"x","kind":"run","prio":1}]}`}, `unknown field "prio"`},
		{"batch item id not string", request{method: "POST", path: "/v1/jobs/batch", body: `{"jobs":[{"id":7,"kind":"run"}]}`}, `"jobs.id"`},
		{"batch query", request{method: "POST", path: "/v1/jobs/batch?dry=1", body: `{"jobs":[{"id":"x","kind":"run"}]}`}, `"dry"`},
		{"batch key twice", request{method: "POST", path: "/v1/jobs/batch", body: `{"jobs":[{"id":"x","kind":"run","id":"y"}]}`}, `key "id" given twice in jobs[]`},
	}
	seq, last := f.seq(), f.log.LastSeq()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := f.send(tc.req)
			wantError(t, r, http.StatusBadRequest, api.CodeBadRequest, tc.saying)
			if f.seq() != seq || f.log.LastSeq() != last {
				t.Fatalf("the refusal wrote: seq %d, staged %d; was %d, %d", f.seq(), f.log.LastSeq(), seq, last)
			}
		})
	}
}

// TestRoundsThroughTheClient drives the three calls through the Go client:
// an acquire that starts, a report that takes the next job, a batch with a
// bad item refused alone; and the combined calls are refused as the
// separate ones would be.
func TestRoundsThroughTheClient(t *testing.T) {
	f := newFixture(t, server.Options{})
	c, err := api.NewClient(f.ts.URL, "")
	f.must(err)
	ctx := context.Background()

	res, err := c.SubmitBatch(ctx, []api.Submit{{ID: "r1", Kind: "run"}, {ID: "r2", Kind: "run"}, {ID: "bad/id", Kind: "run"},
		{ID: "r1", Kind: "evaluation"}, {ID: "r3", Kind: "nope"}})
	f.must(err)
	for i, want := range []struct {
		status int
		code   string
	}{{201, ""}, {201, ""}, {400, api.CodeBadRequest}, {409, api.CodeJobExists}, {400, api.CodeBadRequest}} {
		got := res[i]
		if got.Status != want.status || (want.code == "") != (got.Job != nil) || (want.code != "" && (got.Error == nil || got.Error.Code != want.code)) {
			t.Errorf("item %d: %+v, want status %d code %q", i, got, want.status, want.code)
		}
	}
	if js, err := c.Jobs(ctx, "", ""); err != nil || len(js) != 2 {
		t.Fatalf("jobs after the batch: %d (%v), want the 2 good ones only", len(js), err)
	}

	gs, err := c.AcquireStart(ctx, "w1", 1, 0)
	f.must(err)
	if len(gs) != 1 || gs[0].Job.ID != "r1" || gs[0].Job.Lease == nil || gs[0].Job.Lease.State != "running" {
		t.Fatalf("acquire with start: %+v", gs)
	}
	// Another worker's report with next is refused as its report is, and
	// takes nothing.
	before := f.log.LastSeq()
	if _, err := c.ReportNext(ctx, gs[0].Lease, api.Report{Worker: "w2", Outcome: "succeeded"}, api.Next{Max: 1}); !api.IsCode(err, api.CodeForbidden) || f.log.LastSeq() != before {
		t.Fatalf("someone else's report with next: %v, wrote %d events", err, f.log.LastSeq()-before)
	}
	rr, err := c.ReportNext(ctx, gs[0].Lease, api.Report{Worker: "w1", Outcome: "succeeded"}, api.Next{Max: 2, Start: true})
	f.must(err)
	if rr.Next == nil || len(rr.Next.Leases) != 1 || rr.Next.Leases[0].Job.ID != "r2" || rr.Next.Leases[0].Job.State != "running" {
		t.Fatalf("report with next: %+v", rr)
	}
	// Expired: the report is stale, kept, and takes nothing.
	f.submit("r4", event.KindRun)
	f.expireAll()
	before = f.log.LastSeq()
	_, err = c.ReportNext(ctx, rr.Next.Leases[0].Lease, api.Report{Worker: "w1", Outcome: "succeeded"}, api.Next{Max: 1})
	var ae *api.Error
	if !api.IsCode(err, api.CodeStaleLease) || !errors.As(err, &ae) || ae.StaleReportSeq != before+1 || f.log.LastSeq() != before+1 {
		t.Fatalf("stale report with next: %v; wrote %d events, want the stale report only", err, f.log.LastSeq()-before)
	}
	if j, err := c.Job(ctx, "r4"); err != nil || j.State != "queued" {
		t.Fatalf("r4 after a stale report with next: %+v %v", j, err)
	}
}
