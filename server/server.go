// Package server is leaselog's HTTP API (docs/openapi.yaml) over a
// lease.Service. It owns the routes, the decoding of requests and the
// encoding of answers and errors as JSON, bearer-token authorisation, the
// Prometheus metrics of the daemon, and the log line of every refused call;
// the operations it carries, and the conversions of the service's answers
// and errors to the API's, are package ops's. It holds no state of its own
// that matters: the service decides, the event log remembers, and this
// package only speaks HTTP.
//
// Every request goes through one wrapper:
//
//	ServeHTTP ─► body deadline ─► route? ──no──► 404 / 405 as JSON
//	               │yes
//	               ▼
//	           authorise (401 / 403) ─► deadline (not for long-polls and streams)
//	               ─► handler ─► JSON answer, or error ─► {"error":{"code","message"}}
//	               ─► metrics (route pattern, status) and, for status >= 400, a log line
//
// Bad input is refused before the service is called, so a 400 never writes an
// event. The handler runs as soon as a request's headers are read: a caller
// without a valid token gets its 401 then, with Connection: close, and its
// body is not read for the call; any other answer given before the body was
// read closes the connection too, lingering (linger.go): what the client
// still sends is read and dropped for a bounded time, so that it reads the
// answer rather than a reset. A body must arrive within Options.BodyTimeout
// (408). LimitListener caps the connections a daemon holds open. The log
// lines of refused calls come at a bounded rate (lograte.go).
package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"path"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/ops"
)

// Defaults of Options.
const (
	DefaultMaxBody         = 1 << 20
	DefaultRequestTimeout  = 30 * time.Second
	DefaultBodyTimeout     = 10 * time.Second
	DefaultMaxWait         = 60 * time.Second
	DefaultStreamKeepalive = 10 * time.Second // under 15 s, what proxies and EventSource clients expect
)

// Options configures a Server. The zero value serves openly with the defaults.
type Options struct {
	// Auth is who may do what; nil serves everything to everyone (the serve
	// command allows that only on loopback addresses and unix sockets).
	Auth *Auth
	// Logger receives one line per refused call (status >= 400), at a
	// bounded rate (lograte.go).
	Logger zerolog.Logger
	// Registerer takes the server's metrics when Metrics is nil; nil means a
	// private registry. GET /metrics serves Registerer if it is also a
	// prometheus.Gatherer (a *prometheus.Registry is), else
	// prometheus.DefaultGatherer.
	Registerer prometheus.Registerer
	// Metrics, if set, are metrics made beforehand with NewMetrics (so the
	// log's fsync hook could be wired first); Registerer is then unused.
	Metrics *Metrics
	// MaxBody bounds a request body; 0 means DefaultMaxBody.
	MaxBody int64
	// RequestTimeout bounds every request but long-polls and event streams;
	// 0 means DefaultRequestTimeout.
	RequestTimeout time.Duration
	// BodyTimeout bounds reading a request's body, from when its headers
	// were read: a body slower than that is cut (408) and the connection
	// closed. 0 means DefaultBodyTimeout (1 MiB in 10 s is 100 KiB/s). In a
	// worker session it bounds each frame in the same way — its header from
	// its first byte, its body from its header — and the first frame from
	// the upgrade. A lingering close lasts at most this long (and at most
	// 2 s).
	BodyTimeout time.Duration
	// MaxWait caps the wait_seconds of an acquire; 0 means DefaultMaxWait.
	MaxWait time.Duration
	// StreamKeepalive is how long an event stream may stay silent: it then
	// writes an SSE comment, so that a client gone without a word (a cut
	// network) is noticed by a failed write. 0 means DefaultStreamKeepalive.
	StreamKeepalive time.Duration
	// Output reads the output of the jobs of the daemon's own worker (GET
	// /v1/jobs/{id}/output); nil: the daemon has none.
	Output OutputSource
	// Clock times how long an acquire was held (api.Grant.HeldSeconds); nil
	// is CLOCK_BOOTTIME (lease.BoottimeClock), on which the daemon counts
	// deadlines: it never steps and counts a suspend of the host.
	Clock lease.Clock
	// BootID is the daemon host's boot id, announced by GET /healthz so that
	// a worker can tell whether it shares the daemon's host
	// (hostclock.BootID; empty: not announced).
	BootID string
	// Backup, if set, writes the backups of POST /v1/admin/backup; nil is
	// the service's (lease.Service.Backup). A daemon whose store is backed
	// up elsewhere refuses there with lease.ErrBackupElsewhere.
	Backup func(dir string) (lease.BackupInfo, error)
}

