package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/server"
)

// TestReportLost: a worker's report that it lost a job is accepted and
// recorded as lease.lost, folded like an expiry: the run fails "worker lost"
// with no attempt counted, the evaluation is queued again. The same report
// again gets the first answer.
func TestReportLost(t *testing.T) {
	f := newFixture(t, server.Options{})
	for _, tc := range []struct {
		job   string
		kind  event.Kind
		state string
	}{
		{"run1", event.KindRun, "failed"},
		{"eval1", event.KindEvaluation, "queued"},
	} {
		t.Run(tc.job, func(t *testing.T) {
			f.submit(tc.job, tc.kind)
			l := f.grant("w1")
			path := fmt.Sprintf("/v1/leases/%d/report", l)
			body := api.Report{Worker: "w1", Outcome: "lost", Reason: "self-fenced"}
			r := f.do("POST", path, "", body)
			rr := decode[api.ReportReply](t, r, http.StatusOK)
			e, err := f.log.Get(rr.Seq)
			f.must(err)
			if e.Type != event.TypeLost || e.Lease != l || e.Reason != "self-fenced" {
				t.Fatalf("report answered seq %d, which is %s", rr.Seq, e.String())
			}
			if again := f.do("POST", path, "", body); string(again.body) != string(r.body) {
				t.Fatalf("the same report again: %s, first %s", again.body, r.body)
			}
			j := decode[api.Job](t, f.do("GET", "/v1/jobs/"+tc.job, "", nil), http.StatusOK)
			if j.State != tc.state || j.Attempts != 0 {
				t.Fatalf("job after a loss: %s, %d attempts; want %s, none", j.State, j.Attempts, tc.state)
			}
			evs := decode[api.Events](t, f.do("GET", "/v1/events?type=lease.lost&job="+tc.job, "", nil), http.StatusOK)
			if len(evs.Events) != 1 || evs.Events[0].Outcome != "" && evs.Events[0].Outcome != "lost" {
				t.Fatalf("lease.lost events of %s: %+v", tc.job, evs.Events)
			}
		})
	}
}

// TestLongReportKept: a reason or ref over the daemon's limits is not
// refused by the server (the service keeps it cut, saying so); only the body
// limit bounds a report.
func TestLongReportKept(t *testing.T) {
	f := newFixture(t, server.Options{})
	f.submit("j1", event.KindRun)
	l := f.grant("w1")
	reason := strings.Repeat("r", lease.MaxReasonLen+100)
	ref := "refs/" + strings.Repeat("x", lease.MaxRefLen+100)
	r := f.do("POST", fmt.Sprintf("/v1/leases/%d/report", l), "", api.Report{Worker: "w1", Outcome: "failed", Reason: reason, Ref: ref})
	rr := decode[api.ReportReply](t, r, http.StatusOK)
	e, err := f.log.Get(rr.Seq)
	f.must(err)
	if len(e.Reason) == 0 || len(e.Reason) > lease.MaxReasonLen || len(e.Ref) == 0 || len(e.Ref) > lease.MaxRefLen {
		t.Fatalf("kept reason of %d bytes and ref of %d, want each cut to its limit", len(e.Reason), len(e.Ref))
	}
}

func TestHealthBootID(t *testing.T) {
	f := newFixture(t, server.Options{BootID: "6e1f6d5c-2b7b-4c43-9d38-0c5b3c8f1a2e"})
	h := decode[api.Health](t, f.do("GET", "/healthz", "", nil), http.StatusOK)
	if h.BootID != "6e1f6d5c-2b7b-4c43-9d38-0c5b3c8f1a2e" || h.Status != "ok" {
		t.Fatalf("health %+v", h)
	}
	// Not announced: absent.
	g := newFixture(t, server.Options{})
	if r := g.do("GET", "/healthz", "", nil); strings.Contains(string(r.body), "boot_id") {
		t.Fatalf("health without a boot id: %s", r.body)
	}
}
