package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/server"
)

// deepCall is a call that takes a body: its name, its session op ("" for
// one a session does not carry), the lease a frame names, its HTTP path and
// its body.
type deepCall struct{ name, op, lease, path, body string }

// deepCalls are a body of each call that takes one, nested one level past
// server.MaxDepth (the body's own object is the first) in a field the call
// has, and the review's body: {"leases": and 30,000 [, which took the
// decoder a gigabyte.
func deepCalls(lease uint64) []deepCall {
	over := strings.Repeat("[", server.MaxDepth)
	l := fmt.Sprint(lease)
	return []deepCall{
		{"submit", "", "", "/v1/jobs", `{"id":"deep","kind":"run","spec":` + over},
		{"batch", "", "", "/v1/jobs/batch", `{"jobs":` + over},
		{"cancel", "", "", "/v1/jobs/j1/cancel", `{"reason":` + over},
		{"kill", "", "", "/v1/jobs/j1/kill", `{"reason":` + over},
		{"acquire", api.OpAcquire, "-", "/v1/workers/w1/acquire", `{"max":` + over},
		{"heartbeat", api.OpHeartbeat, "-", "/v1/workers/w1/heartbeat", `{"leases":` + over},
		{"heartbeat 30,000 deep", api.OpHeartbeat, "-", "/v1/workers/w1/heartbeat", `{"leases":` + strings.Repeat("[", 30_000)},
		{"start", api.OpStart, l, "/v1/leases/" + l + "/start", `{"worker":` + over},
		{"report", api.OpReport, l, "/v1/leases/" + l + "/report", `{"worker":"w1","outcome":"succeeded","result":` + over},
	}
}

// TestDeepBodyRefused: a body whose objects and arrays nest deeper than
// server.MaxDepth gets a 400 that names the limit, on every call that takes
// a body, over HTTP/1.1 and h2c, and on every op of a worker session's
// frames; nothing is written, and the session goes on.
func TestDeepBodyRefused(t *testing.T) {
	limit := fmt.Sprintf("nested more than %d deep", server.MaxDepth)
	// refuse sends the deep calls that send can (those of a session op, for
	// a session) and checks the answers.
	refuse := func(t *testing.T, f *fixture, session bool, send func(deepCall) reply) {
		t.Helper()
		f.submit("j1", event.KindRun)
		lease := f.grant("w1")
		seq, last := f.seq(), f.log.LastSeq()
		for _, c := range deepCalls(lease) {
			if session && c.op == "" {
				continue
			}
			t.Run(c.name, func(t *testing.T) {
				wantError(t, send(c), http.StatusBadRequest, api.CodeBadRequest, limit)
			})
		}
		if got := f.seq(); got != seq {
			t.Fatalf("seq %d after the refusals, was %d", got, seq)
		}
		if got := f.log.LastSeq(); got != last {
			t.Fatalf("log staged up to %d after the refusals, was %d", got, last)
		}
	}
	t.Run("HTTP/1.1", func(t *testing.T) {
		f := newFixture(t, server.Options{})
		refuse(t, f, false, func(c deepCall) reply { return f.do("POST", c.path, "", c.body) })
	})
	t.Run("h2c", func(t *testing.T) {
		h := newH2CFixture(t, server.Options{}, 0)
		refuse(t, h.fixture, false, func(c deepCall) reply { return h.do("POST", c.path, "", c.body) })
		if !h.saw(2) || h.saw(1) {
			t.Fatalf("saw HTTP/2 %v, HTTP/1 %v; want h2c only", h.saw(2), h.saw(1))
		}
	})
	t.Run("session", func(t *testing.T) {
		f := newFixture(t, server.Options{})
		s := dialSession(t, f, "w1", "")
		id := uint64(0)
		refuse(t, f, true, func(c deepCall) reply {
			id++
			return s.call(id, c.op, c.lease, c.body)
		})
		r := s.call(id+1, api.OpHeartbeat, "-", `{"leases":[]}`)
		decode[api.HeartbeatReply](t, r, http.StatusOK)
	})
}

// TestNestedToTheLimit: a body nested exactly server.MaxDepth deep is
// taken: a spec is stored as given, a report's result is accepted.
func TestNestedToTheLimit(t *testing.T) {
	f := newFixture(t, server.Options{})
	levels := server.MaxDepth - 1 // below the body's own object
	spec := strings.Repeat(`{"a":`, levels-1) + `{"run":"true"}` + strings.Repeat("}", levels-1)
	j := decode[api.Job](t, f.do("POST", "/v1/jobs", "", `{"id":"deep","kind":"run","spec":`+spec+`}`), http.StatusCreated)
	if !json.Valid(j.Spec) || string(j.Spec) != spec {
		t.Fatalf("spec stored as %s, want %s", j.Spec, spec)
	}

	lease := f.grant("w1")
	if _, err := f.svc.Start(context.Background(), "w1", lease); err != nil {
		t.Fatal(err)
	}
	result := strings.Repeat("[", levels) + strings.Repeat("]", levels)
	r := f.do("POST", fmt.Sprintf("/v1/leases/%d/report", lease), "", `{"worker":"w1","outcome":"succeeded","result":`+result+`}`)
	if got := decode[api.ReportReply](t, r, http.StatusOK); !got.Accepted {
		t.Fatalf("report with a result nested to the limit: %+v", got)
	}
}
