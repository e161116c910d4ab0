package server_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/server"
)

// contract drives a server and checks every request and answer against
// docs/openapi.yaml.
type contract struct {
	t      *testing.T
	f      *fixture
	doc    *openapi3.T
	router routers.Router
	seen   map[string]bool // "METHOD /path/{template} STATUS" of every answer
}

func loadDoc(t *testing.T) (*openapi3.T, routers.Router) {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(filepath.Join("..", "docs", "openapi.yaml"))
	if err != nil {
		t.Fatalf("load docs/openapi.yaml: %v", err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("docs/openapi.yaml is OpenAPI %s; docs/api.md says 3.1", doc.OpenAPI)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("docs/openapi.yaml is not a valid OpenAPI document: %v", err)
	}
	// The router matches a request's host against the servers: the tests'
	// daemons listen on ports of their own, so it routes on paths alone.
	routed := *doc
	routed.Servers = nil
	router, err := legacy.NewRouter(&routed)
	if err != nil {
		t.Fatalf("route docs/openapi.yaml: %v", err)
	}
	return doc, router
}

// exchange is one request checked against the document, and what to check
// its answer with.
type exchange struct {
	in   *openapi3filter.RequestValidationInput
	send *http.Request
}

// prepare builds rq twice (one to validate, one to send, as validation reads
// the body), finds its operation and validates it. A request expected to be
// refused as bad input may break the document's rules; any other must follow
// them.
func (c *contract) prepare(ctx context.Context, rq request, status int) exchange {
	c.t.Helper()
	check := c.f.newRequest(ctx, rq)
	route, params, err := c.router.FindRoute(check)
	if err != nil {
		c.t.Fatalf("%s %s: no operation in the document: %v", rq.method, rq.path, err)
	}
	in := &openapi3filter.RequestValidationInput{
		Request: check, PathParams: params, Route: route,
		Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
	}
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil && status != http.StatusBadRequest {
		c.t.Errorf("%s %s: the request does not follow the document: %v", rq.method, rq.path, err)
	}
	return exchange{in: in, send: c.f.newRequest(ctx, rq)}
}

// checkAnswer validates an answer (status, headers, body) against the
// operation of ex, and records its status as seen.
func (c *contract) checkAnswer(ex exchange, status int, header http.Header, body []byte) {
	c.t.Helper()
	rq := ex.in.Request
	out := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: ex.in, Status: status, Header: header,
		Options: &openapi3filter.Options{IncludeResponseStatus: true},
	}
	out.SetBodyBytes(body)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		c.t.Errorf("%s %s: answer %d %s does not follow the document: %v", rq.Method, rq.URL, status, bytes.TrimSpace(body), err)
	}
	c.seen[fmt.Sprintf("%s %s %d", ex.in.Route.Method, ex.in.Route.Path, status)] = true
}

// call sends rq, expects status, and checks request and answer.
func (c *contract) call(rq request, status int) reply {
	c.t.Helper()
	ex := c.prepare(context.Background(), rq, status)
	resp, err := c.f.ts.Client().Do(ex.send)
	if err != nil {
		c.t.Fatalf("%s %s: %v", rq.method, rq.path, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.t.Fatal(err)
	}
	if resp.StatusCode != status {
		c.t.Errorf("%s %s: %d %s, want %d", rq.method, rq.path, resp.StatusCode, bytes.TrimSpace(body), status)
	}
	c.checkAnswer(ex, resp.StatusCode, resp.Header, body)
	return reply{status: resp.StatusCode, header: resp.Header, body: body}
}

// stream opens an event stream, reads n events, hangs up, and checks what
// it read: the answer against the document, each event's data against the
// Event schema.
func (c *contract) stream(rq request, n int) []sse {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ex := c.prepare(ctx, rq, http.StatusOK)
	resp, err := c.f.ts.Client().Do(ex.send)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		c.t.Fatalf("stream: %d", resp.StatusCode)
	}
	var raw bytes.Buffer
	r := bufio.NewReader(io.TeeReader(resp.Body, &raw))
	var evs []sse
	for range n {
		e, err := readEvent(r)
		if err != nil {
			c.t.Fatalf("stream: %v", err)
		}
		evs = append(evs, e)
	}
	c.checkAnswer(ex, resp.StatusCode, resp.Header, raw.Bytes()[:raw.Len()-r.Buffered()])
	schema := c.doc.Components.Schemas["Event"].Value
	for _, e := range evs {
		var v any
		if err := json.Unmarshal([]byte(e.data), &v); err != nil {
			c.t.Fatalf("event %s: %v", e.id, err)
		}
		if err := schema.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
			c.t.Errorf("event %s does not follow the Event schema: %v", e.data, err)
		}
	}
	return evs
}

