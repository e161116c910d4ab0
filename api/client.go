package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	// encoding/json/v2, as the standard library has it from Go 1.27 on (this
	// module is its mirror): it decodes an answer in less than half the time
	// of encoding/json, which was a tenth of a job's CPU on the worker's side.
	// Its rules are stricter (invalid UTF-8 and a name given twice are
	// refused), which the daemon's answers obey; a field this client does not
	// know is skipped, as before.
	jsonv2 "github.com/go-json-experiment/json"
)

// DefaultServer is where clients look for the daemon when told nothing.
const DefaultServer = "http://127.0.0.1:7420"

// Client calls a leaselog daemon. Its methods are safe for concurrent use.
type Client struct {
	base  string
	token string
	http  *http.Client
	// sessions carries the worker calls over worker sessions; nil: plain
	// calls (PlainCalls).
	sessions *sessionPool
}

// NewClient returns a client for the daemon at server: an http:// URL, or
// unix:///path/to.sock; or a comma-separated list of them, an active daemon
// and its standbys, which the client moves between as servers.go says. token, if set, is sent as a bearer token. It speaks
// HTTP/1.1 (HTTP/2 too over https://); with the H2C option, HTTP/2 without
// TLS over http:// and unix://, all its calls on one connection, falling
// back to HTTP/1.1 for a server that speaks only that. Its worker calls go
// over worker sessions, falling back to plain calls where the upgrade is
// refused (Session), unless it is made with PlainCalls.
func NewClient(server, token string, opts ...ClientOption) (*Client, error) {
	var o clientOptions
	for _, opt := range opts {
		opt(&o)
	}
	if server == "" {
		server = DefaultServer
	}
	// A token read from a file comes with its newline; one that is only
	// spaces is a mistake the daemon would answer with 401 anyway.
	if t := strings.TrimSpace(token); t == "" && token != "" {
		return nil, errors.New("api: the token is blank (only spaces): set it, or leave it empty")
	} else if token = t; strings.ContainsAny(token, "\r\n") {
		return nil, errors.New("api: the token has a line break in it")
	}
	c := &Client{token: token, http: &http.Client{}}
	if strings.Contains(server, ",") {
		// An active daemon and its standbys: servers.go.
		c.withSessions(o, nil)
		if err := c.withServers(server, o); err != nil {
			return nil, err
		}
		return c, nil
	}
	if path, ok := strings.CutPrefix(server, "unix://"); ok {
		dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", path)
		}
		c.http.Transport = newTransport(false, o.h2c, dial)
		c.base = "http://leaselog"
		c.withSessions(o, dial)
		return c, nil
	}
	u, err := url.Parse(server)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("api: server %q is not an http(s):// or unix:// address", server)
	}
	c.http.Transport = newTransport(u.Scheme == "https", o.h2c, nil)
	c.base = strings.TrimRight(server, "/")
	c.withSessions(o, nil)
	return c, nil
}

// do sends a request and decodes a 2xx answer into out (if not nil). Any
// other answer becomes an *Error.
func (c *Client) do(ctx context.Context, method, path string, in, out any) (int, error) {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return 0, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return 0, err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	buf := answerBuffers.Get().(*[]byte)
	defer putAnswerBuffer(buf)
	b, err := readAnswer(resp.Body, (*buf)[:0], 64<<20)
	*buf = b[:0] // out holds nothing of b: the decoder copies what it keeps
	if err != nil {
		return resp.StatusCode, err
	}
	return resp.StatusCode, decodeAnswer(resp.StatusCode, b, out, method, path)
}

// decodeAnswer decodes a 2xx answer's body into out (if not nil), and makes
// any other answer an *Error: over HTTP or in a session's frame.
func decodeAnswer(status int, b []byte, out any, method, path string) error {
	if status/100 != 2 {
		var eb ErrorBody
		if json.Unmarshal(b, &eb) != nil || eb.Error == nil {
			return &Error{Status: status, Code: CodeInternal, Message: strings.TrimSpace(string(b))}
		}
		eb.Error.Status, eb.Error.StaleReportSeq = status, eb.StaleReportSeq
		return eb.Error
	}
	if out != nil {
		if err := jsonv2.Unmarshal(b, out); err != nil {
			return fmt.Errorf("api: %s %s: decode answer: %w", method, path, err)
		}
	}
	return nil
}

// IsCode reports whether err is an API error with the given code.
func IsCode(err error, code string) bool {
	var e *Error
	return errors.As(err, &e) && e.Code == code
}

// Submit submits a job; created is false when the same job existed.
func (c *Client) Submit(ctx context.Context, s Submit) (job Job, created bool, err error) {
	status, err := c.do(ctx, http.MethodPost, "/v1/jobs", s, &job)
	return job, status == http.StatusCreated, err
}

// Job returns job id.
func (c *Client) Job(ctx context.Context, id string) (Job, error) {
	var j Job
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), nil, &j)
	return j, err
}

// Jobs lists jobs, optionally by state and kind: every page (JobsPage reads
// one).
func (c *Client) Jobs(ctx context.Context, state, kind string) ([]Job, error) {
	return Collect(c.AllJobs(ctx, JobQuery{State: state, Kind: kind, Limit: MaxLimit}))
}