// Server is the HTTP API. It is an http.Handler, safe for concurrent use.
type Server struct {
	svc     *lease.Service
	opts    Options
	auth    *authenticator // nil: open
	log     zerolog.Logger
	mux     *http.ServeMux
	routes  map[string]*route // by pattern
	metrics *Metrics

	// base is cancelled by Close: it ends streams and long-polls.
	base      context.Context
	closeBase context.CancelFunc
	closeOnce sync.Once

	// waitHook, set only by tests, wraps the context of an acquire's wait.
	waitHook func(context.Context) context.Context
	// streamHook, set only by tests, is told when an event stream starts to
	// wait for events ("wait") and when its handler returns ("end").
	streamHook func(stage string)
	// sessionHook, set only by tests, is given each session's connection
	// once upgraded.
	sessionHook func(net.Conn)
	// sessionBacklog is MaxSessionBacklog; tests lower it.
	sessionBacklog int
	// linger bounds a lingering close (linger.go): lingerTime, or the body
	// timeout if shorter; tests shorten it.
	linger time.Duration
	// refusals and failures bound the log lines of refused calls (4xx) and
	// of failed ones (5xx), each on its own so that a flood of one does not
	// hide the other.
	refusals, failures lineLimiter
}

// New returns the API over svc. It registers the server's metrics and panics
// if that fails (a second Server on the same registry or Metrics, say): that
// is a wiring mistake, not a runtime condition.
func New(svc *lease.Service, opts Options) *Server {
	if opts.MaxBody <= 0 {
		opts.MaxBody = DefaultMaxBody
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = DefaultMaxWait
	}
	if opts.BodyTimeout <= 0 {
		opts.BodyTimeout = DefaultBodyTimeout
	}
	if opts.StreamKeepalive <= 0 {
		opts.StreamKeepalive = DefaultStreamKeepalive
	}
	if opts.Clock == nil {
		opts.Clock = lease.BoottimeClock()
	}
	s := &Server{svc: svc, opts: opts, log: opts.Logger, mux: http.NewServeMux(), routes: map[string]*route{},
		sessionBacklog: MaxSessionBacklog, refusals: newLineLimiter(), failures: newLineLimiter(),
		linger: min(lingerTime, opts.BodyTimeout)}
	if opts.Auth != nil {
		s.auth = newAuthenticator(opts.Auth)
	}
	s.base, s.closeBase = context.WithCancel(context.Background())
	if s.metrics = opts.Metrics; s.metrics == nil {
		s.metrics = NewMetrics(opts.Registerer)
	}
	s.metrics.attach(svc, opts.RequestTimeout, s.log)

	s.handle("GET /healthz", open, false, s.health)
	s.handle("GET /metrics", read, false, s.serveMetrics).whenFailed = true // leaselog_up 0 says why

	s.handle("POST /v1/jobs", admin, false, s.submit)
	s.handle("POST /v1/jobs/batch", admin, false, s.submitBatch)
	s.handle("GET /v1/jobs", read, false, s.listJobs)
	s.handle("GET /v1/jobs/{id}", read, false, s.getJob)
	s.handle("POST /v1/jobs/{id}/cancel", admin, false, s.cancel)
	s.handle("POST /v1/jobs/{id}/kill", admin, false, s.kill)
	s.handle("GET /v1/jobs/{id}/history", read, false, s.history)
	s.handle("GET /v1/jobs/{id}/output", read, false, s.output)

	s.handle("POST /v1/workers/{worker}/acquire", ownWorker, true, s.acquire)
	s.handle("POST /v1/workers/{worker}/heartbeat", ownWorker, false, s.heartbeat)
	s.handle("GET /v1/workers/{worker}/leases", ownWorkerOrRead, false, s.workerLeases)
	s.handle("POST /v1/leases/{lease}/start", anyWorker, false, s.start)
	s.handle("POST /v1/leases/{lease}/report", anyWorker, false, s.report)
	s.handle("GET /v1/leases", read, false, s.listLeases)
	s.handle("GET "+api.SessionPath, anyWorker, true, s.session)

	s.handle("GET /v1/events", read, false, s.listEvents)
	s.handle("GET /v1/events/stream", read, true, s.stream).queryToken = true
	s.handle("GET /v1/workers", read, false, s.listWorkers)
	s.handle("GET /v1/overview", read, false, s.overview)

	s.handle("POST "+api.BackupPath, admin, false, s.backup)

	// The dashboard's files need no token: its pages send one on their calls.
	s.handle("GET /ui/", open, false, serveDashboard).whenFailed = true
	return s
}

