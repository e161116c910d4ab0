package server_test

// Fuzzing of every HTTP handler. Each input sends one request to the same
// world — a real Server on a real lease.Service over Pebble on vfs.NewMem(),
// with a manual clock, after a seed scenario that leaves jobs queued, leased,
// running, revoked, reported, expired and cancelled; a world an input wrote
// to is not used again. The answer must be one the API allows for a client's
// mistake:
//
//	no panic, and no 5xx: nothing fails on the server's side in this world
//	every error: the JSON error shape, with a code that fits its status
//	every refusal (4xx): /healthz's seq unchanged — but for a stale report
//	  (409), which records at most one lease.stale_report: the one it names
//	every read (GET, HEAD): nothing written
//	every 2xx: its route's document, decoded strictly (for /metrics and the
//	  event stream, their own formats)
//	whatever was written: durable before the answer, and the table rebuilt
//	  from the log equals the live one
//
// FuzzHandler builds the request from the route table, with a fuzzed method,
// path segment, query, Authorization, Last-Event-ID, Content-Type and body.
// FuzzRequest takes raw HTTP/1.1 bytes, for what the table cannot build
// (escaped or absolute paths, chunked bodies, repeated headers). Both parse
// the request as net/http's server does and call ServeHTTP directly, so that
// the world is deterministic and a failing input replays exactly.

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/replay"
	"github.com/leaselog/leaselog/server"
)

// fuzzRoute is a route of the API and the document of its 2xx answer.
type fuzzRoute struct {
	method, pattern string
	answer          func() any // a new value to decode a 2xx into; nil: not JSON
}

func doc[T any]() func() any { return func() any { return new(T) } }

// fuzzRoutes are the API's routes. TestFuzzRoutesAreTheDocuments checks them
// against docs/openapi.yaml, so that a route added there is fuzzed too.
var fuzzRoutes = []fuzzRoute{
	{"GET", "/healthz", doc[api.Health]()},
	{"GET", "/metrics", nil},
	{"POST", "/v1/jobs", doc[api.Job]()},
	{"GET", "/v1/jobs", doc[api.Jobs]()},
	{"GET", "/v1/jobs/{id}", doc[api.Job]()},
	{"POST", "/v1/jobs/{id}/cancel", doc[api.Job]()},
	{"POST", "/v1/jobs/{id}/kill", doc[api.Job]()},
	{"GET", "/v1/jobs/{id}/history", doc[struct {
		Events []api.Event `json:"events"`
	}]()},
	{"POST", "/v1/workers/{worker}/acquire", doc[api.Grants]()},
	{"POST", "/v1/workers/{worker}/heartbeat", doc[api.HeartbeatReply]()},
	{"GET", "/v1/workers/{worker}/leases", doc[api.Grants]()},
	{"POST", "/v1/leases/{lease}/start", doc[api.Lease]()},
	{"POST", "/v1/leases/{lease}/report", doc[api.ReportReply]()},
	{"GET", "/v1/leases", doc[api.Leases]()},
	{"GET", "/v1/events", doc[api.Events]()},
	{"GET", "/v1/events/stream", nil},
	{"POST", "/v1/jobs/batch", doc[api.SubmitBatchReply]()},
	{"GET", "/v1/jobs/{id}/output", nil}, // raw bytes, not JSON
	{"GET", "/v1/workers", doc[api.Workers]()},
	{"POST", api.BackupPath, doc[api.Backup]()},
	{"GET", "/v1/overview", doc[api.Overview]()},
}

func (rt *fuzzRoute) String() string { return rt.method + " " + rt.pattern }

// routeOf is the route net/http's mux picks for req with the same patterns
// as the server's, or nil.
var routeOf = func() func(*http.Request) *fuzzRoute {
	mux := http.NewServeMux()
	byPattern := map[string]*fuzzRoute{}
	for i := range fuzzRoutes {
		rt := &fuzzRoutes[i]
		mux.HandleFunc(rt.String(), func(http.ResponseWriter, *http.Request) {})
		byPattern[rt.String()] = rt
	}
	return func(req *http.Request) *fuzzRoute {
		_, p := mux.Handler(req)
		return byPattern[p]
	}
}()

const (
	w3Tok       = "w3-token-0123456789"
	fuzzMaxBody = 4 << 10 // small, so that the fuzzer reaches body_too_large
	hangAfter   = 10 * time.Second
)

