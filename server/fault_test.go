package server_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/crashtest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/server"
)

// faultServer is the real Server, on a real lease.Service, on a store whose
// filesystem a test injects errors into.
type faultServer struct {
	t     *testing.T
	clock *clocktest.Clock
	log   *eventlog.Log
	svc   *lease.Service
	ts    *httptest.Server
}

func startFaultServer(t *testing.T, fs vfs.FS, clock *clocktest.Clock, opts eventlog.Options) *faultServer {
	t.Helper()
	log, svc := leasetest.Open(t, leasetest.FS(fs), leasetest.Clock(clock),
		leasetest.Store(func(o *eventlog.Options) { // the test's options on the fixture's filesystem and logger
			opts.FS, opts.Logger, opts.OnFatal = o.FS, o.Logger, func(string) {}
			*o = opts
		}),
		leasetest.Service(func(o *lease.Options) { o.SnapshotEvery = 5 }))
	srv := server.New(svc, server.Options{Registerer: prometheus.NewRegistry(), Logger: zerolog.Nop()})
	s := &faultServer{t: t, clock: clock, log: log, svc: svc, ts: httptest.NewServer(srv)}
	t.Cleanup(s.ts.Close)
	return s
}

// call sends one request and returns the status and the body.
func (s *faultServer) call(method, path string, body any) (int, []byte) {
	s.t.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			s.t.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, s.ts.URL+path, r)
	if err != nil {
		s.t.Fatal(err)
	}
	resp, err := s.ts.Client().Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	return resp.StatusCode, b
}

// httpStep is one request of the HTTP scenario, or (path "") a sweep of the
// clock past toleration.
type httpStep struct {
	method, path string
	body         any
	want         int // the status of a fault-free run
}

// httpScenario is the scenario, with lease ids from the acquires' answers.
// Leases are looked up when the step runs.
func httpScenario(lease func(job string) uint64) []func() httpStep {
	post := func(path string, body any, want int) func() httpStep {
		return func() httpStep { return httpStep{"POST", path, body, want} }
	}
	onLease := func(job, verb string, body any, want int) func() httpStep {
		return func() httpStep {
			return httpStep{"POST", fmt.Sprintf("/v1/leases/%d/%s", lease(job), verb), body, want}
		}
	}
	beat := func(worker string, jobs ...string) func() httpStep {
		return func() httpStep {
			ids := []uint64{}
			for _, j := range jobs {
				ids = append(ids, lease(j))
			}
			return httpStep{"POST", "/v1/workers/" + worker + "/heartbeat", map[string]any{"leases": ids}, 200}
		}
	}
	get := func(path string) func() httpStep { return func() httpStep { return httpStep{"GET", path, nil, 200} } }
	report := map[string]any{"worker": "w1", "outcome": "succeeded", "ref": "refs/x", "result": map[string]any{"score": 1}}
	return []func() httpStep{
		post("/v1/jobs", map[string]any{"id": "r1", "kind": "run", "spec": map[string]any{"run": "make"}}, 201),
		post("/v1/jobs", map[string]any{"id": "e1", "kind": "evaluation"}, 201),
		post("/v1/jobs", map[string]any{"id": "q1", "kind": "run"}, 201),
		post("/v1/jobs", map[string]any{"id": "r1", "kind": "run", "spec": map[string]any{"run": "make"}}, 200),
		post("/v1/workers/w1/acquire", map[string]any{"max": 2}, 200),
		onLease("r1", "start", map[string]any{"worker": "w1"}, 200),
		beat("w1", "r1", "e1"),
		onLease("r1", "report", report, 200),
		onLease("r1", "report", report, 200),
		post("/v1/jobs/q1/cancel", nil, 200),
		post("/v1/jobs/e1/kill", nil, 200),
		get("/v1/jobs/e1/history"),
		func() httpStep { return httpStep{want: 200} }, // the sweeper: e1's lease expires
		onLease("e1", "report", map[string]any{"worker": "w1", "outcome": "killed"}, 409),
		onLease("e1", "report", map[string]any{"worker": "w1", "outcome": "killed"}, 409),
		post("/v1/jobs", map[string]any{"id": "r2", "kind": "run"}, 201),
		post("/v1/workers/w2/acquire", map[string]any{"max": 1}, 200),
		beat("w2", "r2"),
		onLease("r2", "report", map[string]any{"worker": "w2", "outcome": "failed", "reason": "exit 1"}, 200),
		get("/v1/events?job=r2"),
		get("/healthz"),
	}
}

