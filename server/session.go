package server

// A worker session: GET /v1/session upgraded to api.SessionProtocol, then
// the worker calls of a client's workers as frames on that one connection
// (api/frame.go has the format). Each frame runs the call's workerOp, as
// its HTTP handler does, and is answered with the same bytes. What a
// session saves is HTTP: no request line, headers or response headers to
// parse and write per call, no goroutine handed between per call, and the
// frames of concurrent calls — of all the workers sharing the connection —
// read together and their answers written together, a system call for many.
//
// The token is looked up once, at the upgrade (a worker's token, or none on
// an open daemon); each frame is then held to the rules of its HTTP call:
// its worker must be the token's, and a start's or report's body must name
// the frame's worker.
// Frames are served concurrently, each by a goroutine of the session's, so
// that a long-poll acquire does not hold the heartbeats behind it; at most MaxSessionCalls are in
// flight, past which the daemon reads no further frame until one ends. A
// frame over Options.MaxBody, a body that does not arrive within
// Options.BodyTimeout, or a header that cannot be read is answered and ends
// the session: the stream of frames can no longer be trusted.
//
// A session has no idle timeout, unlike an HTTP connection kept alive: it is
// a worker, whose heartbeats or long polls keep it busy, and the daemon's
// TCP keep-alive (Go's default on accepted connections) ends one whose peer
// is gone without a word. It holds its place under LimitListener for as
// long as it lasts, as any connection does.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/leaselog/leaselog/api"
)

// MaxSessionCalls is how many calls one session may have in flight, as an
// HTTP/2 connection's streams (MaxStreams).
const MaxSessionCalls = MaxStreams

// sessionOp is an op a session's frames may name.
type sessionOp struct {
	run   workerOp
	long  bool   // a long poll: no RequestTimeout
	route string // the metrics' route label and the log line's
}

var sessionOps = map[string]*sessionOp{
	api.OpAcquire:   {run: (*Server).acquireOp, long: true, route: "SESSION acquire"},
	api.OpHeartbeat: {run: (*Server).heartbeatOp, route: "SESSION heartbeat"},
	api.OpStart:     {run: (*Server).startOp, route: "SESSION start"},
	api.OpReport:    {run: (*Server).reportOp, route: "SESSION report"},
}

// session answers GET /v1/session: 101 and the session, for as long as the
// connection lasts.
func (s *Server) session(w http.ResponseWriter, r *http.Request, c *call) error {
	if _, err := params(r); err != nil {
		return err
	}
	if r.ProtoMajor != 1 {
		return badRequest("a session is an upgrade of an HTTP/1.1 connection; this request came over HTTP/%d", r.ProtoMajor)
	}
	if !headerHas(r.Header, "Connection", "upgrade") || !strings.EqualFold(strings.TrimSpace(r.Header.Get("Upgrade")), api.SessionProtocol) {
		return badRequest("a session needs the headers Connection: Upgrade and Upgrade: %s", api.SessionProtocol)
	}
	if r.ContentLength != 0 {
		return badRequest("a session's upgrade takes no body")
	}
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil { // HTTP/2 is refused above: a writer that cannot let go of its connection
		return badRequest("this connection cannot be upgraded: %v", err)
	}
	c.started, c.status = true, http.StatusSwitchingProtocols
	s.runSession(conn, rw.Reader, c)
	return nil
}