// fuzzTokens are the tokens FuzzHandler's who byte picks from (1-based).
var fuzzTokens = []string{adminTok, auditorTok, w1Tok, w2Tok, w3Tok}

func fuzzAuth() *server.Auth {
	a := testAuth()
	a.Workers["w3"] = w3Tok
	return a
}

// fuzzWorld is a server after the seed scenario. It is deterministic: the
// clock is manual, ULIDs come from a seeded source, nothing sweeps on its
// own, and an acquire never waits (its long-poll ends at once).
type fuzzWorld struct {
	log  *eventlog.Log
	svc  *lease.Service
	srv  *server.Server
	logs *logBuffer // the server's log lines of the current input
}

// newFuzzWorld builds the world, with auth (nil: open), after this scenario:
//
//	x-run    its lease (w3) expired: failed, "worker lost"; w3's late report kept as stale
//	x-eval   its first lease (w3) expired; queued again, then acquired by w1
//	a-run    acquired by w1              r-eval  running on w1, heartbeated
//	v-run    running on w2, cancel sent  k-run   running on w2, kill sent
//	d-eval   reported by w2              c-run   cancelled while queued
//	q-run, q-eval  queued                w3      unreachable
func newFuzzWorld(auth *server.Auth) (*fuzzWorld, error) {
	clock := clocktest.New(clocktest.Epoch)
	log, svc, err := leasetest.OpenErr(leasetest.Clock(clock))
	if err != nil {
		return nil, err
	}

	ctx := context.Background()
	step := func(_ any, e error) { err = cmp.Or(err, e) }
	leases := map[string]uint64{}
	acquire := func(worker string, n int) {
		gs, e := svc.Acquire(ctx, worker, n)
		step(nil, e)
		for _, g := range gs {
			leases[g.Job.ID] = g.Lease
		}
	}
	for _, j := range []struct {
		id   string
		kind event.Kind
	}{{"x-run", event.KindRun}, {"x-eval", event.KindEvaluation}, {"a-run", event.KindRun},
		{"r-eval", event.KindEvaluation}, {"v-run", event.KindRun}, {"k-run", event.KindRun},
		{"d-eval", event.KindEvaluation}, {"c-run", event.KindRun}, {"q-run", event.KindRun},
		{"q-eval", event.KindEvaluation}} {
		if j.id == "a-run" { // the first two are leased and expired before the others come
			acquire("w3", 2)
			for range int(leasetest.Timing().Toleration/time.Second) + 2 { // steps under grace: no absence
				clock.Advance(time.Second)
				step(nil, svc.Sweep())
			}
			late := lease.Report{Outcome: event.OutcomeSucceeded, Ref: "refs/leaselog/x-run/late"}
			if _, e := svc.Report(ctx, "w3", leases["x-run"], late); !errors.Is(e, lease.ErrStaleLease) {
				step(nil, fmt.Errorf("late report: %v, want it stale", e))
			}
		}
		_, _, e := svc.Submit(ctx, j.id, j.kind, []byte(`{"run":"true"}`))
		step(nil, e)
	}
	acquire("w1", 3) // x-eval, queued again before the others were submitted; a-run; r-eval
	step(svc.Start(ctx, "w1", leases["r-eval"]))
	step(svc.Heartbeat(ctx, "w1", []uint64{leases["x-eval"], leases["a-run"], leases["r-eval"]}))
	acquire("w2", 3) // v-run, k-run, d-eval
	step(svc.Start(ctx, "w2", leases["v-run"]))
	step(svc.Start(ctx, "w2", leases["k-run"]))
	step(svc.Cancel(ctx, "v-run"))
	step(svc.Kill(ctx, "k-run"))
	step(svc.Report(ctx, "w2", leases["d-eval"], lease.Report{Outcome: event.OutcomeSucceeded, Result: []byte(`{"score":0.9}`)}))
	step(svc.Cancel(ctx, "c-run"))
	if err != nil {
		log.Close()
		return nil, fmt.Errorf("seed scenario: %w", err)
	}

	w := &fuzzWorld{log: log, svc: svc, logs: &logBuffer{}}
	w.srv = server.New(svc, server.Options{Auth: auth, Logger: zerolog.New(w.logs), Registerer: prometheus.NewRegistry(), MaxBody: fuzzMaxBody})
	server.SetWaitHook(w.srv, func(ctx context.Context) context.Context {
		ctx, cancel := context.WithCancel(ctx)
		cancel()
		return ctx
	})
	return w, nil
}

