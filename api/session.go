package api

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
)

// ErrSessionBroken is the error, wrapped, of a call in flight on a worker
// session whose connection broke (the daemon restarted, the network was
// cut): the call may or may not have been done. Like any error of the
// transport it is Retryable; the next call opens a new session.
var ErrSessionBroken = errors.New("api: worker session broken")

// errNoSessions is a daemon, or a proxy before it, that refused the
// upgrade (refusedUpgrade): the client makes plain calls.
var errNoSessions = errors.New("api: the daemon has no worker sessions")

// Session makes a client carry the worker calls over worker sessions. It is
// the default; the option is kept for the callers that name it.
//
// A client carries the worker calls — Acquire, AcquireStart, Heartbeat,
// Start, Report, ReportNext — over worker sessions (GET /v1/session,
// upgraded to SessionProtocol) unless made with PlainCalls: each call is a
// frame of a connection the client's workers share, its body and answer
// those of the HTTP call, without HTTP's headers per call. The other calls
// stay HTTP. A session is opened by the first call, another when every open
// one has maxSessionCalls calls in flight, and again after one broke.
// Against a daemon or a proxy that refuses the upgrade (refusedUpgrade: a
// daemon from before sessions, a proxy that drops the Upgrade header or
// answers the GET itself) the client makes plain calls from then on, the
// call that asked included.
func Session() ClientOption { return func(o *clientOptions) { o.plain = false } }

// PlainCalls makes a client send the worker calls as plain HTTP calls, one
// request each, never over a worker session.
func PlainCalls() ClientOption { return func(o *clientOptions) { o.plain = true } }

// refusedUpgrade tells whether an answer to the upgrade other than 101
// refuses sessions for good, so that the client makes plain calls: a 2xx
// or 3xx (a proxy that answered the GET itself), a 404 (a daemon from
// before sessions), a 400, 405, 426 or 501 (a daemon whose request lost its
// Upgrade header on the way, or a proxy that does not pass upgrades). A 401
// or 403 is the token's, which a plain call would hear too, and a 408, 429
// or other 5xx passes: each is returned, and the next call asks again.
func refusedUpgrade(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusNotFound, http.StatusMethodNotAllowed,
		http.StatusUpgradeRequired, http.StatusNotImplemented, http.StatusHTTPVersionNotSupported:
		return true
	}
	return status/100 == 2 || status/100 == 3
}

// SessionPath is the path a worker session is opened on.
const SessionPath = "/v1/session"

// maxSessionCalls is how many calls a client keeps in flight on one
// session: the daemon's cap (server.MaxSessionCalls), past which it would
// stop reading. A call that finds every session full opens another, so
// that long polls never hold the heartbeats behind them.
const maxSessionCalls = 250

// sessionPool holds a client's sessions.
type sessionPool struct {
	c       *Client
	upgrade *http.Client // HTTP/1.1 only: an upgrade is not HTTP/2's
	plain   atomic.Bool  // the upgrade was refused: plain calls
	opening sync.Mutex   // one session opened at a time
	mu      sync.Mutex
	open    []*clientSession // those not known to be broken
}

// withSessions sets up the sessions of a client not made with PlainCalls;
// dial, if set, replaces the dialer (a unix socket's).
func (c *Client) withSessions(o clientOptions, dial func(ctx context.Context, network, addr string) (net.Conn, error)) {
	if o.plain {
		return
	}
	t := &http.Transport{DialContext: dial, TLSNextProto: map[string]func(string, *tls.Conn) http.RoundTripper{}}
	c.sessions = &sessionPool{c: c, upgrade: &http.Client{Transport: t}}
}

// workerDo makes a worker call: a frame of a session if the client has
// sessions and the daemon does, else the HTTP call POST path.
func (c *Client) workerDo(ctx context.Context, worker, op, lease, path string, in, out any) error {
	if p := c.sessions; p != nil && !p.plain.Load() && frameField(worker) {
		s, err := p.take(ctx)
		if err == nil {
			return s.call(ctx, op, worker, lease, path, in, out)
		}
		if !errors.Is(err, errNoSessions) {
			return err
		}
	}
	_, err := c.do(ctx, http.MethodPost, path, in, out)
	return err
}

// Sessions reports whether the client's worker calls go over worker
// sessions: true unless it was made with PlainCalls or a daemon refused the
// upgrade (then false from that refusal on).
func (c *Client) Sessions() bool {
	return c.sessions != nil && !c.sessions.plain.Load()
}

