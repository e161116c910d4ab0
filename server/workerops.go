package server

import (
	"context"
	"net/http"
	"strconv"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/ops"
)

// The worker calls — acquire, heartbeat, start, report — are package ops's;
// each has one transport here, a workerOp: the body's bytes in, decoded
// strictly, the call's worker authorised, the answer's value out. The HTTP
// handler (serveOp) and a session's frame (session.go) both run it, and both
// encode its answer or its error with encodeJSON and errorJSON: a call
// decides and answers the same, byte for byte, whichever carried it, and as
// the daemon's own worker gets it in process (ops.Daemon).

// workerOp is the core of one worker call: lease is the {lease} of the path
// (start, report; "" for the others), body the request's body, c.in, which
// the op may give back early with c.releaseBody (acquire does, before its
// wait), and must not read after.
type workerOp func(s *Server, ctx context.Context, c *call, lease string, body []byte) (any, error)

// serveOp is the HTTP handler of a worker call: no query, the body read
// whole, op, and its answer.
func (s *Server) serveOp(w http.ResponseWriter, r *http.Request, c *call, op workerOp) error {
	if _, err := params(r); err != nil {
		return err
	}
	buf := bodyBuffers.Get().(*[]byte)
	b, err := readBody(r, buf)
	if err != nil {
		putBodyBuffer(buf)
		return err
	}
	*buf = b
	c.holdBody(buf)
	defer c.releaseBody()
	v, err := op(s, r.Context(), c, r.PathValue("lease"), c.in)
	if err != nil {
		return err
	}
	s.writeJSON(w, c, http.StatusOK, v)
	return nil
}

// acquire answers POST /v1/workers/{worker}/acquire.
func (s *Server) acquire(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.serveOp(w, r, c, (*Server).acquireOp)
}

// heartbeat answers POST /v1/workers/{worker}/heartbeat.
func (s *Server) heartbeat(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.serveOp(w, r, c, (*Server).heartbeatOp)
}

// start answers POST /v1/leases/{lease}/start.
func (s *Server) start(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.serveOp(w, r, c, (*Server).startOp)
}

// report answers POST /v1/leases/{lease}/report.
func (s *Server) report(w http.ResponseWriter, r *http.Request, c *call) error {
	return s.serveOp(w, r, c, (*Server).reportOp)
}

// acquireOp: ops.Acquire, for the worker of the path (or the frame), held
// from when the request's headers (or the frame) were read, on
// Options.Clock. Its wait is capped at Options.MaxWait and ended by Close.
// ctx has no deadline of the request's: the wait is the call's; the read
// back after it has Options.RequestTimeout.
func (s *Server) acquireOp(ctx context.Context, c *call, _ string, body []byte) (any, error) {
	var in api.Acquire
	err := decodeJSON(body, &in, true)
	c.releaseBody() // the wait must not pin the body's bytes
	if err != nil {
		return nil, err
	}
	return ops.Acquire(ctx, s.svc, c.worker, in, ops.Hold{MaxWait: s.opts.MaxWait, Wait: s.holdWait,
		Clock: s.opts.Clock, Received: c.received, ReadTimeout: s.opts.RequestTimeout})
}

// holdWait is the context of an acquire's wait for a job: ended by Close,
// and passed through the test's hook.
func (s *Server) holdWait(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.base, cancel) // Close ends the wait
	if s.waitHook != nil {
		ctx = s.waitHook(ctx)
	}
	return ctx, func() { stop(); cancel() }
}

// heartbeatOp: ops.Heartbeat, for the worker of the path (or the frame).
func (s *Server) heartbeatOp(ctx context.Context, c *call, _ string, body []byte) (any, error) {
	var in api.Heartbeat
	if err := decodeJSON(body, &in, true); err != nil {
		return nil, err
	}
	return ops.Heartbeat(ctx, s.svc, c.worker, in)
}

// startOp: ops.Start, the body's worker held to the token's (and the
// frame's).
func (s *Server) startOp(ctx context.Context, c *call, leaseSeg string, body []byte) (any, error) {
	id, err := parseLease(c, leaseSeg)
	if err != nil {
		return nil, err
	}
	var in api.Start
	if err := decodeJSON(body, &in, false); err != nil {
		return nil, err
	}
	c.worker = in.Worker
	l, err := ops.Start(ctx, s.svc, id, in, func(w string) error { return s.checkWorker(c, w) })
	if err != nil {
		return nil, err
	}
	c.job = l.Job
	return l, nil
}

// reportOp: ops.Report, the body's worker held to the token's (and the
// frame's).
func (s *Server) reportOp(ctx context.Context, c *call, leaseSeg string, body []byte) (any, error) {
	id, err := parseLease(c, leaseSeg)
	if err != nil {
		return nil, err
	}
	var in api.Report
	if err := decodeJSON(body, &in, false); err != nil {
		return nil, err
	}
	c.worker = in.Worker
	r, err := ops.Report(ctx, s.svc, id, in, func(w string) error { return s.checkWorker(c, w) })
	c.job = r.Job
	if err != nil {
		return nil, err
	}
	return r, nil
}

// parseLease parses the {lease} of a path (or of a session's frame): a
// fencing token, a positive integer.
func parseLease(c *call, v string) (uint64, error) {
	id, err := strconv.ParseUint(v, 10, 64)
	if err != nil || id == 0 {
		return 0, badRequest("lease id %q: want a positive integer", v)
	}
	c.lease = id
	return id, nil
}