// headerHas reports whether a comma-separated header holds token.
func headerHas(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for t := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// serverSession is one session's state.
type serverSession struct {
	s     *Server
	conn  net.Conn
	br    *bufio.Reader
	who   *principal
	ctx   context.Context // done when the session ends or the server closes
	slots chan struct{}   // one per call in flight
	// idle hands a frame to a goroutine that served one and waits for the
	// next: a goroutine's stack has grown to what a call needs, and a new
	// one per frame would grow it again, copying, call after call.
	idle chan frame
	wg   sync.WaitGroup // the goroutines serving frames

	frames *api.FrameWriter // its answers
}

// runSession serves the frames of an upgraded connection until it ends.
func (s *Server) runSession(conn net.Conn, br *bufio.Reader, c *call) {
	// Undo the deadlines net/http left: a session waits for frames as long
	// as the connection lasts.
	_ = conn.SetDeadline(time.Time{})
	if _, err := io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+api.SessionProtocol+"\r\n\r\n"); err != nil {
		_ = conn.Close()
		return
	}
	if s.sessionHook != nil {
		s.sessionHook(conn)
	}
	s.metrics.sessions.Inc()
	defer s.metrics.sessions.Dec()
	ctx, cancel := context.WithCancel(s.base)
	defer cancel()
	// Close (or the end of the read loop) stops the reads: the calls in
	// flight are answered, and the connection closed after them.
	defer context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })()
	ss := &serverSession{s: s, conn: conn, br: br, who: c.who, ctx: ctx,
		slots: make(chan struct{}, MaxSessionCalls), idle: make(chan frame)}
	ss.frames = api.NewFrameWriter(func(b []byte) error {
		// A client that stops reading must not hold the calls (and their
		// slots) for ever.
		_ = conn.SetWriteDeadline(time.Now().Add(s.opts.RequestTimeout))
		_, err := conn.Write(b)
		return err
	}, 0)
	ss.read()
	cancel()
	ss.wg.Wait()
	_ = conn.Close()
}

// read reads frames and starts their calls until the connection ends or
// its framing breaks.
func (ss *serverSession) read() {
	for {
		line, err := ss.br.ReadSlice('\n')
		if err != nil {
			if errors.Is(err, bufio.ErrBufferFull) {
				ss.refuse(0, badRequest("frame header %q...: no line feed in its first %d bytes", line[:min(len(line), 40)], len(line)))
			}
			return // the client hung up, or the server closes
		}
		if len(line) > api.MaxFrameHeader {
			ss.refuse(0, badRequest("frame header longer than %d bytes", api.MaxFrameHeader))
			return
		}
		h, err := api.ParseRequest(line)
		if err != nil {
			ss.refuse(0, badRequest("%v", err))
			return
		}
		if int64(h.Len) > ss.s.opts.MaxBody {
			ss.refuse(h.ID, tooLargeError(ss.s.opts.MaxBody))
			return
		}
		buf := bodyBuffers.Get().(*[]byte)
		body, err := ss.readBody(buf, h.Len)
		if err != nil {
			putBodyBuffer(buf)
			if ss.ctx.Err() == nil && errors.Is(err, errBodyTimeout) {
				ss.refuse(h.ID, bodyTimeoutError(err))
			}
			return
		}
		// A lone call — none in flight, no other frame read — is served
		// here: the hand-off to a frame goroutine is a wake-up on the
		// path of every call of a lone worker. A frame that comes in
		// meanwhile waits for it, as it would have waited for its fsync.
		// A long poll is never served here: it could hold the others for
		// as long as it waits.
		alone := len(ss.slots) == 0 && ss.br.Buffered() == 0 && !isLong(h.Op)
		select {
		case ss.slots <- struct{}{}:
		case <-ss.ctx.Done():
			putBodyBuffer(buf)
			return
		}
		if alone {
			ss.serve(h, body, buf)
			continue
		}
		f := frame{h: h, body: body, buf: buf}
		select {
		case ss.idle <- f:
		default:
			ss.wg.Go(func() { ss.serveFrames(f) })
		}
	}
}

// isLong says whether op is a long poll.
func isLong(op string) bool {
	o := sessionOps[op]
	return o != nil && o.long
}

// frame is a request frame read whole: its header, and its body in buf.
type frame struct {
	h    api.FrameHeader
	body []byte
	buf  *[]byte // from bodyBuffers
}

// serveFrames serves f, then the frames handed to it while idle, until the
// session ends. A session keeps as many of these goroutines as it had calls
// in flight at its busiest, give or take a few: one that has answered but is
// not yet waiting is not seen idle, and the reader starts another.
func (ss *serverSession) serveFrames(f frame) {
	for {
		ss.serve(f.h, f.body, f.buf)
		select {
		case f = <-ss.idle:
		case <-ss.ctx.Done():
			return
		}
	}
}

