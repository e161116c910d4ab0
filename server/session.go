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
// flight, past which the daemon reads no further frame until one ends. Nor
// does it read one while more than MaxSessionBacklog bytes of answers wait
// for the client to take them: a client that does not read is not read,
// and is cut when a write of its answers does not end within
// Options.RequestTimeout. A frame over Options.MaxBody, a header or a body
// that does not arrive within Options.BodyTimeout (the header from its first
// byte, the body from its header), or a header that cannot be read is
// answered and ends the session: the stream of frames can no longer be
// trusted. The connection is then closed lingering (linger.go), so that the
// client reads that answer rather than a reset.
//
// A session has no idle timeout between frames, unlike an HTTP connection
// kept alive: it is a worker's, whose heartbeats or long polls keep it busy,
// and whose client keeps it open between calls; the daemon's TCP keep-alive
// (Go's default on accepted connections) ends one whose peer is gone
// without a word. But its first frame must begin within
// Options.BodyTimeout of the upgrade, as an HTTP request's body must follow
// its headers: a session that never sends a frame is no worker's, and would
// only hold a place. It holds its place under LimitListener for as long as
// it lasts, as any connection does.

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/leaselog/leaselog/api"
)

// MaxSessionCalls is how many calls one session may have in flight, as an
// HTTP/2 connection's streams (MaxStreams).
const MaxSessionCalls = MaxStreams

// MaxSessionBacklog is how many bytes of a session's answers may wait for
// its client to read them before the daemon stops reading its frames: tens
// of thousands of the common answers (a heartbeat's is ~100 bytes). The
// calls in flight still finish and add their answers (their events are
// durable anyway); their slots bound those, and a larger answer is written
// all the same, the reads waiting for it.
const MaxSessionBacklog = 4 << 20

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
	// armed: a read deadline is set, for the frame being read; it is
	// lifted only when the reader waits for the next frame.
	armed bool
}

// runSession serves the frames of an upgraded connection until it ends.
func (s *Server) runSession(conn net.Conn, br *bufio.Reader, c *call) {
	// Undo the deadlines net/http left: read sets the session's own.
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
	// Close stops the reads: the calls in flight are answered, and the
	// connection closed after them.
	defer context.AfterFunc(s.base, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })()
	ss := &serverSession{s: s, conn: conn, br: br, who: c.who, ctx: ctx,
		slots: make(chan struct{}, MaxSessionCalls), idle: make(chan frame)}
	ss.frames = api.NewFrameWriter(func(b []byte) error {
		// A client that stops reading must not hold the calls (and their
		// slots) for ever.
		_ = conn.SetWriteDeadline(time.Now().Add(s.opts.RequestTimeout))
		_, err := conn.Write(b)
		return err
	}, s.sessionBacklog)
	ss.read()
	cancel()
	ss.wg.Wait()
	// Every answer is written (or the writes failed). A session the daemon
	// ended — a frame refused — may have frames unread behind it: linger,
	// so that the client reads the refusal rather than a reset. One whose
	// answers could not be written has nobody to tell.
	if ss.frames.Err() != nil {
		_ = conn.Close()
		return
	}
	s.lingerClose(conn, br)
}

// readBy sets the read deadline of the session's connection, unless the
// server closes, whose deadline in the past must stay.
func (ss *serverSession) readBy(t time.Time) {
	_ = ss.conn.SetReadDeadline(t)
	ss.armed = !t.IsZero()
	if ss.s.base.Err() != nil {
		_ = ss.conn.SetReadDeadline(time.Unix(1, 0))
	}
}