// Cancel cancels job id (revokes it, if leased).
func (c *Client) Cancel(ctx context.Context, id string) (Job, error) {
	var j Job
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/cancel", nil, &j)
	return j, err
}

// Kill kills job id (revokes it with kill, if leased).
func (c *Client) Kill(ctx context.Context, id string) (Job, error) {
	var j Job
	_, err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/kill", nil, &j)
	return j, err
}

// History returns every event of job id: every page (HistoryPage reads one).
func (c *Client) History(ctx context.Context, id string) ([]Event, error) {
	return Collect(c.AllHistory(ctx, id, PageQuery{Limit: MaxLimit}))
}

// Acquire asks for up to max leases, waiting up to wait for one.
func (c *Client) Acquire(ctx context.Context, worker string, max int, wait time.Duration) ([]Grant, error) {
	return c.AcquireOffer(ctx, worker, max, wait, Offer{})
}

// AcquireOffer is Acquire for a worker that takes the kinds and offers the
// labels of o: it is granted only the jobs it can take.
func (c *Client) AcquireOffer(ctx context.Context, worker string, max int, wait time.Duration, o Offer) ([]Grant, error) {
	var g Grants
	err := c.workerDo(ctx, worker, OpAcquire, "", "/v1/workers/"+url.PathEscape(worker)+"/acquire", Acquire{Max: max, WaitSeconds: wait.Seconds(), Offer: o}, &g)
	return g.Leases, err
}

// Heartbeat renews the worker's leases.
func (c *Client) Heartbeat(ctx context.Context, worker string, leases []uint64) (HeartbeatReply, error) {
	var r HeartbeatReply
	if leases == nil {
		leases = []uint64{}
	}
	err := c.workerDo(ctx, worker, OpHeartbeat, "", "/v1/workers/"+url.PathEscape(worker)+"/heartbeat", Heartbeat{Leases: leases}, &r)
	return r, err
}

// HeartbeatDetails is Heartbeat carrying hb whole: its leases and the
// details of some (their jobs' progress). A daemon before details refuses
// a heartbeat that has some (400: an unknown field).
func (c *Client) HeartbeatDetails(ctx context.Context, worker string, hb Heartbeat) (HeartbeatReply, error) {
	var r HeartbeatReply
	if hb.Leases == nil {
		hb.Leases = []uint64{}
	}
	err := c.workerDo(ctx, worker, OpHeartbeat, "", "/v1/workers/"+url.PathEscape(worker)+"/heartbeat", hb, &r)
	return r, err
}

// WorkerLeases returns the live leases the daemon holds for worker: every
// page (WorkerLeasesPage reads one).
func (c *Client) WorkerLeases(ctx context.Context, worker string) ([]Grant, error) {
	return Collect(Pages(ctx, "", func(ctx context.Context, after string) ([]Grant, string, error) {
		g, err := c.WorkerLeasesPage(ctx, worker, PageQuery{Limit: MaxLimit, After: after})
		return g.Leases, g.Next, err
	}))
}

// Start says the job of a lease started.
func (c *Client) Start(ctx context.Context, worker string, lease uint64) (Lease, error) {
	var l Lease
	id := strconv.FormatUint(lease, 10)
	err := c.workerDo(ctx, worker, OpStart, id, "/v1/leases/"+id+"/start", Start{Worker: worker}, &l)
	return l, err
}

// Report reports on a lease. A stale lease gives an *Error with code
// stale_lease and StaleReportSeq set.
func (c *Client) Report(ctx context.Context, lease uint64, r Report) (ReportReply, error) {
	var rr ReportReply
	id := strconv.FormatUint(lease, 10)
	err := c.workerDo(ctx, r.Worker, OpReport, id, "/v1/leases/"+id+"/report", r, &rr)
	return rr, err
}

// Leases lists leases (live ones unless state is given): every page
// (LeasesPage reads one).
func (c *Client) Leases(ctx context.Context, state, worker, kind string) ([]Lease, error) {
	return Collect(c.AllLeases(ctx, LeaseQuery{State: state, Worker: worker, Kind: kind, Limit: MaxLimit}))
}

// EventQuery selects events.
type EventQuery struct {
	Type, Job, Worker string
	Since, Until      time.Time
	After             uint64
	Limit             int
}

// Events returns one page of events (AllEvents iterates over them all).
func (c *Client) Events(ctx context.Context, q EventQuery) (Events, error) {
	var es Events
	args := []string{"type", q.Type, "job", q.Job, "worker", q.Worker}
	if !q.Since.IsZero() {
		args = append(args, "since", q.Since.UTC().Format(time.RFC3339Nano))
	}
	if !q.Until.IsZero() {
		args = append(args, "until", q.Until.UTC().Format(time.RFC3339Nano))
	}
	if q.After > 0 {
		args = append(args, "after", strconv.FormatUint(q.After, 10))
	}
	if q.Limit > 0 {
		args = append(args, "limit", strconv.Itoa(q.Limit))
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/events"+query(args...), nil, &es)
	return es, err
}

// Health returns the daemon's health and last durable seq.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	_, err := c.do(ctx, http.MethodGet, "/healthz", nil, &h)
	return h, err
}

func query(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		if kv[i+1] != "" {
			v.Set(kv[i], kv[i+1])
		}
	}
	if len(v) == 0 {
		return ""
	}
	return "?" + v.Encode()
}