// readBody reads a frame's body of n bytes into buf, under the body
// deadline when it is not already buffered.
func (ss *serverSession) readBody(buf *[]byte, n int) ([]byte, error) {
	if cap(*buf) < n {
		*buf = make([]byte, 0, n)
	}
	b := (*buf)[:n]
	if ss.br.Buffered() >= n {
		_, err := io.ReadFull(ss.br, b)
		return b, err
	}
	_ = ss.conn.SetReadDeadline(time.Now().Add(ss.s.opts.BodyTimeout))
	_, err := io.ReadFull(ss.br, b)
	_ = ss.conn.SetReadDeadline(time.Time{})
	if ss.ctx.Err() != nil { // the server closes: its deadline was lifted above
		return nil, ss.ctx.Err()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		err = fmt.Errorf("%w (%v)", errBodyTimeout, ss.s.opts.BodyTimeout)
	}
	return b, err
}

// refuse answers a frame that ends the session (id 0: the session itself),
// recording it as a refused call.
func (ss *serverSession) refuse(id uint64, err error) {
	c := &call{route: "SESSION frame"}
	c.status, _ = ss.answer(ss.ctx, id, c, func() (int, []byte) { return ss.s.errorJSON(ss.ctx, c, err) })
	ss.s.record(c, "SESSION", api.SessionPath, 0)
}

// serve runs one frame's call and writes its answer.
func (ss *serverSession) serve(h api.FrameHeader, body []byte, buf *[]byte) {
	defer func() { <-ss.slots }()
	defer putBodyBuffer(buf)
	start := time.Now()
	s := ss.s
	c := &call{route: "SESSION " + h.Op, received: s.opts.Clock.Now(), worker: h.Worker, bound: h.Worker, who: ss.who}
	op := sessionOps[h.Op]
	if op != nil {
		c.route = op.route
	}
	if l := s.opts.Load; l != nil && (op == nil || !op.long) {
		l.Enter()
		defer l.Leave()
	}
	ctx := ss.ctx
	c.status, _ = ss.answer(ctx, h.ID, c, func() (int, []byte) {
		if op == nil {
			c.route = "SESSION unknown"
			return s.errorJSON(ctx, c, badRequest("unknown op %q: want %s, %s, %s or %s", h.Op, api.OpAcquire, api.OpHeartbeat, api.OpStart, api.OpReport))
		}
		// The route's rule of the HTTP call, first as there: the
		// worker's own token.
		if err := s.checkWorker(c, h.Worker); err != nil {
			return s.errorJSON(ctx, c, err)
		}
		if err := s.svc.Err(); err != nil {
			return s.errorJSON(ctx, c, err)
		}
		rctx := ctx
		if !op.long {
			var cancel context.CancelFunc
			rctx, cancel = context.WithTimeout(ctx, s.opts.RequestTimeout)
			defer cancel()
		}
		v, err := op.run(s, rctx, c, h.Lease, body)
		if err != nil {
			return s.errorJSON(rctx, c, err)
		}
		return s.encodeJSON(c, http.StatusOK, v)
	})
	c.started = true
	s.record(c, "SESSION", h.Op, time.Since(start))
}

// answer runs call, a panic in it becoming a 500 as over HTTP, and writes
// its answer as frame id.
func (ss *serverSession) answer(ctx context.Context, id uint64, c *call, call func() (int, []byte)) (status int, b []byte) {
	func() {
		defer func() {
			if p := recover(); p != nil {
				status, b = ss.s.errorJSON(ctx, c, fmt.Errorf("panic: %v\n%s", p, debug.Stack()))
			}
		}()
		status, b = call()
	}()
	ss.write(id, status, b)
	return status, b
}

// write writes an answer frame, with the others ready with it; a failed
// write closes the connection, which ends the read loop.
func (ss *serverSession) write(id uint64, status int, body []byte) {
	err := ss.frames.Write(func(dst []byte) []byte { return api.AppendAnswer(dst, id, status, body) },
		func() bool { return len(ss.slots) > 1 })
	if err != nil {
		_ = ss.conn.Close()
	}
}
