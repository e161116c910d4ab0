package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/server"
)

// TestBadInputWritesNothing sends bad input to every endpoint: each gets a
// 400 whose JSON error names what is wrong, and none changes the log.
func TestBadInputWritesNothing(t *testing.T) {
	const maxBody = 1024
	f := newFixture(t, server.Options{MaxBody: maxBody})
	f.submit("j1", event.KindRun)
	l := f.grant("w1")
	f.submit("q1", event.KindEvaluation)
	start := fmt.Sprintf("/v1/leases/%d/start", l)
	report := fmt.Sprintf("/v1/leases/%d/report", l)
	big := `{"id":"j9","kind":"run","spec":{"run":"` + strings.Repeat("x", maxBody) + `"}}`

	cases := []struct {
		name   string
		req    request
		code   string // "" is bad_request
		saying string // the message mentions it
	}{
		{"healthz query", request{method: "GET", path: "/healthz?verbose=1"}, "", `"verbose"`},
		{"metrics query", request{method: "GET", path: "/metrics?format=json"}, "", `"format"`},

		{"submit malformed", request{method: "POST", path: "/v1/jobs", body: `{"id":`}, "", "body"},
		{"submit not JSON", request{method: "POST", path: "/v1/jobs", body: `id=j2&kind=run`}, "", "JSON object"},
		{"submit array", request{method: "POST", path: "/v1/jobs", body: `[]`}, "", "JSON object"},
		{"submit null", request{method: "POST", path: "/v1/jobs", body: `null`}, "", "JSON object"},
		{"submit empty", request{method: "POST", path: "/v1/jobs", body: ``}, "", "missing body"},
		{"submit unknown field", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2","kind":"run","prio":1}`}, "", `unknown field "prio"`},
		{"submit trailing object", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2","kind":"run"} {}`}, "", "trailing"},
		{"submit trailing brace", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2","kind":"run"}}`}, "", "trailing"},
		{"submit missing id", request{method: "POST", path: "/v1/jobs", body: `{"kind":"run"}`}, "", "missing job id"},
		{"submit bad id", request{method: "POST", path: "/v1/jobs", body: `{"id":"a b","kind":"run"}`}, "", "job id"},
		{"submit id not string", request{method: "POST", path: "/v1/jobs", body: `{"id":7,"kind":"run"}`}, "", `"id"`},
		{"submit missing kind", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2"}`}, "", "missing kind"},
		{"submit unknown kind", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2","kind":"batch"}`}, "", `kind "batch"`},
		{"submit spec not object", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2","kind":"run","spec":[1]}`}, "", "spec"},
		{"submit oversized", request{method: "POST", path: "/v1/jobs", body: big}, api.CodeTooLarge, "1024 bytes"},
		{"submit query", request{method: "POST", path: "/v1/jobs?dry=1", body: `{"id":"j2","kind":"run"}`}, "", `"dry"`},
		{"submit key twice", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2","kind":"run","id":"j3"}`}, "", `key "id" given twice in the body`},
		{"submit spec key twice", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2","kind":"run","spec":{"run":"a","run":"b"}}`}, "", `key "run" given twice in spec`},
		{"submit nested key twice", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2","kind":"run","spec":{"env":[{"k":1,"k":2}]}}`}, "", `key "k" given twice in spec.env[]`},
		{"submit invalid UTF-8", request{method: "POST", path: "/v1/jobs", body: "{\"id\":\"j2\",\"kind\":\"run\",\"spec\":{\"run\":\"\xff\"}}"}, "", "invalid UTF-8 at byte 39"},
		{"submit invalid UTF-8 key", request{method: "POST", path: "/v1/jobs", body: "{\"id\":\"j2\",\"kind\":\"run\",\"\xc3\":1}"}, "", "invalid UTF-8"},

		{"jobs bad state", request{method: "GET", path: "/v1/jobs?state=done"}, "", `state "done"`},
		{"jobs bad kind", request{method: "GET", path: "/v1/jobs?kind=batch"}, "", `kind "batch"`},
		{"jobs unknown param", request{method: "GET", path: "/v1/jobs?status=queued"}, "", `"status"`},
		{"jobs bad outcome", request{method: "GET", path: "/v1/jobs?outcome=done"}, "", `outcome "done": want succeeded, failed, cancelled or killed`},
		{"jobs outcome lost", request{method: "GET", path: "/v1/jobs?outcome=lost"}, "", `outcome "lost": want succeeded, failed, cancelled or killed (a loss is no job's outcome`},
		{"submit negative max_requeues", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2","kind":"evaluation","max_requeues":-1}`}, "", "max_requeues -1: want 0 (no cap) to 1000000"},
		{"submit max_requeues too big", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2","kind":"evaluation","max_requeues":1000001}`}, "", "max_requeues 1000001"},
		{"submit max_requeues not integer", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2","kind":"evaluation","max_requeues":1.5}`}, "", `"max_requeues"`},
		{"submit max_requeues of a run", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2","kind":"run","max_requeues":2}`}, "", "max_requeues 2 on a run"},
		{"submit label too long", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2","kind":"run","labels":{"k":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}`}, "", `labels: event: bad label: value of "k" is 65 bytes, at most 64`},
		{"submit too many labels", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2","kind":"run","labels":{"k0":"v","k1":"v","k2":"v","k3":"v","k4":"v","k5":"v","k6":"v","k7":"v","k8":"v","k9":"v","k10":"v","k11":"v","k12":"v","k13":"v","k14":"v","k15":"v","k16":"v"}}`}, "", "labels: event: bad label: 17 labels, at most 16"},
		{"submit bad label key", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2","kind":"run","labels":{"a b":"v"}}`}, "", `labels: event: bad label: key "a b"`},
		{"submit label not string", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2","kind":"run","labels":{"k":1}}`}, "", `"labels`},
		{"submit not_before unparsable", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2","kind":"run","not_before":"tomorrow"}`}, "", `not_before "tomorrow": want an RFC 3339 time`},
		{"submit not_before past a year", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2","kind":"run","not_before":"2999-01-01T00:00:00Z"}`}, "", "not_before 2999-01-01T00:00:00Z is more than"},
		{"submit priority out of range", request{method: "POST", path: "/v1/jobs", body: `{"id":"j2","kind":"run","priority":2147483648}`}, "", "priority 2147483648"},
		{"jobs bad labels", request{method: "GET", path: "/v1/jobs?labels=gpu"}, "", `labels "gpu": event: bad label: "gpu" is not key=value`},
		{"jobs param twice", request{method: "GET", path: "/v1/jobs?state=queued&state=failed"}, "", "2 times"},
		{"job bad id", request{method: "GET", path: "/v1/jobs/a%20b"}, "", "job id"},
		{"job query", request{method: "GET", path: "/v1/jobs/j1?x=1"}, "", `"x"`},

		{"cancel body", request{method: "POST", path: "/v1/jobs/q1/cancel", body: `{"reason":"no"}`}, "", `unknown field "reason"`},
		{"cancel array", request{method: "POST", path: "/v1/jobs/q1/cancel", body: `[]`}, "", "JSON object"},
		{"cancel bad id", request{method: "POST", path: "/v1/jobs/a%20b/cancel"}, "", "job id"},
		{"kill body", request{method: "POST", path: "/v1/jobs/j1/kill", body: `{"now":true}`}, "", `unknown field "now"`},
		{"kill bad id", request{method: "POST", path: "/v1/jobs/a%20b/kill"}, "", "job id"},
		{"history bad id", request{method: "GET", path: "/v1/jobs/a%20b/history"}, "", "job id"},
		{"history query", request{method: "GET", path: "/v1/jobs/j1/history?lease=1"}, "", `"lease"`},

		{"acquire malformed", request{method: "POST", path: "/v1/workers/w2/acquire", body: `{"max":`}, "", "body"},
		{"acquire unknown field", request{method: "POST", path: "/v1/workers/w2/acquire", body: `{"count":1}`}, "", `unknown field "count"`},
		{"acquire negative wait", request{method: "POST", path: "/v1/workers/w2/acquire", body: `{"wait_seconds":-1}`}, "", "wait_seconds"},
		{"acquire wait not number", request{method: "POST", path: "/v1/workers/w2/acquire", body: `{"wait_seconds":"5"}`}, "", `"wait_seconds"`},
		{"acquire max too big", request{method: "POST", path: "/v1/workers/w2/acquire", body: `{"max":101}`}, "", "max"},
		{"acquire max negative", request{method: "POST", path: "/v1/workers/w2/acquire", body: `{"max":-1}`}, "", "max"},
		{"acquire unknown kind", request{method: "POST", path: "/v1/workers/w2/acquire", body: `{"max":1,"kinds":["batch"]}`}, "", `kinds: "batch": want run or evaluation`},
		{"acquire label too long", request{method: "POST", path: "/v1/workers/w2/acquire", body: `{"max":1,"labels":{"k":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}}`}, "", `labels: event: bad label: value of "k" is 65 bytes`},
		{"report next unknown kind", request{method: "POST", path: report, body: `{"worker":"w1","outcome":"succeeded","next":{"max":1,"kinds":["gpu"]}}`}, "", `next: kinds: "gpu"`},
		{"acquire bad worker", request{method: "POST", path: "/v1/workers/a%20b/acquire", body: `{}`}, "", "worker id"},
		{"acquire oversized", request{method: "POST", path: "/v1/workers/w2/acquire", body: `{"max":1` + strings.Repeat(" ", maxBody) + `}`}, api.CodeTooLarge, "bytes"},

		{"heartbeat malformed", request{method: "POST", path: "/v1/workers/w1/heartbeat", body: `{"leases":[`}, "", "body"},
		{"heartbeat leases not array", request{method: "POST", path: "/v1/workers/w1/heartbeat", body: `{"leases":"3"}`}, "", `"leases"`},
		{"heartbeat negative lease", request{method: "POST", path: "/v1/workers/w1/heartbeat", body: `{"leases":[-3]}`}, "", `"leases"`},
		{"heartbeat unknown field", request{method: "POST", path: "/v1/workers/w1/heartbeat", body: `{"lease":[3]}`}, "", `unknown field "lease"`},
		{"heartbeat bad worker", request{method: "POST", path: "/v1/workers/a%20b/heartbeat", body: `{"leases":[]}`}, "", "worker id"},

		{"worker leases bad worker", request{method: "GET", path: "/v1/workers/a%20b/leases"}, "", "worker id"},
		{"worker leases query", request{method: "GET", path: "/v1/workers/w1/leases?all=1"}, "", `"all"`},

		{"start lease not number", request{method: "POST", path: "/v1/leases/abc/start", body: `{"worker":"w1"}`}, "", `lease id "abc"`},
		{"start lease zero", request{method: "POST", path: "/v1/leases/0/start", body: `{"worker":"w1"}`}, "", `lease id "0"`},
		{"start lease negative", request{method: "POST", path: "/v1/leases/-1/start", body: `{"worker":"w1"}`}, "", `lease id "-1"`},
		{"start lease fraction", request{method: "POST", path: "/v1/leases/1.5/start", body: `{"worker":"w1"}`}, "", `lease id "1.5"`},
		{"start lease overflow", request{method: "POST", path: "/v1/leases/99999999999999999999/start", body: `{"worker":"w1"}`}, "", "positive integer"},
		{"start lease plus", request{method: "POST", path: "/v1/leases/+1/start", body: `{"worker":"w1"}`}, "", "positive integer"},
		{"start missing worker", request{method: "POST", path: start, body: `{}`}, "", "missing worker id"},
		{"start missing body", request{method: "POST", path: start}, "", "missing body"},
		{"start bad worker", request{method: "POST", path: start, body: `{"worker":"w/1"}`}, "", "worker id"},
		{"start unknown field", request{method: "POST", path: start, body: `{"worker":"w1","at":1}`}, "", `unknown field "at"`},

		{"report lease not number", request{method: "POST", path: "/v1/leases/x/report", body: `{"worker":"w1","outcome":"succeeded"}`}, "", `lease id "x"`},
		{"report missing outcome", request{method: "POST", path: report, body: `{"worker":"w1"}`}, "", "missing outcome"},
		{"report bad outcome", request{method: "POST", path: report, body: `{"worker":"w1","outcome":"ok"}`}, "", `outcome "ok"`},
		{"report missing worker", request{method: "POST", path: report, body: `{"outcome":"succeeded"}`}, "", "missing worker id"},
		{"report unknown field", request{method: "POST", path: report, body: `{"worker":"w1","outcome":"failed","exit":1}`}, "", `unknown field "exit"`},
		{"report malformed result", request{method: "POST", path: report, body: `{"worker":"w1","outcome":"failed","result":}`}, "", "body"},
		{"report outcome twice", request{method: "POST", path: report, body: `{"worker":"w1","outcome":"failed","outcome":"succeeded"}`}, "", `key "outcome" given twice`},
		{"report result key twice", request{method: "POST", path: report, body: `{"worker":"w1","outcome":"failed","result":{"score":1,"score":0}}`}, "", `key "score" given twice in result`},
		{"report invalid UTF-8 reason", request{method: "POST", path: report, body: "{\"worker\":\"w1\",\"outcome\":\"failed\",\"reason\":\"\xe2\x82\"}"}, "", "invalid UTF-8"},
		{"heartbeat key twice", request{method: "POST", path: "/v1/workers/w1/heartbeat", body: `{"leases":[],"leases":[1]}`}, "", `key "leases" given twice`},
		{"acquire invalid UTF-8", request{method: "POST", path: "/v1/workers/w2/acquire", body: "{\"max\":1,\"\xff\":1}"}, "", "invalid UTF-8"},
		{"start worker twice", request{method: "POST", path: start, body: `{"worker":"w1","worker":"w2"}`}, "", `key "worker" given twice`},

		{"leases job state", request{method: "GET", path: "/v1/leases?state=queued"}, "", `state "queued"`},
		{"leases bad state", request{method: "GET", path: "/v1/leases?state=live"}, "", `state "live"`},
		{"leases bad kind", request{method: "GET", path: "/v1/leases?kind=x"}, "", `kind "x"`},
		{"leases bad worker", request{method: "GET", path: "/v1/leases?worker=a%20b"}, "", "worker id"},
		{"leases unknown param", request{method: "GET", path: "/v1/leases?job=j1"}, "", `"job"`},

		{"events bad type", request{method: "GET", path: "/v1/events?type=lease.done"}, "", `type "lease.done"`},
		{"events bad since", request{method: "GET", path: "/v1/events?since=yesterday"}, "", `since "yesterday"`},
		{"events bad until", request{method: "GET", path: "/v1/events?until=2026-13-01T00:00:00Z"}, "", "until"},
		{"events since out of range", request{method: "GET", path: "/v1/events?since=1000-01-01T00:00:00Z"}, "", "out of range"},
		{"events bad after", request{method: "GET", path: "/v1/events?after=-1"}, "", `after "-1"`},
		{"events zero limit", request{method: "GET", path: "/v1/events?limit=0"}, "", `limit "0"`},
		{"events limit too big", request{method: "GET", path: "/v1/events?limit=1001"}, "", `limit "1001"`},
		{"events limit not number", request{method: "GET", path: "/v1/events?limit=all"}, "", `limit "all"`},
		{"events bad job", request{method: "GET", path: "/v1/events?job=a%20b"}, "", "job id"},
		{"events bad worker", request{method: "GET", path: "/v1/events?worker=a%20b"}, "", "worker id"},
		{"events unknown param", request{method: "GET", path: "/v1/events?lease=3"}, "", `"lease"`},

		{"stream bad after", request{method: "GET", path: "/v1/events/stream?after=x"}, "", `after "x"`},
		{"stream bad Last-Event-ID", request{method: "GET", path: "/v1/events/stream", header: map[string]string{"Last-Event-ID": "x"}}, "", "Last-Event-ID"},
		{"stream bad type", request{method: "GET", path: "/v1/events/stream?type=nope"}, "", `type "nope"`},
		{"stream limit", request{method: "GET", path: "/v1/events/stream?limit=5"}, "", `"limit"`},
	}
	seq, last := f.seq(), f.log.LastSeq()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code := tc.code
			if code == "" {
				code = api.CodeBadRequest
			}
			r := f.send(tc.req)
			wantError(t, r, http.StatusBadRequest, code, tc.saying)
			t.Logf("%s", r.body)
			if got := f.seq(); got != seq {
				t.Fatalf("seq %d after the refusal, was %d", got, seq)
			}
			if got := f.log.LastSeq(); got != last {
				t.Fatalf("log staged up to %d after the refusal, was %d", got, last)
			}
		})
	}
}

// TestStrictJSONAcceptsWhatIsFine: the same key in different objects, and
// any valid UTF-8, are fine.
func TestStrictJSONAcceptsWhatIsFine(t *testing.T) {
	f := newFixture(t, server.Options{})
	body := `{"id":"j1","kind":"run","spec":{"run":"echo héllo ✓ 🙂","a":{"run":1},"b":[{"x":1},{"x":2}]}}`
	j := decode[api.Job](t, f.do("POST", "/v1/jobs", "", body), http.StatusCreated)
	var spec map[string]any
	if err := json.Unmarshal(j.Spec, &spec); err != nil || spec["run"] != "echo héllo ✓ 🙂" {
		t.Fatalf("spec %s (%v)", j.Spec, err)
	}
}
