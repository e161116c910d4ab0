package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/server"
)

func TestSubmit(t *testing.T) {
	f := newFixture(t, server.Options{})
	r := f.do("POST", "/v1/jobs", "", `{"id":"j1","kind":"run","spec":{"run":"make eval","checkout":{"repo":"/r","ref":"main"}}}`)
	j := decode[api.Job](t, r, http.StatusCreated)
	if j.ID != "j1" || j.Kind != "run" || j.State != "queued" || j.Lease != nil || j.Attempts != 0 {
		t.Fatalf("new job %+v", j)
	}
	if want := `{"checkout":{"ref":"main","repo":"/r"},"run":"make eval"}`; string(j.Spec) != want {
		t.Fatalf("spec %s, want canonical %s", j.Spec, want)
	}
	if loc := r.header.Get("Location"); loc != "/v1/jobs/j1" {
		t.Fatalf("Location %q", loc)
	}
	seq := f.seq()

	// The same job, keys in another order: 200 and nothing written.
	same := decode[api.Job](t, f.do("POST", "/v1/jobs", "", `{"kind":"run","id":"j1","spec":{"checkout":{"ref":"main","repo":"/r"},"run":"make eval"}}`), http.StatusOK)
	if same.ID != "j1" || same.State != "queued" {
		t.Fatalf("same job %+v", same)
	}
	wantError(t, f.do("POST", "/v1/jobs", "", `{"id":"j1","kind":"run","spec":{"run":"other"}}`), http.StatusConflict, api.CodeJobExists, "j1")
	wantError(t, f.do("POST", "/v1/jobs", "", `{"id":"j1","kind":"evaluation","spec":{"run":"make eval","checkout":{"repo":"/r","ref":"main"}}}`), http.StatusConflict, api.CodeJobExists)
	if got := f.seq(); got != seq {
		t.Fatalf("seq %d after resubmits, want %d", got, seq)
	}

	// No spec, or a null one, is the empty spec.
	for _, body := range []string{`{"id":"j2","kind":"evaluation"}`, `{"id":"j3","kind":"evaluation","spec":null}`} {
		if j := decode[api.Job](t, f.do("POST", "/v1/jobs", "", body), http.StatusCreated); string(j.Spec) != "{}" {
			t.Fatalf("%s: spec %s", body, j.Spec)
		}
	}
}

func TestGetAndListJobs(t *testing.T) {
	f := newFixture(t, server.Options{})
	l := f.grantViaHTTP("w1", "j1")
	f.do("POST", "/v1/jobs", "", api.Submit{ID: "e1", Kind: "evaluation"})
	f.do("POST", "/v1/jobs", "", api.Submit{ID: "j0", Kind: "run"})

	j := decode[api.Job](t, f.do("GET", "/v1/jobs/j1", "", nil), http.StatusOK)
	if j.State != "acquired" || j.Lease == nil || j.Lease.Lease != l || j.Lease.Worker != "w1" || j.Leases != 1 {
		t.Fatalf("leased job %+v", j)
	}
	if q := decode[api.Job](t, f.do("GET", "/v1/jobs/e1", "", nil), http.StatusOK); q.Lease != nil {
		t.Fatalf("queued job has a lease: %+v", q)
	}
	wantError(t, f.do("GET", "/v1/jobs/nope", "", nil), http.StatusNotFound, api.CodeNotFound, `"nope"`)

	for _, tc := range []struct{ query, want string }{
		{"", "[e1 j0 j1]"},
		{"?state=queued", "[e1 j0]"},
		{"?kind=run", "[j0 j1]"},
		{"?state=queued&kind=evaluation", "[e1]"},
		{"?state=failed", "[]"},
	} {
		js := decode[api.Jobs](t, f.do("GET", "/v1/jobs"+tc.query, "", nil), http.StatusOK)
		var ids []string
		for _, j := range js.Jobs {
			ids = append(ids, j.ID)
			if j.ID == "j1" && (j.Lease == nil || j.Lease.Lease != l) {
				t.Errorf("listed j1 without its lease: %+v", j)
			}
		}
		if got := fmt.Sprint(ids); got != tc.want || js.Jobs == nil {
			t.Errorf("jobs%s: %s, want %s", tc.query, got, tc.want)
		}
	}
}

