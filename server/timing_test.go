package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/server"
	"github.com/leaselog/leaselog/timing"
)

// TestOwnTimingAndDetails: a job's own timing is answered with the job and
// its grant; timing out of bounds, or that does not hold together over the
// daemon's, is a 400 naming the field, writing nothing (a batch item in its
// place). A heartbeat's details of a lease become its job's latest, and its
// heartbeat event's; details over 4 KiB are cut to their size, and details
// that are no object, or of a lease the heartbeat does not name, are a 400
// writing nothing.
func TestOwnTimingAndDetails(t *testing.T) {
	f := newFixtureHooked(t, server.Options{}, nil, leasetest.Service(func(o *lease.Options) {
		o.Bounds = timing.Bounds{MinRenew: time.Second, MaxToleration: time.Minute}
	}))
	seq := f.seq()
	for _, tc := range []struct{ body, saying string }{
		{`{"id":"t1","kind":"run","toleration_seconds":61}`, "toleration_seconds: must be at most max_toleration_seconds (60), is 61"},
		{`{"id":"t1","kind":"run","renew_seconds":0.5,"grace_seconds":2,"toleration_seconds":3}`, "renew_seconds: must be at least min_renew_seconds (1), is 0.5"},
		{`{"id":"t1","kind":"run","toleration_seconds":4}`, "toleration_seconds: must exceed grace_seconds (5), is 4"}, // the daemon's grace
		{`{"id":"t1","kind":"run","grace_seconds":-1}`, "grace_seconds: must be a positive number of seconds"},
		{`{"id":"t1","kind":"run","renew_seconds":1e300}`, "renew_seconds: must be a positive number of seconds up to"},
		{`{"id":"t1","kind":"run","renew_seconds":"2"}`, `"renew_seconds"`},
	} {
		wantError(t, f.do("POST", "/v1/jobs", "", tc.body), http.StatusBadRequest, api.CodeBadRequest, tc.saying)
	}
	if got := f.seq(); got != seq {
		t.Fatalf("seq %d after refused submissions, want %d", got, seq)
	}
	r := decode[api.SubmitBatchReply](t, f.do("POST", "/v1/jobs/batch", "", `{"jobs":[{"id":"b1","kind":"run","toleration_seconds":100},{"id":"b2","kind":"run","renew_seconds":2,"grace_seconds":5,"toleration_seconds":9}]}`), http.StatusOK)
	if st := submittedStatuses(r); fmt.Sprint(st) != "[400 201]" || !strings.Contains(r.Jobs[0].Error.Message, "toleration_seconds") {
		t.Fatalf("batch: %+v", r)
	}
	want := api.Timing{RenewSeconds: 2, GraceSeconds: 5, TolerationSeconds: 9}
	if tm := r.Jobs[1].Job.Timing; tm == nil || *tm != want {
		t.Fatalf("b2's timing %+v, want %+v", tm, want)
	}
	// Named in part: the rest is the daemon's at submission.
	j := decode[api.Job](t, f.do("POST", "/v1/jobs", "", `{"id":"t2","kind":"run","toleration_seconds":30}`), http.StatusCreated)
	if tm := j.Timing; tm == nil || *tm != (api.Timing{RenewSeconds: 1, GraceSeconds: 5, TolerationSeconds: 30}) {
		t.Fatalf("t2's timing %+v", tm)
	}
	g := decode[api.Grants](t, f.do("POST", "/v1/workers/w1/acquire", "", api.Acquire{Max: 1}), http.StatusOK)
	if len(g.Leases) != 1 || g.Leases[0].Job.ID != "b2" || g.Leases[0].Job.Timing == nil || *g.Leases[0].Job.Timing != want {
		t.Fatalf("grants %+v, want b2 with its timing", g)
	}
	l := g.Leases[0].Lease

	hb := func(details string) reply {
		return f.do("POST", "/v1/workers/w1/heartbeat", "", fmt.Sprintf(`{"leases":[%d],"details":%s}`, l, details))
	}
	seq = f.seq()
	for _, tc := range []struct{ details, saying string }{
		{fmt.Sprintf(`{"%d":[1]}`, l), fmt.Sprintf("details of lease %d: must be a JSON object", l)},
		{fmt.Sprintf(`{"%d":"half"}`, l), "must be a JSON object"},
		{`{"99":{"step":1}}`, "details: lease 99 is not among the heartbeat's leases"},
		{`{"x":{"step":1}}`, `"details"`},
		{`[]`, `"details"`},
	} {
		wantError(t, hb(tc.details), http.StatusBadRequest, api.CodeBadRequest, tc.saying)
	}
	if got := f.seq(); got != seq {
		t.Fatalf("seq %d after refused heartbeats, want %d", got, seq)
	}
	long := strings.Repeat("x", 4096)
	for _, tc := range []struct{ details, want string }{
		{fmt.Sprintf(`{"%d":{ "step": 1 }}`, l), `{"step":1}`},
		{fmt.Sprintf(`{"%d":{"log":"%s"}}`, l, long), fmt.Sprintf(`{"cut":%d}`, len(`{"log":""}`)+len(long))},
	} {
		decode[api.HeartbeatReply](t, hb(tc.details), http.StatusOK)
		if j := decode[api.Job](t, f.do("GET", "/v1/jobs/b2", "", nil), http.StatusOK); string(j.Details) != tc.want {
			t.Fatalf("b2's details %s, want %s", j.Details, tc.want)
		}
		hist := decode[api.History](t, f.do("GET", "/v1/jobs/b2/history", "", nil), http.StatusOK)
		last := hist.Events[len(hist.Events)-1]
		if last.Type != "lease.heartbeat" || string(last.Details) != tc.want {
			t.Fatalf("b2's last event %+v, want a heartbeat with details %s", last, tc.want)
		}
	}
}