func (w *fuzzWorld) close() {
	w.srv.Close()
	_ = w.log.Close()
}

// fuzzWorlds are the worlds of this process, open and with auth. A world
// serves input after input as long as none writes to it: it is then the
// world a fresh one would be (but for the HTTP counters of /metrics), and
// building one costs milliseconds where most inputs, refused, cost
// microseconds.
var fuzzWorlds [2]*fuzzWorld

// fuzzServe sends req to the world with auth or without it, and checks the
// exchange (see exchange).
func fuzzServe(t *testing.T, authed bool, req *http.Request) (rt *fuzzRoute, status int) {
	t.Helper()
	i := b2u(authed)
	w := fuzzWorlds[i]
	if w == nil {
		var auth *server.Auth
		if authed {
			auth = fuzzAuth()
		}
		var err error
		if w, err = newFuzzWorld(auth); err != nil {
			t.Fatal(err)
		}
		fuzzWorlds[i] = w
	}
	w.logs.reset()
	seq := w.log.LastSeq()
	defer func() { // also when the check failed: the next input needs a fresh world
		// A backup writes no event but a directory, which the same input
		// would find the next time.
		if w.log.LastSeq() != seq || t.Failed() || rt != nil && rt.pattern == api.BackupPath && status < 300 {
			w.close()
			fuzzWorlds[i] = nil
		}
	}()
	return w.exchange(t, req)
}

// logBuffer is where a world's server logs.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *logBuffer) reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.b.Reset()
}

// answer is what the server wrote.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// flushCancel records an answer and cancels the request's context on the
// first flush: an event stream, which flushes its headers first, then writes
// every event the log holds and returns instead of waiting for more.
type flushCancel struct {
	*httptest.ResponseRecorder
	cancel context.CancelFunc
}

func (r *flushCancel) Flush() {
	r.ResponseRecorder.Flush()
	r.cancel()
}

func (w *fuzzWorld) serve(req *http.Request) answer {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := &flushCancel{ResponseRecorder: httptest.NewRecorder(), cancel: cancel}
	w.srv.ServeHTTP(rec, req.WithContext(ctx))
	res := rec.Result()
	return answer{status: res.StatusCode, header: res.Header, body: rec.Body.Bytes()}
}

// seq is /healthz's seq.
func (w *fuzzWorld) seq(t *testing.T) uint64 {
	t.Helper()
	a := w.serve(httptest.NewRequest("GET", "/healthz", nil))
	var h api.Health
	if err := strictJSON(a.body, &h); a.status != http.StatusOK || err != nil {
		t.Fatalf("/healthz: %d %s: %v\nserver log:\n%s", a.status, a.body, err, w.logs)
	}
	return h.Seq
}

// errorCodes are the codes each status may carry in this world.
var errorCodes = map[int][]string{
	http.StatusBadRequest:       {api.CodeBadRequest, api.CodeTooLarge},
	http.StatusUnauthorized:     {api.CodeUnauthorized},
	http.StatusForbidden:        {api.CodeForbidden},
	http.StatusNotFound:         {api.CodeNotFound},
	http.StatusMethodNotAllowed: {api.CodeMethod},
	http.StatusConflict:         {api.CodeJobExists, api.CodeStaleLease},
	http.StatusRequestTimeout:   {api.CodeBodyTimeout}, // not in this world: a recorder has no deadline
}

var snakeCase = regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)

