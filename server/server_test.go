package server_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/internal/testkit/testutil"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/server"
)

// fixture is a real lease.Service on an in-memory Pebble with a manual clock,
// behind a Server on a real HTTP listener.
type fixture struct {
	t     *testing.T
	clock *clocktest.Clock
	log   *eventlog.Log
	svc   *lease.Service
	srv   *server.Server
	reg   *prometheus.Registry
	ts    *httptest.Server
	logs  *testutil.SyncBuffer
}

func newFixture(t *testing.T, opts server.Options) *fixture {
	return newFixtureHooked(t, opts, nil)
}

// newFixtureHooked is newFixture with a hook run on the server before it
// serves (to set test hooks), and options of the store or the service.
func newFixtureHooked(t *testing.T, opts server.Options, hook func(*server.Server), more ...leasetest.Option) *fixture {
	t.Helper()
	f := &fixture{t: t, clock: clocktest.New(clocktest.Epoch), reg: prometheus.NewRegistry(), logs: &testutil.SyncBuffer{}}
	f.log, f.svc = leasetest.Open(t, append([]leasetest.Option{leasetest.Clock(f.clock)}, more...)...)
	if opts.Registerer == nil && opts.Metrics == nil {
		opts.Registerer = f.reg
	}
	opts.Logger = zerolog.New(f.logs)
	if opts.Clock == nil {
		opts.Clock = f.clock
	}
	f.srv = server.New(f.svc, opts)
	if hook != nil {
		hook(f.srv)
	}
	f.ts = httptest.NewServer(f.srv)
	t.Cleanup(func() {
		f.srv.Close() // ends streams and long-polls, so that the listener can close
		f.ts.Close()  // then the store closes (leasetest)
	})
	return f
}

// reply is an HTTP answer, read whole.
type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) String() string { return fmt.Sprintf("%d %s", r.status, bytes.TrimSpace(r.body)) }

// request is one call: body is nil (none), a string (sent as is) or a value
// (sent as JSON).
type request struct {
	method, path, token string
	body                any
	header              map[string]string
}

func (f *fixture) do(method, path, token string, body any) reply {
	f.t.Helper()
	return f.send(request{method: method, path: path, token: token, body: body})
}