// read reads frames and starts their calls until the connection ends or
// its framing breaks.
//
// A frame that arrives whole, as a client writes them, is read from the
// buffer with no deadline to set; one that arrives in pieces is read under
// the body timeout, its header from its first byte. Deadlines are set on
// the runtime's poller, not by a system call, and lifted only when the
// reader waits for the next frame, once.
func (ss *serverSession) read() {
	timeout := ss.s.opts.BodyTimeout
	ss.readBy(time.Now().Add(timeout)) // the first frame's
	for first := true; ; first = false {
		// A client that leaves its answers unread is not read either.
		if ss.frames.Wait(ss.ctx) != nil {
			return
		}
		if ss.br.Buffered() == 0 {
			if ss.armed && !first {
				ss.readBy(time.Time{}) // between frames a session may idle
			}
			if _, err := ss.br.Peek(1); err != nil {
				if first && ss.timedOut(err) {
					ss.refuse(0, frameTimeoutError("no frame within %v of the upgrade", timeout))
				}
				return // the client hung up, or the server closes
			}
		}
		if b, _ := ss.br.Peek(ss.br.Buffered()); bytes.IndexByte(b, '\n') < 0 {
			ss.readBy(time.Now().Add(timeout)) // the rest of the header
		}
		line, err := ss.br.ReadSlice('\n')
		if err != nil {
			switch {
			case errors.Is(err, bufio.ErrBufferFull):
				ss.refuse(0, badRequest("frame header %q...: no line feed in its first %d bytes", line[:min(len(line), 40)], len(line)))
			case ss.timedOut(err):
				ss.refuse(0, frameTimeoutError("frame header %q...: not whole within %v of its first byte", line[:min(len(line), 40)], timeout))
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
		if err := ss.readBody(buf, h.Len); err != nil {
			putBodyBuffer(buf)
			if ss.timedOut(err) {
				ss.refuse(h.ID, bodyTimeoutError(fmt.Errorf("%w (%v)", errBodyTimeout, timeout)))
			}
			return
		}
		select {
		case ss.slots <- struct{}{}:
		case <-ss.ctx.Done():
			putBodyBuffer(buf)
			return
		}
		f := frame{h: h, buf: buf}
		select {
		case ss.idle <- f:
		default:
			ss.wg.Go(func() { ss.serveFrames(f) })
		}
	}
}

// frameTimeoutError is the answer to a frame that did not arrive in time
// (its body's is bodyTimeoutError's).
func frameTimeoutError(format string, args ...any) *api.Error {
	return &api.Error{Status: http.StatusRequestTimeout, Code: api.CodeBodyTimeout, Message: fmt.Sprintf(format, args...)}
}

// timedOut reports whether err is the session's read deadline passing, not
// the server closing.
func (ss *serverSession) timedOut(err error) bool {
	return errors.Is(err, os.ErrDeadlineExceeded) && ss.s.base.Err() == nil
}

// frame is a request frame read whole: its header, and its body, the first
// h.Len bytes of buf. It holds the body only through buf, which
// putBodyBuffer empties when it drops a large one: a frame handed on to a
// goroutine pins no body once its call let go of it.
type frame struct {
	h   api.FrameHeader
	buf *[]byte // from bodyBuffers
}

// serveFrames serves f, then the frames handed to it while idle, until the
// session ends. A session keeps as many of these goroutines as it had calls
// in flight at its busiest, give or take a few: one that has answered but is
// not yet waiting is not seen idle, and the reader starts another.
func (ss *serverSession) serveFrames(f frame) {
	for {
		ss.serve(f)
		select {
		case f = <-ss.idle:
		case <-ss.ctx.Done():
			return
		}
	}
}

// readBody reads a frame's body of n bytes into buf, under the body
// deadline when it is not already buffered.
func (ss *serverSession) readBody(buf *[]byte, n int) error {
	if cap(*buf) < n {
		*buf = make([]byte, 0, n)
	}
	*buf = (*buf)[:n]
	if ss.br.Buffered() < n {
		ss.readBy(time.Now().Add(ss.s.opts.BodyTimeout))
	}
	_, err := io.ReadFull(ss.br, *buf)
	return err
}

// refuse answers a frame that ends the session (id 0: the session itself),
// recording it as a refused call.
func (ss *serverSession) refuse(id uint64, err error) {
	c := &call{route: "SESSION frame"}
	c.status, _ = ss.answer(ss.ctx, id, c, func() (int, []byte) { return ss.s.errorJSON(ss.ctx, c, err) })
	ss.s.record(c, "SESSION", api.SessionPath, 0)
}

// serve runs one frame's call and writes its answer.
func (ss *serverSession) serve(f frame) {
	defer func() { <-ss.slots }()
	start := time.Now()
	s := ss.s
	h := f.h
	c := &call{route: "SESSION " + h.Op, received: s.opts.Clock.Now(), worker: h.Worker, bound: h.Worker, who: ss.who}
	c.holdBody(f.buf)
	defer c.releaseBody()
	op := sessionOps[h.Op]
	if op != nil {
		c.route = op.route
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
		v, err := op.run(s, rctx, c, h.Lease, c.in)
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