// exchange sends req and checks the answer and what it did to the log. It
// returns the route that took req (nil: none) and the answer's status.
func (w *fuzzWorld) exchange(t *testing.T, req *http.Request) (*fuzzRoute, int) {
	t.Helper()
	rt := routeOf(req)
	before := w.seq(t)
	// Nothing in this world waits: a request still in the server after
	// hangAfter hangs, and the process dies with every goroutine's stack,
	// which makes the fuzzer keep the input.
	watchdog := time.AfterFunc(hangAfter, func() {
		buf := make([]byte, 1<<20)
		panic(fmt.Sprintf("%s %q hung for %v:\n%s", req.Method, req.RequestURI, hangAfter, buf[:runtime.Stack(buf, true)]))
	})
	a := w.serve(req)
	watchdog.Stop()
	after := w.seq(t)
	fail := func(format string, args ...any) {
		t.Helper()
		body := a.body
		if len(body) > 2048 {
			body = body[:2048]
		}
		t.Fatalf("%s %q (route %v) answered %d %s\n%s\nserver log:\n%s",
			req.Method, req.RequestURI, rt, a.status, bytes.TrimSpace(body), fmt.Sprintf(format, args...), w.logs)
	}
	if last := w.log.LastSeq(); last != after {
		fail("the log has staged up to seq %d but only %d is durable: an event not yet durable when answered", last, after)
	}
	switch {
	case a.status >= 500:
		fail("a server error for a client's request")
	case a.status >= 400:
		w.checkError(t, rt, a, before, after, fail)
	case a.status == http.StatusOK || a.status == http.StatusCreated:
		if rt == nil {
			fail("a success on no route of the API")
		}
		if a.status == http.StatusCreated && rt.pattern != "/v1/jobs" {
			fail("201 from a route that creates nothing")
		}
		if (req.Method == "GET" || req.Method == "HEAD") && after != before {
			fail("a read wrote: seq %d, was %d", after, before)
		}
		if err := checkDocument(rt, req, a); err != nil {
			fail("%v", err)
		}
		if a.status == http.StatusCreated {
			w.checkLocation(t, req, a, fail)
		}
	default:
		fail("a status the API never answers")
	}
	if after != before {
		w.checkFold(t, fail)
	}
	return rt, a.status
}

// checkLocation checks that the Location of a created job names it: a GET
// of it, with the same credentials, answers that job.
func (w *fuzzWorld) checkLocation(t *testing.T, req *http.Request, a answer, fail func(string, ...any)) {
	t.Helper()
	var created api.Job
	_ = json.Unmarshal(a.body, &created) // checked by checkDocument
	loc := a.header.Get("Location")
	get, err := http.NewRequest("GET", "http://leaselog"+loc, nil)
	if err != nil {
		fail("Location %q: %v", loc, err)
	}
	get.Header.Set("Authorization", req.Header.Get("Authorization"))
	got := w.serve(get)
	var j api.Job
	if err := strictJSON(got.body, &j); got.status != http.StatusOK || err != nil || j.ID != created.ID {
		fail("job %q created at Location %q, where GET answers %d %s", created.ID, loc, got.status, bytes.TrimSpace(got.body))
	}
}