// slow sends rq with only the start of its body, the rest never coming, and
// checks the answer: 408 body_timeout once the server's body deadline passes.
// The request is validated with its whole body.
func (c *contract) slow(rq request) {
	c.t.Helper()
	ex := c.prepare(context.Background(), rq, http.StatusRequestTimeout)
	whole, err := io.ReadAll(ex.send.Body)
	if err != nil {
		c.t.Fatal(err)
	}
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = pw.Write(whole[:len(whole)/2]) }() // then nothing
	ex.send.Body, ex.send.ContentLength = pr, int64(len(whole))
	ex.send.GetBody = nil
	resp, err := c.f.ts.Client().Do(ex.send)
	if err != nil {
		c.t.Fatalf("%s %s: %v", rq.method, rq.path, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		c.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusRequestTimeout || !resp.Close {
		c.t.Errorf("%s %s with a slow body: %d %s (close %v), want 408 and the connection closed", rq.method, rq.path, resp.StatusCode, body, resp.Close)
	}
	c.checkAnswer(ex, resp.StatusCode, resp.Header, body)
}

// upgrade opens a worker session with rq and checks its 101 against the
// document; it then hangs up.
func (c *contract) upgrade(rq request) {
	c.t.Helper()
	ex := c.prepare(context.Background(), rq, http.StatusSwitchingProtocols)
	resp, err := c.f.ts.Client().Do(ex.send)
	if err != nil {
		c.t.Fatalf("%s %s: %v", rq.method, rq.path, err)
	}
	resp.Body.Close() // a 101's body is the connection
	if resp.StatusCode != http.StatusSwitchingProtocols {
		c.t.Fatalf("%s %s: %d, want 101", rq.method, rq.path, resp.StatusCode)
	}
	c.checkAnswer(ex, resp.StatusCode, resp.Header, nil)
}

// unrouted sends a request no operation takes: the answer must still be a
// JSON error.
func (c *contract) unrouted(rq request, status int) {
	c.t.Helper()
	r := c.f.send(rq)
	if r.status != status || r.header.Get("Content-Type") != "application/json" {
		c.t.Errorf("%s %s: %s, want %d with a JSON error", rq.method, rq.path, r, status)
	}
	var v any
	if err := json.Unmarshal(r.body, &v); err != nil {
		c.t.Fatalf("%s %s: %v", rq.method, rq.path, err)
	}
	if err := c.doc.Components.Schemas["Error"].Value.VisitJSON(v, openapi3.EnableJSONSchema2020()); err != nil {
		c.t.Errorf("%s %s: %s does not follow the Error schema: %v", rq.method, rq.path, r.body, err)
	}
}

// TestOpenAPI drives a real server through a scenario that produces every
// answer the document lists but 500s, and validates every request and
// answer against it.
func TestOpenAPI(t *testing.T) {
	doc, router := loadDoc(t)
	waiting := make(chan struct{}, 1) // an acquire is about to wait
	out := fakeOutput{}
	f := newFixtureHooked(t, server.Options{Auth: testAuth(), BootID: "6e1f6d5c-2b7b-4c43-9d38-0c5b3c8f1a2e", Output: out}, func(s *server.Server) {
		server.SetWaitHook(s, func(ctx context.Context) context.Context {
			select {
			case waiting <- struct{}{}:
			default:
			}
			return ctx
		})
	})
	c := &contract{t: t, f: f, doc: doc, router: router, seen: map[string]bool{}}
	rq := func(method, path, token string, body any) request {
		return request{method: method, path: path, token: token, body: body}
	}

	// A job of the daemon's own worker, which made its stdout a named pipe
	// (output_test.go): its output is refused, below.
	f.submit("piped", event.KindRun)
	out[fmt.Sprintf("piped/%d/stdout", f.grant("local"))] = refused

	// Every operation but /healthz: 401 without a token, 403 with a token of
	// the wrong role.
	f.submit("j0", event.KindRun)
	for _, op := range []struct {
		method, path string
		body         any
		wrong        string
	}{
		{"GET", "/metrics", nil, w1Tok},
		{"POST", "/v1/jobs", api.Submit{ID: "x1", Kind: "run"}, auditorTok},
		{"POST", "/v1/jobs/batch", api.SubmitBatch{Jobs: []api.Submit{{ID: "x1", Kind: "run"}}}, w1Tok},
		{"GET", "/v1/jobs", nil, w1Tok},
		{"GET", "/v1/jobs/j0", nil, w1Tok},
		{"POST", "/v1/jobs/j0/cancel", nil, auditorTok},
		{"POST", "/v1/jobs/j0/kill", nil, w1Tok},
		{"GET", "/v1/jobs/j0/history", nil, w2Tok},
		{"GET", "/v1/jobs/j0/output", nil, w1Tok},
		{"POST", "/v1/workers/w1/acquire", api.Acquire{}, w2Tok},
		{"POST", "/v1/workers/w1/heartbeat", api.Heartbeat{Leases: []uint64{}}, adminTok},
		{"GET", "/v1/workers/w1/leases", nil, w2Tok},
		{"POST", "/v1/leases/1/start", api.Start{Worker: "w1"}, auditorTok},
		{"POST", "/v1/leases/1/report", api.Report{Worker: "w1", Outcome: "failed"}, adminTok},
		{"GET", "/v1/leases", nil, w1Tok},
		{"GET", "/v1/workers", nil, w2Tok},
		{"GET", "/v1/overview", nil, w1Tok},
		{"GET", "/v1/events", nil, w2Tok},
		{"GET", "/v1/events/stream", nil, w1Tok},
		{"POST", api.BackupPath, api.BackupRequest{To: "/b0"}, auditorTok},
	} {
		c.call(rq(op.method, op.path, "", op.body), http.StatusUnauthorized)
		c.call(rq(op.method, op.path, op.wrong, op.body), http.StatusForbidden)
	}
	// A worker session: its upgrade refused, and made (session_test.go has
	// its frames).
	upgrade := map[string]string{"Connection": "Upgrade", "Upgrade": api.SessionProtocol}
	session := request{method: "GET", path: api.SessionPath, header: upgrade}
	c.call(session, http.StatusUnauthorized)
	c.call(request{method: "GET", path: session.path, token: adminTok, header: upgrade}, http.StatusForbidden)
	c.call(request{method: "GET", path: session.path, token: w1Tok}, http.StatusBadRequest)
	session.token = w1Tok
	c.upgrade(session)

	c.call(rq("GET", "/healthz", "", nil), http.StatusOK)
	c.call(rq("GET", "/healthz?full=1", "", nil), http.StatusBadRequest)
	c.call(rq("GET", "/metrics?x=1", auditorTok, nil), http.StatusBadRequest)

	// Executors.
	spec := json.RawMessage(`{"checkout":{"repo":"/src","ref":"main"},"run":"make eval","bring_back":["out/"]}`)
	c.call(rq("POST", "/v1/jobs", adminTok, api.Submit{ID: "j1", Kind: "run", Spec: spec}), http.StatusCreated)
	c.call(rq("POST", "/v1/jobs", adminTok, api.Submit{ID: "j1", Kind: "run", Spec: spec}), http.StatusOK)
	c.call(rq("POST", "/v1/jobs", adminTok, api.Submit{ID: "j1", Kind: "evaluation", Spec: spec}), http.StatusConflict)
	c.call(rq("POST", "/v1/jobs", adminTok, `{"id":"j1","kind":"batch"}`), http.StatusBadRequest)
	c.call(rq("POST", "/v1/jobs", adminTok, `{"id":"j1",`), http.StatusBadRequest)
	c.call(rq("GET", "/v1/jobs", auditorTok, nil), http.StatusOK)
	c.call(rq("GET", "/v1/jobs?state=queued&kind=run", adminTok, nil), http.StatusOK)
	c.call(rq("GET", "/v1/jobs?state=done", auditorTok, nil), http.StatusBadRequest)
	c.call(rq("GET", "/v1/jobs?state=reported&outcome=failed", auditorTok, nil), http.StatusOK)
	c.call(rq("GET", "/v1/jobs?outcome=lost", auditorTok, nil), http.StatusBadRequest)
	c.call(rq("GET", "/v1/jobs?order=newest&prefix=j&limit=1", auditorTok, nil), http.StatusOK)
	c.call(rq("GET", "/v1/jobs?order=oldest", auditorTok, nil), http.StatusBadRequest)
	c.call(rq("GET", "/v1/overview", auditorTok, nil), http.StatusOK)
	c.call(rq("GET", "/v1/overview?x=1", auditorTok, nil), http.StatusBadRequest)
	// A cap on requeues: the job answers with it; a bad one is refused.
	two := 2
	c.call(rq("POST", "/v1/jobs", adminTok, api.Submit{ID: "capped", Kind: "evaluation", MaxRequeues: &two}), http.StatusCreated)
	c.call(rq("POST", "/v1/jobs", adminTok, `{"id":"capped2","kind":"evaluation","max_requeues":-1}`), http.StatusBadRequest)
	c.call(rq("POST", "/v1/jobs/capped/cancel", adminTok, nil), http.StatusOK)
	// A job's own timing: answered with the job; a bad one is refused.
	c.call(rq("POST", "/v1/jobs", adminTok, `{"id":"timed","kind":"run","toleration_seconds":30}`), http.StatusCreated)
	c.call(rq("POST", "/v1/jobs", adminTok, `{"id":"timed2","kind":"run","toleration_seconds":-1}`), http.StatusBadRequest)
	c.call(rq("POST", "/v1/jobs/timed/cancel", adminTok, nil), http.StatusOK)
	c.call(rq("GET", "/v1/jobs/j1", auditorTok, nil), http.StatusOK)
	c.call(rq("GET", "/v1/jobs/nope", auditorTok, nil), http.StatusNotFound)
	c.call(rq("GET", "/v1/jobs/a%20b", auditorTok, nil), http.StatusBadRequest)
	// Batches: each item answered in its place, the bad ones alone refused.
	batch := api.SubmitBatch{Jobs: []api.Submit{{ID: "b1", Kind: "evaluation", Spec: spec}, {ID: "j1", Kind: "run", Spec: spec},
		{ID: "j1", Kind: "evaluation"}, {ID: "a b", Kind: "run"}, {ID: "b2", Kind: "batch"}}}
	got := decode[api.SubmitBatchReply](t, c.call(rq("POST", "/v1/jobs/batch", adminTok, batch), http.StatusOK), http.StatusOK)
	if st := submittedStatuses(got); !slices.Equal(st, []int{201, 200, 409, 400, 400}) {
		t.Errorf("batch statuses %v", st)
	}
	c.call(rq("POST", "/v1/jobs/batch", adminTok, api.SubmitBatch{Jobs: []api.Submit{}}), http.StatusBadRequest)
	c.call(rq("POST", "/v1/jobs/batch", adminTok, `{"jobs":[{"id":"b3"}],"more":1}`), http.StatusBadRequest)
	c.call(rq("POST", "/v1/jobs/batch", adminTok, `{"jobs":[{"id":"b3","kind":"run","spec":{}}]}`), http.StatusOK)
	c.call(rq("POST", "/v1/jobs/b1/cancel", adminTok, nil), http.StatusOK)

	// Workers: take, beat, start, report, report again.
	g := decode[api.Grants](t, c.call(rq("POST", "/v1/workers/w1/acquire", w1Tok, api.Acquire{Max: 2}), http.StatusOK), http.StatusOK)
	if len(g.Leases) != 2 {
		t.Fatalf("grants %+v", g)
	}
	l := g.Leases[1].Lease                                                                             // j1's (j0 was queued first)
	c.call(rq("POST", "/v1/workers/w1/acquire", w1Tok, api.Acquire{WaitSeconds: 0.01}), http.StatusOK) // nothing came
	c.call(rq("POST", "/v1/workers/w1/acquire", w1Tok, `{"max":"2"}`), http.StatusBadRequest)
	c.call(rq("POST", "/v1/workers/w1/acquire", w1Tok, `{"max":1,"max":2}`), http.StatusBadRequest)
	// An acquire that starts, and a report that carries the next.
	f.submit("n1", event.KindRun)
	f.submit("n2", event.KindRun)
	gn := decode[api.Grants](t, c.call(rq("POST", "/v1/workers/w1/acquire", w1Tok, api.Acquire{Max: 1, Start: true}), http.StatusOK), http.StatusOK)
	if len(gn.Leases) != 1 || gn.Leases[0].Job.State != "running" || gn.Leases[0].Job.Lease.State != "running" {
		t.Fatalf("acquire with start: %+v", gn)
	}
	nextReport := api.Report{Worker: "w1", Outcome: "succeeded", Next: &api.Next{Max: 1, Start: true}}
	nl := fmt.Sprintf("/v1/leases/%d/report", gn.Leases[0].Lease)
	rn := decode[api.ReportReply](t, c.call(rq("POST", nl, w1Tok, nextReport), http.StatusOK), http.StatusOK)
	if rn.Next == nil || len(rn.Next.Leases) != 1 || rn.Next.Leases[0].Job.ID != "n2" {
		t.Fatalf("report with next: %+v", rn)
	}
	if again := decode[api.ReportReply](t, c.call(rq("POST", nl, w1Tok, nextReport), http.StatusOK), http.StatusOK); again.Next != nil || again.Seq != rn.Seq {
		t.Fatalf("the same report with next again: %+v, want the first answer without next", again)
	}
	c.call(rq("POST", nl, w1Tok, `{"worker":"w1","outcome":"succeeded","next":{"max":101}}`), http.StatusBadRequest)
	rn = decode[api.ReportReply](t, c.call(rq("POST", fmt.Sprintf("/v1/leases/%d/report", rn.Next.Leases[0].Lease), w1Tok,
		api.Report{Worker: "w1", Outcome: "failed", Next: &api.Next{}}), http.StatusOK), http.StatusOK)
	if rn.Next == nil || len(rn.Next.Leases) != 0 {
		t.Fatalf("report with next, nothing queued: %+v", rn)
	}
	// A grant after a wait says how long the daemon held the request.
	<-waiting // drain: every acquire so far passed the hook
	held := make(chan reply, 1)
	go func() {
		held <- c.call(rq("POST", "/v1/workers/w1/acquire", w1Tok, api.Acquire{WaitSeconds: 30}), http.StatusOK)
	}()
	<-waiting
	f.clock.Advance(2 * time.Second)
	f.submit("h1", event.KindRun)
	if g := decode[api.Grants](t, <-held, http.StatusOK); len(g.Leases) != 1 || g.Leases[0].HeldSeconds != 2 {
		t.Fatalf("grant after a wait: %+v, want one held 2 s", g.Leases)
	}
	c.call(rq("POST", "/v1/workers/w1/heartbeat", w1Tok, api.Heartbeat{Leases: []uint64{l, 9999}}), http.StatusOK)
	// Details of a lease's progress: the job's view shows them.
	c.call(rq("POST", "/v1/workers/w1/heartbeat", w1Tok, api.Heartbeat{Leases: []uint64{l}, Details: map[uint64]json.RawMessage{l: json.RawMessage(`{"step":1}`)}}), http.StatusOK)
	c.call(rq("POST", "/v1/workers/w1/heartbeat", w1Tok, fmt.Sprintf(`{"leases":[%d],"details":{"%d":[1]}}`, l, l)), http.StatusBadRequest)
	if j := decode[api.Job](t, c.call(rq("GET", "/v1/jobs/j1", auditorTok, nil), http.StatusOK), http.StatusOK); string(j.Details) != `{"step":1}` {
		t.Fatalf("j1 after a heartbeat with details: %+v", j)
	}
	c.call(rq("GET", "/v1/workers", auditorTok, nil), http.StatusOK)
	c.call(rq("GET", "/v1/workers?limit=0", adminTok, nil), http.StatusBadRequest)
	c.call(rq("POST", "/v1/workers/w1/heartbeat", w1Tok, `{"leases":[-1]}`), http.StatusBadRequest)
	c.call(rq("GET", "/v1/workers/w1/leases", w1Tok, nil), http.StatusOK)
	c.call(rq("GET", "/v1/workers/w2/leases", auditorTok, nil), http.StatusOK)
	c.call(rq("GET", "/v1/workers/a%20b/leases", adminTok, nil), http.StatusBadRequest)
	c.call(rq("POST", fmt.Sprintf("/v1/leases/%d/start", l), w1Tok, api.Start{Worker: "w1"}), http.StatusOK)
	c.call(rq("POST", fmt.Sprintf("/v1/leases/%d/start", l), w1Tok, api.Start{Worker: "w2"}), http.StatusForbidden)
	c.call(rq("POST", "/v1/leases/abc/start", w1Tok, api.Start{Worker: "w1"}), http.StatusBadRequest)
	c.call(rq("POST", "/v1/leases/9999/start", w1Tok, api.Start{Worker: "w1"}), http.StatusNotFound)
	c.call(rq("GET", "/v1/jobs/j1", adminTok, nil), http.StatusOK) // with its running lease
	report := api.Report{Worker: "w1", Outcome: "succeeded", Ref: "refs/leaselog/j1/1", Result: json.RawMessage(`{"score":0.9}`)}
	c.call(rq("POST", fmt.Sprintf("/v1/leases/%d/report", l), w1Tok, report), http.StatusOK)
	c.call(rq("POST", fmt.Sprintf("/v1/leases/%d/report", l), w1Tok, report), http.StatusOK)
	c.call(rq("POST", fmt.Sprintf("/v1/leases/%d/report", l), w1Tok, api.Report{Worker: "w1", Outcome: "done"}), http.StatusBadRequest)
	c.call(rq("POST", "/v1/leases/9999/report", w1Tok, report), http.StatusNotFound)
	// h1's worker lost it: lease.lost, no attempt.
	hl := decode[api.Grants](t, c.call(rq("GET", "/v1/workers/w1/leases", w1Tok, nil), http.StatusOK), http.StatusOK)
	for _, gr := range hl.Leases {
		if gr.Job.ID == "h1" {
			c.call(rq("POST", fmt.Sprintf("/v1/leases/%d/report", gr.Lease), w1Tok, api.Report{Worker: "w1", Outcome: "lost", Reason: "self-fenced"}), http.StatusOK)
		}
	}
	if j := decode[api.Job](t, c.call(rq("GET", "/v1/jobs/h1", adminTok, nil), http.StatusOK), http.StatusOK); j.State != "failed" || j.Attempts != 0 {
		t.Fatalf("h1 after a loss: %+v", j)
	}

	// A lease that expires: stale start and report.
	f.submit("j2", event.KindEvaluation)
	g = decode[api.Grants](t, c.call(rq("POST", "/v1/workers/w2/acquire", w2Tok, nil), http.StatusOK), http.StatusOK)
	l2 := g.Leases[0].Lease
	f.expireAll()
	late := api.Report{Worker: "w2", Outcome: "failed", Reason: "too late"}
	first := c.call(rq("POST", fmt.Sprintf("/v1/leases/%d/report", l2), w2Tok, late), http.StatusConflict)
	again := c.call(rq("POST", fmt.Sprintf("/v1/leases/%d/report", l2), w2Tok, late), http.StatusConflict)
	if !bytes.Equal(first.body, again.body) || !bytes.Contains(first.body, []byte(`"stale_report_seq":`)) {
		t.Errorf("stale reports: %s then %s", first.body, again.body)
	}
	c.call(rq("POST", fmt.Sprintf("/v1/leases/%d/start", l2), w2Tok, api.Start{Worker: "w2"}), http.StatusConflict)

	// Cancel and kill.
	f.submit("q1", event.KindRun)
	f.submit("q2", event.KindRun)
	c.call(rq("POST", "/v1/jobs/q1/cancel", adminTok, nil), http.StatusOK)
	c.call(rq("POST", "/v1/jobs/q2/kill", adminTok, `{}`), http.StatusOK)
	c.call(rq("POST", "/v1/jobs/nope/cancel", adminTok, nil), http.StatusNotFound)
	c.call(rq("POST", "/v1/jobs/nope/kill", adminTok, nil), http.StatusNotFound)
	c.call(rq("POST", "/v1/jobs/q1/cancel", adminTok, `{"why":"x"}`), http.StatusBadRequest)
	c.call(rq("POST", "/v1/jobs/a%20b/kill", adminTok, nil), http.StatusBadRequest)

	// Auditors.
	c.call(rq("GET", "/v1/jobs/j1/history", auditorTok, nil), http.StatusOK)
	c.call(rq("GET", "/v1/jobs/nope/history", auditorTok, nil), http.StatusNotFound)
	c.call(rq("GET", "/v1/jobs/a%20b/history", auditorTok, nil), http.StatusBadRequest)
	c.call(rq("GET", "/v1/jobs/q1/output", auditorTok, nil), http.StatusOK)                     // never ran: empty (output_test.go: bytes)
	c.call(rq("GET", "/v1/jobs/j1/output?stream=stderr", auditorTok, nil), http.StatusNotFound) // ran on w1, not the daemon's worker
	c.call(rq("GET", "/v1/jobs/j1/output?offset=-1", auditorTok, nil), http.StatusBadRequest)
	c.call(rq("GET", "/v1/jobs/piped/output", auditorTok, nil), http.StatusConflict)
	c.call(rq("GET", "/v1/leases", auditorTok, nil), http.StatusOK)
	c.call(rq("GET", "/v1/leases?state=expired&kind=evaluation&worker=w2", auditorTok, nil), http.StatusOK)
	c.call(rq("GET", "/v1/leases?state=reported", auditorTok, nil), http.StatusOK)
	c.call(rq("GET", "/v1/leases?state=queued", auditorTok, nil), http.StatusBadRequest)
	c.call(rq("GET", "/v1/events", auditorTok, nil), http.StatusOK)
	c.call(rq("GET", "/v1/events?type=lease.stale_report&since=2026-01-01T00:00:00Z&limit=10", auditorTok, nil), http.StatusOK)
	c.call(rq("GET", "/v1/events?job=j1&after=3", adminTok, nil), http.StatusOK)
	c.call(rq("GET", "/v1/events?limit=0", auditorTok, nil), http.StatusBadRequest)
	c.call(rq("GET", "/v1/events?after=18446744073709551615", auditorTok, nil), http.StatusOK)
	c.call(rq("GET", "/v1/events?type=lease.lost", auditorTok, nil), http.StatusOK)
	// Pages of every list, with their next, and refused paging (paging_test.go).
	// w2 takes two leases more, so that its own list has two pages.
	c.call(rq("POST", "/v1/jobs", adminTok, api.Submit{ID: "p1", Kind: "run"}), http.StatusCreated)
	c.call(rq("POST", "/v1/jobs", adminTok, api.Submit{ID: "p2", Kind: "run"}), http.StatusCreated)
	c.call(rq("POST", "/v1/workers/w2/acquire", w2Tok, api.Acquire{Max: 2}), http.StatusOK)
	for _, path := range []string{"/v1/jobs", "/v1/leases?state=reported", "/v1/jobs/j1/history", "/v1/workers/w2/leases", "/v1/events"} {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		var page struct {
			Next json.RawMessage `json:"next"`
		}
		if err := json.Unmarshal(c.call(rq("GET", path+sep+"limit=1", auditorTok, nil), http.StatusOK).body, &page); err != nil {
			t.Fatal(err)
		}
		after := strings.Trim(string(page.Next), `"`)
		if after == "" {
			t.Errorf("GET %s%slimit=1: no next; the test needs a list of two", path, sep)
		}
		c.call(rq("GET", path+sep+"limit=1&after="+after, auditorTok, nil), http.StatusOK)
		c.call(rq("GET", path+sep+"limit=1001", auditorTok, nil), http.StatusBadRequest)
		c.call(rq("GET", path+sep+"after=-", auditorTok, nil), http.StatusBadRequest)
	}
	evs := c.stream(rq("GET", "/v1/events/stream?after=0", auditorTok, nil), int(f.log.DurableSeq()))
	if last := evs[len(evs)-1].id; last != strconv.FormatUint(f.log.DurableSeq(), 10) {
		t.Errorf("stream ended at %s, log at %d", last, f.log.DurableSeq())
	}
	c.stream(request{method: "GET", path: "/v1/events/stream?type=lease.reported", token: adminTok, header: map[string]string{"Last-Event-ID": "1"}}, 1)
	c.call(rq("GET", "/v1/events/stream?after=x", auditorTok, nil), http.StatusBadRequest)
	// A browser's EventSource sends its token in the query (streamauth.go).
	c.stream(rq("GET", "/v1/events/stream?after=0&token="+auditorTok, "", nil), int(f.log.DurableSeq()))
	c.call(rq("GET", "/v1/events/stream?token=nope", "", nil), http.StatusUnauthorized)
	c.call(rq("GET", "/metrics", auditorTok, nil), http.StatusOK)

	// Operations: a backup, and the ones refused (backup_test.go).
	b := decode[api.Backup](t, c.call(rq("POST", api.BackupPath, adminTok, api.BackupRequest{To: "/b1"}), http.StatusOK), http.StatusOK)
	if b.To != "/b1" || b.Seq != f.log.DurableSeq() || b.Files == 0 {
		t.Errorf("backup: %+v, log at %d", b, f.log.DurableSeq())
	}
	c.call(rq("POST", api.BackupPath, adminTok, api.BackupRequest{To: "/b1"}), http.StatusBadRequest) // not empty now
	c.call(rq("POST", api.BackupPath, adminTok, api.BackupRequest{To: "b2"}), http.StatusBadRequest)
	elsewhere := newFixture(t, server.Options{Auth: testAuth(), Backup: func(string) (lease.BackupInfo, error) {
		return lease.BackupInfo{}, fmt.Errorf("%w: back the stream up with NATS", lease.ErrBackupElsewhere)
	}})
	ce := &contract{t: t, f: elsewhere, doc: doc, router: router, seen: c.seen}
	ce.call(rq("POST", api.BackupPath, adminTok, api.BackupRequest{To: "/b2"}), http.StatusConflict)

	// Bodies that never finish: 408, on every operation that reads one.
	slow := newFixture(t, server.Options{Auth: testAuth(), BodyTimeout: 50 * time.Millisecond})
	cs := &contract{t: t, f: slow, doc: doc, router: router, seen: c.seen}
	for _, op := range []struct {
		path, token string
		body        any
	}{
		{"/v1/jobs", adminTok, api.Submit{ID: "s1", Kind: "run", Spec: spec}},
		{"/v1/jobs/batch", adminTok, batch},
		{"/v1/jobs/s1/cancel", adminTok, `{}`},
		{"/v1/jobs/s1/kill", adminTok, `{}`},
		{"/v1/workers/w1/acquire", w1Tok, api.Acquire{Max: 1}},
		{"/v1/workers/w1/heartbeat", w1Tok, api.Heartbeat{Leases: []uint64{1}}},
		{"/v1/leases/1/start", w1Tok, api.Start{Worker: "w1"}},
		{"/v1/leases/1/report", w1Tok, report},
		{api.BackupPath, adminTok, api.BackupRequest{To: "/s1"}},
	} {
		cs.slow(rq("POST", op.path, op.token, op.body))
	}

	// No operation: still JSON.
	c.unrouted(rq("GET", "/v1/nope", adminTok, nil), http.StatusNotFound)
	c.unrouted(rq("DELETE", "/v1/jobs", adminTok, nil), http.StatusMethodNotAllowed)

	// A stopping daemon refuses new work.
	f.must(f.svc.Stop(context.Background(), lease.CancelQueued))
	c.call(rq("POST", "/v1/jobs", adminTok, api.Submit{ID: "late", Kind: "run"}), http.StatusServiceUnavailable)
	c.call(rq("POST", "/v1/workers/w1/acquire", w1Tok, api.Acquire{WaitSeconds: 1}), http.StatusServiceUnavailable)

	// A failed daemon refuses everything but its metrics. Closing the log
	// under the service makes its next write fail, and it fail-stops.
	f.must(f.log.Close())
	// w1 went unreachable when its leases expired, so its heartbeat writes.
	c.call(rq("POST", "/v1/workers/w1/heartbeat", w1Tok, api.Heartbeat{}), http.StatusServiceUnavailable)
	for _, op := range []struct {
		method, path, token string
		body                any
	}{
		{"GET", "/healthz", "", nil},
		{"POST", "/v1/jobs", adminTok, api.Submit{ID: "j1", Kind: "run", Spec: spec}},
		{"POST", "/v1/jobs/batch", adminTok, batch},
		{"GET", "/v1/jobs", auditorTok, nil},
		{"GET", "/v1/jobs/j1", auditorTok, nil},
		{"POST", "/v1/jobs/j1/cancel", adminTok, nil},
		{"POST", "/v1/jobs/j1/kill", adminTok, nil},
		{"GET", "/v1/jobs/j1/history", auditorTok, nil},
		{"GET", "/v1/jobs/j1/output", auditorTok, nil},
		{"POST", "/v1/workers/w1/acquire", w1Tok, nil},
		{"POST", "/v1/workers/w1/heartbeat", w1Tok, nil},
		{"GET", "/v1/workers/w1/leases", w1Tok, nil},
		{"POST", fmt.Sprintf("/v1/leases/%d/start", l), w1Tok, api.Start{Worker: "w1"}},
		{"POST", fmt.Sprintf("/v1/leases/%d/report", l), w1Tok, report},
		{"GET", "/v1/leases", auditorTok, nil},
		{"GET", "/v1/workers", auditorTok, nil},
		{"GET", "/v1/overview", auditorTok, nil},
		{"GET", "/v1/events", auditorTok, nil},
		{"GET", "/v1/events/stream", auditorTok, nil},
		{"POST", api.BackupPath, adminTok, api.BackupRequest{To: "/b3"}},
	} {
		c.call(rq(op.method, op.path, op.token, op.body), http.StatusServiceUnavailable)
	}
	c.call(session, http.StatusServiceUnavailable)
	if m := c.call(rq("GET", "/metrics", auditorTok, nil), http.StatusOK); !bytes.Contains(m.body, []byte("\nleaselog_up 0\n")) {
		t.Errorf("metrics of a failed daemon lack leaselog_up 0")
	}

	// Every answer the document lists was produced, but 500s: a 500 is a
	// bug; and a default, which stands for the statuses not listed (the
	// session's, for an OpenAPI linter that wants an answer other than 101).
	var missing []string
	for _, path := range doc.Paths.InMatchingOrder() {
		for method, op := range doc.Paths.Value(path).Operations() {
			for status := range op.Responses.Map() {
				key := fmt.Sprintf("%s %s %s", method, path, status)
				if !c.seen[key] && status != "500" && status != "default" {
					missing = append(missing, key)
				}
			}
		}
	}
	slices.Sort(missing)
	if len(missing) > 0 {
		t.Errorf("the scenario never produced:\n%s", strings.Join(missing, "\n"))
	}
}

func submittedStatuses(r api.SubmitBatchReply) []int {
	var out []int
	for _, j := range r.Jobs {
		out = append(out, j.Status)
	}
	return out
}

// TestOpenAPIRejectsUndescribedAnswers makes sure the contract test has
// teeth: answers the document does not describe fail validation.
func TestOpenAPIRejectsUndescribedAnswers(t *testing.T) {
	_, router := loadDoc(t)
	ctx := context.Background()
	validate := func(method, path string, status int, contentType, body string) error {
		req, err := http.NewRequest(method, "http://leaselog"+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		route, params, err := router.FindRoute(req)
		if err != nil {
			t.Fatal(err)
		}
		in := &openapi3filter.ResponseValidationInput{
			RequestValidationInput: &openapi3filter.RequestValidationInput{Request: req, PathParams: params, Route: route},
			Status:                 status, Header: http.Header{"Content-Type": {contentType}},
			Options: &openapi3filter.Options{IncludeResponseStatus: true},
		}
		in.SetBodyBytes([]byte(body))
		return openapi3filter.ValidateResponse(ctx, in)
	}
	if err := validate("GET", "/v1/jobs", 200, "application/json", `{"jobs":[]}`); err != nil {
		t.Fatalf("a described answer fails: %v", err)
	}
	for _, tc := range []struct {
		name, method, path string
		status             int
		contentType, body  string
	}{
		{"undocumented status", "GET", "/v1/jobs", 418, "application/json", `{"error":{"code":"internal","message":"teapot"}}`},
		{"null list", "GET", "/v1/jobs", 200, "application/json", `{"jobs":null}`},
		{"extra field", "GET", "/v1/jobs", 200, "application/json", `{"jobs":[],"more":true}`},
		{"wrong content type", "GET", "/v1/jobs", 200, "text/html", `<p>jobs</p>`},
		{"error without message", "GET", "/v1/jobs/j1", 404, "application/json", `{"error":{"code":"not_found"}}`},
		{"wrong error code", "GET", "/v1/jobs/j1", 404, "application/json", `{"error":{"code":"gone","message":"x"}}`},
		{"stale without seq", "POST", "/v1/leases/3/report", 409, "application/json", `{"error":{"code":"stale_lease","message":"x"}}`},
		{"job without lease field", "GET", "/v1/jobs/j1", 200, "application/json",
			`{"id":"j1","kind":"run","state":"queued","attempts":0,"leases":0,"spec":{},"submitted":"2026-01-01T00:00:00Z","updated":"2026-01-01T00:00:00Z"}`},
		{"empty leases as null", "POST", "/v1/workers/w1/acquire", 200, "application/json", `{"leases":null}`},
		{"bad health", "GET", "/healthz", 200, "application/json", `{"status":"fine","seq":1}`},
	} {
		if err := validate(tc.method, tc.path, tc.status, tc.contentType, tc.body); err == nil {
			t.Errorf("%s: %d %s passes validation", tc.name, tc.status, tc.body)
		}
	}
}