// Close ends every event stream and long-poll in flight, and any started
// later, so that http.Server.Shutdown, which waits for them, can finish. The
// server still answers every other call.
func (s *Server) Close() {
	s.closeOnce.Do(s.closeBase)
}

// route is one entry of the API.
type route struct {
	pattern string
	access  access
	long    bool // a long-poll or a stream: no RequestTimeout
	serve   func(w http.ResponseWriter, r *http.Request, c *call) error
	// whenFailed serves the route even once the service failed. Every other
	// route then answers 503: the service refuses commands until a restart,
	// and the reads that would not ask it (the log's own) must not be served
	// from a store that may be closed under them.
	whenFailed bool
	// queryToken takes the token as ?token= too (streamauth.go): a browser's
	// EventSource cannot send a header.
	queryToken bool
}

func (s *Server) handle(pattern string, a access, long bool, serve func(http.ResponseWriter, *http.Request, *call) error) *route {
	rt := &route{pattern: pattern, access: a, long: long, serve: serve}
	s.routes[pattern] = rt
	s.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) { s.serveRoute(w, r, rt) })
	return rt
}

// call is what the wrapper learns about one request, for its metrics and its
// log line. Only the request's own goroutine touches it.
type call struct {
	route   string
	status  int
	code    string
	message string
	cause   error // the error behind a 5xx, logged and not shown
	worker  string
	job     string
	lease   uint64
	who     *principal // nil when the server is open
	started bool       // the status line is written
	h2      bool       // the request came over HTTP/2: one stream of many
	// bound is the worker a session's frame speaks for (its header's): its
	// start or report must name it. "" for an HTTP call.
	bound string
	// received is when the request's headers were read, on Options.Clock.
	received time.Time
	body     *body // the request's body under its deadline; nil: none
	// in is a worker call's body, read whole into inBuf (from bodyBuffers)
	// until releaseBody gives it back.
	in    []byte
	inBuf *[]byte
	// hungUp: the answer is the connection's last (hangUp), given before
	// the body was read to its end.
	hungUp bool
}

// ServeHTTP serves the API. Every answer, routed or not, is JSON (but the
// metrics and the event stream), and every one is counted and, if refused,
// logged.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	c := &call{route: "unmatched", received: s.opts.Clock.Now(), h2: r.ProtoMajor >= 2}
	rec := &recorder{ResponseWriter: w, c: c}
	s.watchBody(w, r, c)
	defer func() { s.finish(rec, r, c, start, recover()) }()

	h, pattern := s.mux.Handler(r)
	// The mux redirects an unclean path (/v1/jobs/../jobs) to the route it
	// cleans to; a client must name the path itself.
	if p := r.URL.EscapedPath(); s.routes[pattern] == nil || p != cleanPath(p) {
		s.unrouted(rec, r, c, h)
		return
	}
	s.mux.ServeHTTP(rec, r)
}

// cleanPath is the mux's canonical form of a path: rooted, no . or ..
// segments, no double slashes, a trailing slash kept.
func cleanPath(p string) string {
	if p == "" || p[0] != '/' {
		p = "/" + p
	}
	np := path.Clean(p)
	if p[len(p)-1] == '/' && np != "/" {
		np += "/"
	}
	return np
}

// unrouted answers a request no route takes, as JSON. The mux knows whether
// the path exists with another method (405, with Allow), so its own answer is
// run against a scratch writer and only its status and Allow header kept. A
// path the mux would redirect (one that is not clean) is not a path of the API.
func (s *Server) unrouted(w http.ResponseWriter, r *http.Request, c *call, h http.Handler) {
	scratch := &headerOnly{header: http.Header{}}
	h.ServeHTTP(scratch, r)
	if scratch.status == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", scratch.header.Get("Allow"))
		s.writeError(w, r, c, &api.Error{Status: http.StatusMethodNotAllowed, Code: api.CodeMethod,
			Message: fmt.Sprintf("%s is not allowed on %s; allowed: %s", r.Method, r.URL.Path, scratch.header.Get("Allow"))})
		return
	}
	s.writeError(w, r, c, &api.Error{Status: http.StatusNotFound, Code: api.CodeNotFound,
		Message: fmt.Sprintf("no such path: %s", r.URL.Path)})
}