// checkError checks an error answer: its shape, its code, and that it wrote
// nothing — but for a stale report, kept as the one event it names.
func (w *fuzzWorld) checkError(t *testing.T, rt *fuzzRoute, a answer, before, after uint64, fail func(string, ...any)) {
	t.Helper()
	if ct := a.header.Get("Content-Type"); ct != "application/json" {
		fail("an error with Content-Type %q, want application/json", ct)
	}
	var eb api.ErrorBody
	if err := strictJSON(a.body, &eb); err != nil || eb.Error == nil {
		fail("not the JSON error shape: %v", err)
	}
	if !snakeCase.MatchString(eb.Error.Code) || eb.Error.Message == "" {
		fail("error code %q, message %q: want a snake_case code and a message", eb.Error.Code, eb.Error.Message)
	}
	if !slices.Contains(errorCodes[a.status], eb.Error.Code) {
		fail("code %q does not go with status %d (want one of %v)", eb.Error.Code, a.status, errorCodes[a.status])
	}
	switch a.status {
	case http.StatusUnauthorized:
		if a.header.Get("WWW-Authenticate") == "" {
			fail("401 without WWW-Authenticate")
		}
	case http.StatusMethodNotAllowed:
		if a.header.Get("Allow") == "" {
			fail("405 without Allow")
		}
	}
	if eb.StaleReportSeq == 0 {
		if after != before {
			fail("refused, yet the log went from seq %d to %d", before, after)
		}
		return
	}
	if eb.Error.Code != api.CodeStaleLease || rt == nil || !strings.HasSuffix(rt.pattern, "/report") {
		fail("stale_report_seq on an answer that is not a stale report")
	}
	e, err := w.log.Get(eb.StaleReportSeq)
	if err != nil || e.Type != event.TypeStaleReport {
		fail("stale_report_seq %d is %v (%v), want a lease.stale_report", eb.StaleReportSeq, e.String(), err)
	}
	if fresh := eb.StaleReportSeq > before; after != before+b2u(fresh) || (fresh && eb.StaleReportSeq != after) {
		fail("a stale report took the log from seq %d to %d, naming %d: want at most the one event it names", before, after, eb.StaleReportSeq)
	}
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

// checkDocument checks a 2xx answer against its route's document.
func checkDocument(rt *fuzzRoute, req *http.Request, a answer) error {
	ct := a.header.Get("Content-Type")
	switch {
	case rt.answer != nil:
		if ct != "application/json" {
			return fmt.Errorf("Content-Type %q, want application/json", ct)
		}
		if err := strictJSON(a.body, rt.answer()); err != nil {
			return fmt.Errorf("not the route's JSON document: %w", err)
		}
	case rt.pattern == "/metrics":
		if !strings.HasPrefix(ct, "text/plain") {
			return fmt.Errorf("metrics as %q", ct)
		}
		return checkMetrics(a.body, req.URL.Query()["name[]"])
	case rt.pattern == "/v1/events/stream":
		if ct != "text/event-stream" {
			return fmt.Errorf("event stream as %q", ct)
		}
		return checkStream(a.body, req.Method == "HEAD")
	}
	return nil
}

// checkMetrics checks Prometheus text: with no name[] filter it says the
// service is up; with one (an empty name selects nothing), it holds only the
// families named.
func checkMetrics(body []byte, names []string) error {
	if len(names) == 0 {
		if !bytes.Contains(body, []byte("\nleaselog_up 1\n")) {
			return errors.New("metrics without leaselog_up 1")
		}
		return nil
	}
	for _, line := range strings.Split(string(body), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		name := f[0]
		if name == "#" && len(f) > 2 {
			name = f[2] // # HELP name …, # TYPE name …
		}
		name, _, _ = strings.Cut(name, "{")
		if !slices.ContainsFunc(names, func(n string) bool {
			return name == n || name == n+"_bucket" || name == n+"_sum" || name == n+"_count"
		}) {
			return fmt.Errorf("metrics filtered by name[]=%q has %q", names, line)
		}
	}
	return nil
}

// checkStream checks server-sent events: ids growing, each event's data the
// JSON of an event with that seq and type.
func checkStream(body []byte, head bool) error {
	if head && len(body) > 0 {
		return errors.New("a HEAD of the event stream sent events")
	}
	r := bufio.NewReader(bytes.NewReader(body))
	var last uint64
	for {
		e, err := readEvent(r)
		if err == io.EOF && e.id == "" && e.data == "" {
			return nil
		}
		if err != nil {
			return fmt.Errorf("event stream: %w (after seq %d)", err, last)
		}
		seq, err := strconv.ParseUint(e.id, 10, 64)
		if err != nil || seq <= last {
			return fmt.Errorf("event id %q after %d", e.id, last)
		}
		var ev api.Event
		if err := strictJSON([]byte(e.data), &ev); err != nil || ev.Seq != seq || ev.Type != e.event {
			return fmt.Errorf("event %s (%s): data %s: %v", e.id, e.event, e.data, err)
		}
		last = seq
	}
}

// strictJSON decodes one JSON value into v, refusing unknown fields and
// anything after it.
func strictJSON(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if _, err := d.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// checkFold checks that the table rebuilt from the log is the live table.
func (w *fuzzWorld) checkFold(t *testing.T, fail func(string, ...any)) {
	t.Helper()
	var live []byte
	if err := w.svc.View(context.Background(), func(t *projection.Table) { live = t.Snapshot() }); err != nil {
		fail("view: %v", err)
	}
	rebuilt, _, err := replay.Rebuild(w.log, zerolog.Nop())
	if err != nil || !bytes.Equal(rebuilt.Snapshot(), live) {
		fail("the table rebuilt from the log differs from the live one (%v)", err)
	}
}

func FuzzHandler(f *testing.F) {
	f.Fuzz(func(t *testing.T, route uint8, method, seg, query string, who uint8, token, lastEventID, contentType string, body []byte) {
		raw, auth := handlerRequest(route, method, seg, query, who, token, lastEventID, contentType, body)
		if req, ok := parseRequest(raw); ok {
			fuzzServe(t, auth != nil, req)
		}
	})
}

// FuzzRequest: raw request bytes. A request with an Authorization header
// goes to a server with auth, any other to an open one.
func FuzzRequest(f *testing.F) {
	f.Fuzz(func(t *testing.T, raw []byte) {
		req, ok := parseRequest(raw)
		if !ok {
			return
		}
		_, authed := req.Header["Authorization"]
		fuzzServe(t, authed, req)
	})
}