// httpRun is one run of the HTTP scenario with WAL writes failing from the
// k-th on (sticky) or the k-th alone.
type httpRun struct {
	k      int64
	sticky bool
	mem    *vfs.MemFS
	srv    *faultServer
	rec    *crashtest.Record
	leases map[string]uint64

	armed atomic.Bool
	n     atomic.Int64 // WAL writes and syncs since armed
	hit   atomic.Bool
}

func (r *httpRun) inject(op errorfs.Op) error {
	if !r.armed.Load() || !strings.HasSuffix(op.Path, ".log") ||
		(op.Kind != errorfs.OpFileWrite && op.Kind != errorfs.OpFileSync && op.Kind != errorfs.OpFileSyncData) {
		return nil
	}
	if k := r.n.Add(1) - 1; k == r.k || (r.sticky && k > r.k) {
		r.hit.Store(true)
		return errorfs.ErrInjected
	}
	return nil
}

// play runs the scenario over HTTP, recording the events of every answer
// that acknowledged any (2xx, and the 409 of a stale report, which is kept).
// It returns an error at the first answer that breaks the contract: a 2xx
// after a failure, or another answer than a fault-free run's before it.
func (r *httpRun) play(t *testing.T) (failedAt int, err error) {
	failedAt = -1
	for i, mk := range httpScenario(func(job string) uint64 { return r.leases[job] }) {
		st := mk()
		before := r.srv.log.LastSeq()
		var status int
		var body []byte
		if st.path == "" {
			status = 200
			if err := sweepPast(r.srv, leasetest.Timing().Toleration); err != nil {
				status = 503
			}
		} else {
			status, body = r.srv.call(st.method, st.path, st.body)
		}
		after := r.srv.log.LastSeq()
		what := fmt.Sprintf("step %d: %s %s: %d %s", i, st.method, st.path, status, bytes.TrimSpace(body))
		switch {
		case failedAt >= 0 && status < 500:
			return failedAt, fmt.Errorf("%s: answered after the store failed at step %d", what, failedAt)
		case failedAt >= 0:
		case status == http.StatusServiceUnavailable && r.hit.Load():
			failedAt = i
		case status != st.want:
			return failedAt, fmt.Errorf("%s: want %d", what, st.want)
		default:
			if err := r.rec.Ack(r.srv.log, before, after); err != nil {
				return failedAt, fmt.Errorf("%s: %w", what, err)
			}
			if strings.HasSuffix(st.path, "/acquire") {
				var g struct {
					Leases []struct {
						Lease uint64 `json:"lease"`
						Job   struct {
							ID string `json:"id"`
						} `json:"job"`
					} `json:"leases"`
				}
				if err := json.Unmarshal(body, &g); err != nil {
					return failedAt, fmt.Errorf("%s: %w", what, err)
				}
				for _, l := range g.Leases {
					r.leases[l.Job.ID] = l.Lease
				}
			}
		}
	}
	return failedAt, nil
}

// sweepPast moves the clock past d in sweeper steps, sweeping after each.
func sweepPast(s *faultServer, d time.Duration) error {
	step := leasetest.Timing().Grace / 2
	for done := time.Duration(0); done <= d; done += step {
		s.clock.Advance(step)
		if err := s.svc.Sweep(); err != nil {
			return err
		}
	}
	return nil
}