func TestCancelAndKill(t *testing.T) {
	f := newFixture(t, server.Options{})
	f.do("POST", "/v1/jobs", "", api.Submit{ID: "q1", Kind: "run"})
	c := decode[api.Job](t, f.do("POST", "/v1/jobs/q1/cancel", "", nil), http.StatusOK)
	if c.State != "cancelled" || c.Reason != "cancelled" {
		t.Fatalf("cancelled queued job %+v", c)
	}

	l := f.grantViaHTTP("w1", "j1")
	k := decode[api.Job](t, f.do("POST", "/v1/jobs/j1/kill", "", `{}`), http.StatusOK)
	if k.State != "acquired" || k.Lease == nil || k.Lease.Lease != l || k.Lease.Revoke != "kill" {
		t.Fatalf("killed leased job %+v: want still leased, revoked with kill", k)
	}
	hb := decode[api.HeartbeatReply](t, f.do("POST", "/v1/workers/w1/heartbeat", "", api.Heartbeat{Leases: []uint64{l}}), http.StatusOK)
	if hb.Leases[0].Directive != "kill" {
		t.Fatalf("heartbeat after kill: %+v", hb)
	}
	// A cancel never weakens a kill, and an ended job comes back unchanged.
	if again := decode[api.Job](t, f.do("POST", "/v1/jobs/j1/cancel", "", nil), http.StatusOK); again.Lease.Revoke != "kill" {
		t.Fatalf("cancel after kill: %+v", again)
	}
	if again := decode[api.Job](t, f.do("POST", "/v1/jobs/q1/kill", "", nil), http.StatusOK); again.State != "cancelled" {
		t.Fatalf("kill of a cancelled job: %+v", again)
	}
	wantError(t, f.do("POST", "/v1/jobs/nope/cancel", "", nil), http.StatusNotFound, api.CodeNotFound, `"nope"`)
	wantError(t, f.do("POST", "/v1/jobs/nope/kill", "", nil), http.StatusNotFound, api.CodeNotFound)
}

func TestHistory(t *testing.T) {
	f := newFixture(t, server.Options{})
	l := f.grantViaHTTP("w1", "j1")
	f.grantViaHTTP("w1", "j2")
	f.do("POST", fmt.Sprintf("/v1/leases/%d/start", l), "", api.Start{Worker: "w1"})
	f.do("POST", fmt.Sprintf("/v1/leases/%d/report", l), "", api.Report{Worker: "w1", Outcome: "succeeded", Ref: "refs/x"})

	h := decode[history](t, f.do("GET", "/v1/jobs/j1/history", "", nil), http.StatusOK)
	var types []string
	for i, e := range h.Events {
		types = append(types, e.Type)
		if e.Job != "j1" || (i > 0 && e.Seq <= h.Events[i-1].Seq) {
			t.Fatalf("history event %d: %+v", i, e)
		}
	}
	if got := fmt.Sprint(types); got != "[lease.queued lease.acquired lease.running lease.reported]" {
		t.Fatalf("history %s", got)
	}
	if h.Events[1].Lease != l || h.Events[3].Ref != "refs/x" || h.Events[0].Kind != "run" {
		t.Fatalf("history fields %+v", h.Events)
	}
	wantError(t, f.do("GET", "/v1/jobs/nope/history", "", nil), http.StatusNotFound, api.CodeNotFound, `"nope"`)
}

// history is the answer to GET /v1/jobs/{id}/history.
type history struct {
	Events []api.Event `json:"events"`
}

// TestSubmitMaxRequeues: a cap on requeues is the job's, answered with it;
// a submission naming no cap is the same job, one naming another is 409; a
// batch item with a bad cap is refused in its place, the others kept.
func TestSubmitMaxRequeues(t *testing.T) {
	f := newFixture(t, server.Options{})
	j := decode[api.Job](t, f.do("POST", "/v1/jobs", "", `{"id":"e1","kind":"evaluation","max_requeues":3}`), http.StatusCreated)
	if j.MaxRequeues != 3 {
		t.Fatalf("new job %+v, want max_requeues 3", j)
	}
	seq := f.seq()
	if j := decode[api.Job](t, f.do("POST", "/v1/jobs", "", `{"id":"e1","kind":"evaluation"}`), http.StatusOK); j.MaxRequeues != 3 {
		t.Fatalf("the same job without a cap: %+v", j)
	}
	wantError(t, f.do("POST", "/v1/jobs", "", `{"id":"e1","kind":"evaluation","max_requeues":0}`), http.StatusConflict, api.CodeJobExists, "max_requeues 3")
	r := decode[api.SubmitBatchReply](t, f.do("POST", "/v1/jobs/batch", "", `{"jobs":[{"id":"e2","kind":"evaluation","max_requeues":-2},{"id":"e3","kind":"evaluation","max_requeues":1}]}`), http.StatusOK)
	if st := submittedStatuses(r); fmt.Sprint(st) != "[400 201]" || r.Jobs[1].Job.MaxRequeues != 1 || !strings.Contains(r.Jobs[0].Error.Message, "max_requeues -2") {
		t.Fatalf("batch: %+v", r)
	}
	if got := f.seq(); got != seq+1 {
		t.Fatalf("seq %d, want %d: only e3 recorded", got, seq+1)
	}
	if j := decode[api.Job](t, f.do("GET", "/v1/jobs/e3", "", nil), http.StatusOK); j.MaxRequeues != 1 {
		t.Fatalf("e3 read back: %+v", j)
	}
}