func (s *Server) serveRoute(w http.ResponseWriter, r *http.Request, rt *route) {
	c := w.(*recorder).c // the mux is only reached through ServeHTTP, with its recorder
	c.route = rt.pattern
	c.worker, c.job = r.PathValue("worker"), r.PathValue("id")
	r.Body = http.MaxBytesReader(w, r.Body, s.opts.MaxBody)
	if err := s.authorize(r, rt, c); err != nil {
		s.writeError(w, r, c, err)
		return
	}
	if err := s.svc.Err(); err != nil && !rt.whenFailed {
		s.writeError(w, r, c, err)
		return
	}
	if !rt.long {
		ctx, cancel := context.WithTimeout(r.Context(), s.opts.RequestTimeout)
		defer cancel()
		r = r.WithContext(ctx)
	}
	if err := rt.serve(w, r, c); err != nil {
		s.writeError(w, r, c, err)
	}
}

// finish records the call's metrics and, when it was refused, its log line.
func (s *Server) finish(w *recorder, r *http.Request, c *call, start time.Time, panicked any) {
	if panicked != nil {
		if panicked == http.ErrAbortHandler {
			panic(panicked)
		}
		err := fmt.Errorf("panic: %v\n%s", panicked, debug.Stack())
		if !c.started {
			s.writeError(w, r, c, err)
		} else {
			c.status, c.code, c.cause = http.StatusInternalServerError, api.CodeInternal, err
		}
	}
	if !c.started {
		c.status = http.StatusOK
	}
	s.record(c, r.Method, r.URL.Path, time.Since(start))
	if c.hungUp && c.pending() && !c.h2 {
		s.lingerHTTP(w.ResponseWriter)
	}
}

// record counts a call answered in d and, when it was refused, logs it: an
// HTTP call by its method and path, a session's frame by its op. The count
// comes last, so that a call counted has been logged (or held back).
func (s *Server) record(c *call, method, path string, d time.Duration) {
	defer s.metrics.observe(c.route, c.status, d)
	if c.status < 400 {
		return
	}
	// A client can make refusals as fast as it can send: their lines come
	// at a bounded rate, and the next line says how many were not logged.
	failed := c.status >= 500
	lim := &s.refusals
	if failed {
		lim = &s.failures
	}
	ok, suppressed := lim.allow(s.opts.Clock.Now())
	if !ok {
		return
	}
	ev := s.log.Warn()
	if failed {
		ev = s.log.Error()
	}
	if !ev.Enabled() {
		return
	}
	if suppressed > 0 {
		ev = ev.Uint64("suppressed", suppressed)
	}
	ev = ev.Str("method", method).Str("route", c.route).Str("path", path).
		Int("status", c.status).Str("code", c.code)
	if c.worker != "" {
		ev = ev.Str("worker", c.worker)
	}
	if c.job != "" {
		ev = ev.Str("job", c.job)
	}
	if c.lease != 0 {
		ev = ev.Uint64("lease", c.lease)
	}
	if c.cause != nil {
		ev = ev.AnErr("cause", c.cause)
	}
	ev.Msg(c.message) // the log line's message is the one the client got
}

// errorOf maps err to the API error the client sees. The service's sentinels
// keep their message, which says what was wrong; anything else is internal,
// and its text goes to the log only.
func (s *Server) errorOf(ctx context.Context, err error) *api.Error {
	if e := ops.ErrorOf(err); e.Status != http.StatusInternalServerError {
		return e
	}
	// A read waits for durability under the request's deadline; running out
	// of it is the daemon being slow, not a bug.
	switch cerr := ctx.Err(); {
	case errors.Is(cerr, context.DeadlineExceeded):
		return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable,
			Message: fmt.Sprintf("no answer within %v; try again", s.opts.RequestTimeout)}
	case cerr != nil:
		return &api.Error{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable, Message: "request cancelled"}
	}
	return &api.Error{Status: http.StatusInternalServerError, Code: api.CodeInternal,
		Message: "internal error; the daemon's log has the details"}
}