// TestNoSuccessForUndurableEvents drives the real Server over HTTP, on a
// lease.Service whose store fails its k-th WAL write or sync (alone, or with
// every later one), for every k of the scenario. No answer may be a 2xx for
// an event that was not made durable: every event of every 2xx (and of the
// 409 that keeps a stale report) must be in the store after a restart, from
// the crash image taken when the fault hit (only synced data) and on the same
// filesystem with the injector gone; every event there must be one the
// scenario attempted; once the store failed, every answer is a 503.
func TestNoSuccessForUndurableEvents(t *testing.T) {
	for _, sticky := range []bool{false, true} {
		runs, failures := 0, 0
		for k := int64(0); ; k++ {
			r := &httpRun{k: k, sticky: sticky, mem: vfs.NewCrashableMem(), rec: &crashtest.Record{}, leases: map[string]uint64{}}
			r.srv = startFaultServer(t, errorfs.Wrap(r.mem, errorfs.InjectorFunc(r.inject)), clocktest.New(clocktest.Epoch), eventlog.Options{})
			if err := r.rec.Ack(r.srv.log, 0, r.srv.log.LastSeq()); err != nil {
				t.Fatal(err)
			}
			r.armed.Store(true)
			failedAt, err := r.play(t)
			if err != nil {
				t.Fatalf("%s: %v", r, err)
			}
			if !r.hit.Load() {
				t.Logf("from then on=%v: %d WAL writes and syncs, each failed in turn: %d runs, %d failed the service",
					sticky, k, runs, failures)
				break
			}
			runs++
			if failedAt >= 0 {
				failures++
			}
			if err := r.restart(); err != nil {
				t.Fatalf("%s (failed at step %d): %v", r, failedAt, err)
			}
		}
	}
}

func (r *httpRun) String() string {
	mode := "alone"
	if r.sticky {
		mode = "and every later one"
	}
	return fmt.Sprintf("WAL write %d failing %s", r.k, mode)
}

// restart checks the store as a restart finds it: first the crash image of
// this moment, then the store itself after an orderly stop, with the
// injector gone.
func (r *httpRun) restart() error {
	attempted, err := crashtest.Attempted(r.srv.log)
	if err != nil {
		return err
	}
	check := func(what string, fs vfs.FS) error {
		m := r.rec.Mark()
		c, err := crashtest.Check(fs, r.rec.Acked(m), m.Snapshot, crashtest.Restart)
		if err == nil {
			err = crashtest.CheckAttempted(c.Tail, attempted)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		return nil
	}
	if err := check("restart from the crash image", r.mem.CrashClone(vfs.CrashCloneCfg{})); err != nil {
		return err
	}
	r.srv.ts.Close()
	_ = r.srv.svc.Close()
	_ = r.srv.log.Close()
	r.armed.Store(false)
	return check("restart on the same filesystem", r.mem)
}

// TestReadErrorsAnswer5xx injects read errors into the store's sstables
// (every read, or the k-th read of a request and every later one, so that a
// request fails midway through what it reads) and checks every read route:
// each answer is either a 5xx or exactly the answer of a healthy store, never
// a short or garbled 2xx. The routes that read the log (events, history) must
// have met the errors; the ones served from the lease table need not.
func TestReadErrorsAnswer5xx(t *testing.T) {
	mem := vfs.NewMem()
	d := &crashtest.Driver{FS: mem, Clock: clocktest.New(clocktest.Epoch), Rec: &crashtest.Record{}}
	if err := d.Run(crashtest.Step{Name: "open", Do: d.Open}); err != nil {
		t.Fatal(err)
	}
	for r := range 3 { // a few restarts: a few sstables, of a few blocks each
		for _, s := range d.Round(r) {
			if err := d.Run(s); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}

	var mode atomic.Int64 // 0: healthy; k > 0: the k-th read from arming on fails, and every later one
	var reads atomic.Int64
	fs := errorfs.Wrap(mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		if !strings.HasSuffix(op.Path, ".sst") || op.Kind.ReadOrWrite() != errorfs.OpIsRead {
			return nil
		}
		if k := mode.Load(); k > 0 && reads.Add(1) >= k {
			return errorfs.ErrInjected
		}
		return nil
	}))
	// With no block cache to speak of, every read reaches the files.
	srv := startFaultServer(t, fs, d.Clock, eventlog.Options{CacheSize: 1})
	paths := []string{
		"/v1/events", "/v1/events?limit=1000", "/v1/events?job=run-0", "/v1/events?worker=w1",
		"/v1/events?type=lease.stale_report", "/v1/events?after=20&limit=7", "/v1/jobs/evalq-0/history",
		"/v1/jobs", "/v1/jobs/run-0", "/v1/leases", "/v1/workers/w3/leases", "/healthz",
	}
	healthy := map[string][]byte{}
	for _, p := range paths {
		status, body := srv.call("GET", p, nil)
		if status != 200 {
			t.Fatalf("GET %s on a healthy store: %d %s", p, status, body)
		}
		healthy[p] = body
	}
	var mu sync.Mutex
	errorsMet := map[string]int{}
	for _, p := range paths {
		for k := int64(1); ; k++ {
			reads.Store(0)
			mode.Store(k)
			status, body := srv.call("GET", p, nil)
			mode.Store(0)
			switch {
			case status >= 500:
				mu.Lock()
				errorsMet[p]++
				mu.Unlock()
			case status != 200 || !bytes.Equal(body, healthy[p]):
				t.Fatalf("GET %s with sstable read %d on failing: %d\n%s\nwant the healthy answer\n%s", p, k, status, body, healthy[p])
			}
			if reads.Load() < k {
				break // the request read fewer than k blocks: every k was tried
			}
		}
		// A failed read fails nothing but its request.
		if status, body := srv.call("GET", p, nil); status != 200 || !bytes.Equal(body, healthy[p]) {
			t.Fatalf("GET %s after the read errors: %d %s", p, status, body)
		}
	}
	checkStreamReadErrors(t, srv, healthy["/v1/events?limit=1000"], &mode, &reads)
	for _, p := range paths {
		if strings.Contains(p, "events") || strings.Contains(p, "history") {
			if errorsMet[p] == 0 {
				t.Errorf("GET %s never met a read error: the test tests nothing there", p)
			}
		}
		t.Logf("GET %-40s %3d answers were 5xx", p, errorsMet[p])
	}
}