// frameField tells whether a worker id can be a frame header's field:
// printable ASCII, no space, short enough for the header. One that cannot
// — never a valid id — is sent as a plain call, for the daemon to refuse as
// it refuses it over HTTP; in a frame it would end the session.
func frameField(s string) bool {
	if s == "" || len(s) > MaxFrameHeader/2 {
		return false
	}
	for i := range len(s) {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// CloseSessions closes the client's worker sessions: their calls in flight
// fail with ErrSessionBroken, and the next call opens a new one.
func (c *Client) CloseSessions() {
	p := c.sessions
	if p == nil {
		return
	}
	p.mu.Lock()
	open := p.open
	p.open = nil
	p.mu.Unlock()
	for _, s := range open {
		s.fail(errors.New("closed by the client"))
	}
}

// take returns a session with a call's slot taken on it, opening one if
// none has room.
func (p *sessionPool) take(ctx context.Context) (*clientSession, error) {
	if s := p.free(); s != nil {
		return s, nil
	}
	p.opening.Lock()
	defer p.opening.Unlock()
	if s := p.free(); s != nil { // another call opened one meanwhile
		return s, nil
	}
	s, err := p.dial(ctx)
	if err != nil {
		return nil, err
	}
	s.slots <- struct{}{} // a new session has every slot free
	p.mu.Lock()
	p.open = append(p.open, s)
	p.mu.Unlock()
	return s, nil
}

// free takes a slot on an open session that has one, dropping the broken
// ones from the pool; nil if none has.
func (p *sessionPool) free() *clientSession {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open = slices.DeleteFunc(p.open, (*clientSession).isBroken)
	for _, s := range p.open {
		select {
		case s.slots <- struct{}{}:
			return s
		default:
		}
	}
	return nil
}

// dial asks the daemon for a session.
func (p *sessionPool) dial(ctx context.Context) (*clientSession, error) {
	path := SessionPath
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.c.base+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", SessionProtocol)
	if p.c.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.c.token)
	}
	resp, err := p.upgrade.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		conn, ok := resp.Body.(io.ReadWriteCloser)
		if !ok { // net/http gives a 101's body as the connection
			resp.Body.Close()
			return nil, fmt.Errorf("api: GET %s: 101 without a connection", path)
		}
		// Its backlog needs no bound of the writer's: at most
		// maxSessionCalls frames are in flight, a slot each.
		s := &clientSession{conn: conn, slots: make(chan struct{}, maxSessionCalls), pending: map[uint64]chan frameAnswer{},
			frames: NewFrameWriter(func(b []byte) error { _, err := conn.Write(b); return err }, 0)}
		go s.read(bufio.NewReaderSize(conn, 16<<10))
		return s, nil
	}
	defer resp.Body.Close()
	b, err := readAnswer(resp.Body, nil, 64<<10)
	if err != nil {
		return nil, err
	}
	if refusedUpgrade(resp.StatusCode) {
		p.plain.Store(true)
		return nil, fmt.Errorf("%w: GET %s answered %d", errNoSessions, path, resp.StatusCode)
	}
	if err := decodeAnswer(resp.StatusCode, b, nil, http.MethodGet, path); err != nil {
		return nil, err
	}
	return nil, fmt.Errorf("api: GET %s: answered %d, not 101", path, resp.StatusCode)
}

// clientSession is one open session.
type clientSession struct {
	conn  io.ReadWriteCloser
	slots chan struct{} // one per call in flight

	mu      sync.Mutex
	pending map[uint64]chan frameAnswer // nil once broken
	next    uint64
	err     error // why it broke, wrapping ErrSessionBroken

	frames *FrameWriter // its calls
}

// frameAnswer is an answer frame, or the session's end.
type frameAnswer struct {
	status int
	body   *[]byte // from answerBuffers
	err    error
}

func (s *clientSession) isBroken() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil
}

// call sends a frame for worker and waits for its answer, which it decodes
// into out as the HTTP call's would be. Its caller took a slot (take); call
// gives it back.
func (s *clientSession) call(ctx context.Context, op, worker, lease, path string, in, out any) error {
	defer func() { <-s.slots }()
	body, err := json.Marshal(in)
	if err != nil {
		return err
	}
	ch := make(chan frameAnswer, 1)
	s.mu.Lock()
	if s.err != nil {
		err := s.err
		s.mu.Unlock()
		return err
	}
	s.next++
	id := s.next
	s.pending[id] = ch
	s.mu.Unlock()
	s.write(id, op, worker, lease, body)
	select {
	case a := <-ch:
		if a.err != nil {
			return fmt.Errorf("%s %s: %w", op, path, a.err)
		}
		defer putAnswerBuffer(a.body)
		return decodeAnswer(a.status, *a.body, out, http.MethodPost, path)
	case <-ctx.Done():
		s.mu.Lock()
		delete(s.pending, id) // its answer, if it comes, is dropped
		s.mu.Unlock()
		if op == OpAcquire {
			// The daemon would go on waiting, and grant a lease nobody
			// reads: end the session, as a cancelled HTTP call closes its
			// connection, so that the daemon ends the wait. The calls in
			// flight with it fail, retryable.
			s.fail(fmt.Errorf("an acquire's caller went: %w", ctx.Err()))
		}
		return ctx.Err()
	}
}

// write sends a request frame, with the others ready with it; a failed
// write ends the session.
func (s *clientSession) write(id uint64, op, worker, lease string, body []byte) {
	err := s.frames.Write(func(dst []byte) []byte { return AppendRequest(dst, id, op, worker, lease, body) },
		func() bool { return len(s.slots) > 1 })
	if err != nil {
		s.fail(err)
	}
}

// read reads answers and hands each to its call, until the connection ends.
func (s *clientSession) read(br *bufio.Reader) {
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			s.fail(err)
			return
		}
		h, err := ParseAnswer(line)
		if err != nil {
			s.fail(err)
			return
		}
		buf := answerBuffers.Get().(*[]byte)
		if cap(*buf) < h.Len {
			*buf = make([]byte, 0, h.Len)
		}
		*buf = (*buf)[:h.Len]
		if _, err := io.ReadFull(br, *buf); err != nil {
			s.fail(err)
			return
		}
		if h.ID == 0 { // about the session: the daemon closes it
			s.fail(decodeAnswer(h.Status, *buf, nil, http.MethodGet, "session"))
			return
		}
		s.mu.Lock()
		ch := s.pending[h.ID]
		delete(s.pending, h.ID)
		s.mu.Unlock()
		if ch == nil {
			putAnswerBuffer(buf) // its call gave up
			continue
		}
		ch <- frameAnswer{status: h.Status, body: buf}
	}
}

// fail ends the session: its calls in flight get ErrSessionBroken, and the
// next call opens another.
func (s *clientSession) fail(cause error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = fmt.Errorf("%w: %v", ErrSessionBroken, cause)
	}
	pending := s.pending
	s.pending = nil
	s.mu.Unlock()
	_ = s.conn.Close()
	for _, ch := range pending {
		ch <- frameAnswer{err: s.err}
	}
}