func (s *Server) writeError(w http.ResponseWriter, r *http.Request, c *call, err error) {
	status, b := s.errorJSON(r.Context(), c, err)
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="leaselog"`)
	}
	s.writeBytes(w, status, b)
}

// errorJSON is the status and body of the answer refusing a call with err,
// over HTTP or in a session's frame.
func (s *Server) errorJSON(ctx context.Context, c *call, err error) (int, []byte) {
	e := s.errorOf(ctx, err)
	c.code, c.message = e.Code, e.Message
	if e.Status >= 500 {
		c.cause = err
	}
	return s.encodeJSON(c, e.Status, api.ErrorBody{Error: e, StaleReportSeq: e.StaleReportSeq})
}

// writeJSON writes v as the answer.
func (s *Server) writeJSON(w http.ResponseWriter, c *call, status int, v any) {
	status, b := s.encodeJSON(c, status, v)
	s.writeBytes(w, status, b)
}

// encodeJSON is the body of an answer of v, its line feed included, over
// HTTP or in a session's frame. It marshals before anything is written, so
// a value that cannot be encoded still becomes a proper 500.
func (s *Server) encodeJSON(c *call, status int, v any) (int, []byte) {
	b, err := json.Marshal(v)
	if err != nil {
		c.code, c.message, c.cause = api.CodeInternal, "internal error; the daemon's log has the details",
			fmt.Errorf("encode answer: %w", err)
		status = http.StatusInternalServerError
		b, _ = json.Marshal(api.ErrorBody{Error: &api.Error{Code: c.code, Message: c.message}})
	}
	return status, append(b, '\n')
}

// writeBytes writes an answer encodeJSON made.
func (s *Server) writeBytes(w http.ResponseWriter, status int, b []byte) {
	h := w.Header()
	// The fixed values are shared, not built per answer: net/http only
	// reads them, and one appended to gets a copy (len == cap).
	h["Content-Type"] = jsonContentType
	h.Set("Content-Length", strconv.Itoa(len(b)))
	h["Cache-Control"] = noStore
	h["X-Content-Type-Options"] = noSniff
	w.WriteHeader(status)
	_, _ = w.Write(b) // the client went away: nothing left to tell it
}

// The header values of every JSON answer (canonical keys, so set directly).
var (
	jsonContentType = []string{"application/json"}[:1:1]
	noStore         = []string{"no-store"}[:1:1]
	noSniff         = []string{"nosniff"}[:1:1]
)

// badRequest is a 400 with a message saying what is wrong.
func badRequest(format string, args ...any) *api.Error {
	return &api.Error{Status: http.StatusBadRequest, Code: api.CodeBadRequest, Message: fmt.Sprintf(format, args...)}
}

// recorder remembers the status a handler wrote. Unwrap lets
// http.ResponseController reach the connection (flush, write deadlines).
type recorder struct {
	http.ResponseWriter
	c *call
}

func (w *recorder) WriteHeader(status int) {
	if !w.c.started {
		w.c.started, w.c.status = true, status
		// A caller without a token gets nothing more from this connection,
		// and no answer waits for a body nobody will read: a slow or endless
		// body must not hold the connection. Over HTTP/2 the body unread is
		// one stream's, reset when the handler returns, and the connection
		// carries other calls: only a 401 ends it (gracefully: net/http
		// sends GOAWAY for Connection: close, the streams in flight finish).
		if status == http.StatusUnauthorized || (w.c.pending() && !w.c.h2) {
			hangUp(w.ResponseWriter)
			w.c.hungUp = true
		}
	}
	w.ResponseWriter.WriteHeader(status)
}

func (w *recorder) Write(b []byte) (int, error) {
	if !w.c.started {
		w.WriteHeader(http.StatusOK)
	}
	return w.ResponseWriter.Write(b)
}

func (w *recorder) Flush() {
	if !w.c.started {
		w.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

func (w *recorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// headerOnly is a ResponseWriter that keeps the status and headers and drops
// the body: the mux's own 404 and 405 answers are plain text.
type headerOnly struct {
	header http.Header
	status int
}

func (w *headerOnly) Header() http.Header { return w.header }
func (w *headerOnly) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(b), nil
}
func (w *headerOnly) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

// health answers GET /healthz: the service is up and this is its last durable
// seq. A failed service answers 503.
func (s *Server) health(w http.ResponseWriter, r *http.Request, c *call) error {
	if _, err := params(r); err != nil {
		return err
	}
	seq, err := s.svc.Seq(r.Context())
	if err != nil {
		return err
	}
	s.writeJSON(w, c, http.StatusOK, api.Health{Status: "ok", Seq: seq, BootID: s.opts.BootID})
	return nil
}