// checkStreamReadErrors reads the event stream with the k-th sstable read failing, for
// every k: the status line is out before anything is read, so a read error
// can only end the stream; every event sent before must be the healthy one
// at its seq, in order.
func checkStreamReadErrors(t *testing.T, srv *faultServer, list []byte, mode, reads *atomic.Int64) {
	t.Helper()
	var all struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(list, &all); err != nil {
		t.Fatal(err)
	}
	ended := 0
	for k := int64(1); ; k++ {
		reads.Store(0)
		mode.Store(k)
		got, eof := readEventStream(t, srv, len(all.Events))
		mode.Store(0)
		for i, data := range got {
			if !bytes.Equal(data, all.Events[i]) {
				t.Fatalf("stream with sstable read %d on failing: event %d is\n%s\nwant\n%s", k, i, data, all.Events[i])
			}
		}
		if eof {
			ended++
			if len(got) == len(all.Events) {
				t.Fatalf("stream with sstable read %d on failing: every event, then the end", k)
			}
		}
		if reads.Load() < k {
			break
		}
	}
	if ended == 0 {
		t.Error("no read error ever ended the event stream: the test tests nothing there")
	}
	t.Logf("GET /v1/events/stream: %d streams ended by a read error", ended)
}

// readEventStream reads the data of up to n events from the event stream, and
// says whether the server ended it first.
func readEventStream(t *testing.T, srv *faultServer, n int) ([][]byte, bool) {
	t.Helper()
	req, err := http.NewRequest("GET", srv.ts.URL+"/v1/events/stream", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := srv.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close() // cancels the request: the stream ends
	if resp.StatusCode != 200 {
		t.Fatalf("stream: status %d", resp.StatusCode)
	}
	var out [][]byte
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for len(out) < n && sc.Scan() {
		if data, ok := bytes.CutPrefix(sc.Bytes(), []byte("data: ")); ok {
			out = append(out, bytes.Clone(data))
		}
	}
	return out, len(out) < n
}