func (f *fixture) send(rq request) reply {
	f.t.Helper()
	req := f.newRequest(context.Background(), rq)
	resp, err := f.ts.Client().Do(req)
	if err != nil {
		f.t.Fatalf("%s %s: %v", rq.method, rq.path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		f.t.Fatalf("%s %s: read answer: %v", rq.method, rq.path, err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

func (f *fixture) newRequest(ctx context.Context, rq request) *http.Request {
	f.t.Helper()
	var body io.Reader
	switch b := rq.body.(type) {
	case nil:
	case string:
		body = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			f.t.Fatal(err)
		}
		body = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(ctx, rq.method, f.ts.URL+rq.path, body)
	if err != nil {
		f.t.Fatal(err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if rq.token != "" {
		req.Header.Set("Authorization", "Bearer "+rq.token)
	}
	for k, v := range rq.header {
		req.Header.Set(k, v)
	}
	return req
}

// decode decodes a 2xx JSON answer into a T, failing the test on anything else.
func decode[T any](t *testing.T, r reply, want int) T {
	t.Helper()
	var v T
	if r.status != want {
		t.Fatalf("status %d, want %d: %s", r.status, want, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json", ct)
	}
	d := json.NewDecoder(bytes.NewReader(r.body))
	d.DisallowUnknownFields()
	if err := d.Decode(&v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, r.body, err)
	}
	return v
}

// wantError checks an error answer: its status, the JSON error body with its
// code, and a message containing each of msg.
func wantError(t *testing.T, r reply, status int, code string, msg ...string) api.ErrorBody {
	t.Helper()
	if r.status != status {
		t.Fatalf("status %d, want %d: %s", r.status, status, r.body)
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json: %s", ct, r.body)
	}
	var eb api.ErrorBody
	d := json.NewDecoder(bytes.NewReader(r.body))
	d.DisallowUnknownFields()
	if err := d.Decode(&eb); err != nil || eb.Error == nil {
		t.Fatalf("error body %s: %v", r.body, err)
	}
	if eb.Error.Code != code {
		t.Fatalf("code %q, want %q: %s", eb.Error.Code, code, r.body)
	}
	for _, m := range msg {
		if !strings.Contains(eb.Error.Message, m) {
			t.Fatalf("message %q does not mention %q", eb.Error.Message, m)
		}
	}
	return eb
}

// seq is the service's durable seq, as /healthz tells it.
func (f *fixture) seq() uint64 {
	f.t.Helper()
	return decode[api.Health](f.t, f.do("GET", "/healthz", "", nil), http.StatusOK).Seq
}

func (f *fixture) must(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
}

// submit queues a job through the service itself.
func (f *fixture) submit(id string, kind event.Kind) {
	f.t.Helper()
	_, _, err := f.svc.Submit(context.Background(), id, kind, []byte(`{"run":"true"}`))
	f.must(err)
}

// grant acquires one lease for worker through the service itself.
func (f *fixture) grant(worker string) uint64 {
	f.t.Helper()
	gs, err := f.svc.Acquire(context.Background(), worker, 1)
	f.must(err)
	if len(gs) != 1 {
		f.t.Fatalf("acquire for %s: %d grants, want 1", worker, len(gs))
	}
	return gs[0].Lease
}

// expireAll moves the clock past toleration, sweeping every second (a
// longer step would be taken for the daemon's own absence), so that every
// live lease expires.
func (f *fixture) expireAll() {
	f.t.Helper()
	for range int(leasetest.Timing().Toleration/time.Second) + 2 {
		f.clock.Advance(time.Second)
		f.must(f.svc.Sweep())
	}
}

func TestHealth(t *testing.T) {
	f := newFixture(t, server.Options{})
	h := decode[api.Health](t, f.do("GET", "/healthz", "", nil), http.StatusOK)
	if h.Status != "ok" || h.Seq != f.log.DurableSeq() || h.Seq == 0 {
		t.Fatalf("health %+v, log at %d", h, f.log.DurableSeq())
	}
	f.submit("j1", event.KindRun)
	if got := f.seq(); got != h.Seq+1 {
		t.Fatalf("seq %d after a submit, want %d", got, h.Seq+1)
	}
}

func TestHealthAfterStopIsStillOK(t *testing.T) {
	// A stopping daemon still answers reads: /healthz tells liveness of the
	// service, not whether it takes jobs.
	f := newFixture(t, server.Options{})
	f.must(f.svc.Stop(context.Background(), lease.CancelQueued))
	decode[api.Health](t, f.do("GET", "/healthz", "", nil), http.StatusOK)
	wantError(t, f.do("POST", "/v1/jobs", "", `{"id":"j1","kind":"run"}`), http.StatusServiceUnavailable, api.CodeStopping)
	wantError(t, f.do("POST", "/v1/workers/w1/acquire", "", `{}`), http.StatusServiceUnavailable, api.CodeStopping)
}

// TestFailedServiceRefusesAllButMetrics: once a write fails, the service
// fail-stops; /healthz says so with a 503, and so does every call but
// /metrics, whose leaselog_up says it too.
func TestFailedServiceRefusesAllButMetrics(t *testing.T) {
	f := newFixture(t, server.Options{})
	f.submit("j1", event.KindRun)
	f.must(f.log.Close())
	wantError(t, f.do("POST", "/v1/jobs", "", `{"id":"j2","kind":"run"}`), http.StatusServiceUnavailable, api.CodeUnavailable, "closed")
	wantError(t, f.do("GET", "/healthz", "", nil), http.StatusServiceUnavailable, api.CodeUnavailable, "restart")
	wantError(t, f.do("GET", "/v1/jobs/j1", "", nil), http.StatusServiceUnavailable, api.CodeUnavailable)
	wantError(t, f.do("GET", "/v1/events", "", nil), http.StatusServiceUnavailable, api.CodeUnavailable)
	wantError(t, f.do("GET", "/v1/events/stream", "", nil), http.StatusServiceUnavailable, api.CodeUnavailable)
	if m := f.do("GET", "/metrics", "", nil); m.status != http.StatusOK || !strings.Contains(string(m.body), "\nleaselog_up 0\n") {
		t.Fatalf("metrics of a failed service: %d, leaselog_up: %q", m.status, grep(string(m.body), "leaselog_up"))
	}
	if !strings.Contains(f.logs.String(), `"level":"error"`) {
		t.Fatalf("5xx not logged at error level:\n%s", f.logs)
	}
}

func TestUnknownPathAndWrongMethodAreJSON(t *testing.T) {
	f := newFixture(t, server.Options{})
	for _, path := range []string{"/", "/v1", "/v1/nope", "/v1/jobs/j1/nope", "/v2/jobs", "/v1/leases/1"} {
		wantError(t, f.do("GET", path, "", nil), http.StatusNotFound, api.CodeNotFound, path)
	}
	// A path the mux would redirect (not clean) is not a path of the API.
	wantError(t, f.do("GET", "/v1/jobs/../jobs", "", nil), http.StatusNotFound, api.CodeNotFound)

	r := f.do("DELETE", "/v1/jobs", "", nil)
	wantError(t, r, http.StatusMethodNotAllowed, "method_not_allowed", "DELETE")
	if allow := r.header.Get("Allow"); !strings.Contains(allow, "GET") || !strings.Contains(allow, "POST") {
		t.Fatalf("Allow %q, want GET and POST", allow)
	}
	wantError(t, f.do("GET", "/v1/workers/w1/acquire", "", nil), http.StatusMethodNotAllowed, "method_not_allowed")
	wantError(t, f.do("POST", "/healthz", "", nil), http.StatusMethodNotAllowed, "method_not_allowed")
}

func TestFormContentTypeIsAccepted(t *testing.T) {
	// curl -d sends application/x-www-form-urlencoded; the body is JSON all
	// the same, and is taken as such.
	f := newFixture(t, server.Options{})
	req := f.newRequest(context.Background(), request{method: "POST", path: "/v1/jobs", body: `{"id":"j1","kind":"run"}`})
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	resp, err := f.ts.Client().Do(req)
	f.must(err)
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("status %d, want 201", resp.StatusCode)
	}
	if loc := resp.Header.Get("Location"); loc != "/v1/jobs/j1" {
		t.Fatalf("Location %q", loc)
	}
}

func TestRefusalsAreLoggedOnce(t *testing.T) {
	f := newFixture(t, server.Options{})
	lease := f.grantViaHTTP("w1", "j1")
	f.do("POST", fmt.Sprintf("/v1/leases/%d/start", lease), "", `{"worker":"w2"}`)
	f.do("GET", "/v1/jobs", "", nil) // accepted: not logged

	var lines []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(f.logs.String()), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			t.Fatalf("log line %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	if len(lines) != 1 {
		t.Fatalf("%d log lines, want 1:\n%s", len(lines), f.logs)
	}
	want := map[string]any{"level": "warn", "method": "POST", "route": "POST /v1/leases/{lease}/start",
		"status": float64(403), "code": "forbidden", "worker": "w2", "job": "", "lease": float64(lease)}
	for k, v := range want {
		if v == "" {
			if _, ok := lines[0][k]; ok {
				t.Errorf("log has %s, want none: %v", k, lines[0])
			}
			continue
		}
		if lines[0][k] != v {
			t.Errorf("log %s = %v, want %v", k, lines[0][k], v)
		}
	}
	if msg, _ := lines[0]["message"].(string); !strings.Contains(msg, fmt.Sprintf("lease %d is not worker \"w2\"'s", lease)) {
		t.Errorf("log message %q is not what the client was told", msg)
	}
}

// grantViaHTTP submits job and acquires it for worker over HTTP.
func (f *fixture) grantViaHTTP(worker, job string) uint64 {
	f.t.Helper()
	f.do("POST", "/v1/jobs", "", api.Submit{ID: job, Kind: "run", Spec: json.RawMessage(`{"run":"true"}`)})
	g := decode[api.Grants](f.t, f.do("POST", "/v1/workers/"+worker+"/acquire", "", api.Acquire{Max: 1}), http.StatusOK)
	if len(g.Leases) != 1 || g.Leases[0].Job.ID != job {
		f.t.Fatalf("acquire: %+v, want job %s", g, job)
	}
	return g.Leases[0].Lease
}
