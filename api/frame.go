package api

import (
	"bytes"
	"fmt"
	"strconv"
)

// A worker session (GET /v1/session, upgraded to SessionProtocol) carries
// the worker calls of one client as frames on one connection, whichever
// worker each speaks for: a process that runs many workers (the bench, an
// embedder) shares one connection among them, as a gRPC client shares its
// HTTP/2 connection, so that the calls in flight together are read and
// written together. Each frame is a header line, then exactly the bytes its
// length says:
//
//	request: ID SP OP SP WORKER SP LEASE SP LENGTH LF BODY
//	answer:  ID SP STATUS SP LENGTH LF BODY
//
// ID is the caller's number for the call (1 to 2^64-1, decimal), echoed by
// its answer; answers come in the order the calls end, not the order they
// were sent. OP is one of the Op constants. WORKER is the worker the call
// speaks for, the {worker} of the path of acquire and heartbeat; the token
// of the session must be that worker's, and a start's or report's body must
// name it. LEASE is the {lease} of the path of start and report, as the path
// would carry it; the other ops ignore it (send "-"). BODY is the JSON body the separate call takes, and the
// answer's BODY is byte for byte what that call answers, with its status: a
// frame is that call without HTTP. An answer of ID 0 is about the session
// itself (a header it could not read), and the daemon closes the
// connection after it.
//
// The body, not an envelope, carries the JSON: the daemon decodes it with
// the same strict decoder as the HTTP body, and answers with the same bytes.

// SessionProtocol is the Upgrade token of a worker session.
const SessionProtocol = "leaselog-session/1"

// The ops of a session: the worker calls of the same names.
const (
	OpAcquire   = "acquire"   // POST /v1/workers/{worker}/acquire
	OpHeartbeat = "heartbeat" // POST /v1/workers/{worker}/heartbeat
	OpStart     = "start"     // POST /v1/leases/{lease}/start
	OpReport    = "report"    // POST /v1/leases/{lease}/report
)

// MaxFrameHeader is the longest header line a session reads, its LF
// included: room for a 128-byte worker id and every number at its longest.
const MaxFrameHeader = 256

// FrameHeader is a frame's header line, parsed: a request's (Op, Worker
// and Lease set) or an answer's (Status set).
type FrameHeader struct {
	ID     uint64
	Op     string
	Worker string
	Lease  string
	Status int
	Len    int
}

// AppendRequest appends a request frame to dst.
func AppendRequest(dst []byte, id uint64, op, worker, lease string, body []byte) []byte {
	if lease == "" {
		lease = "-"
	}
	dst = strconv.AppendUint(dst, id, 10)
	dst = append(dst, ' ')
	dst = append(dst, op...)
	dst = append(dst, ' ')
	dst = append(dst, worker...)
	dst = append(dst, ' ')
	dst = append(dst, lease...)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(len(body)), 10)
	dst = append(dst, '\n')
	return append(dst, body...)
}

// AppendAnswer appends an answer frame to dst.
func AppendAnswer(dst []byte, id uint64, status int, body []byte) []byte {
	dst = strconv.AppendUint(dst, id, 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(status), 10)
	dst = append(dst, ' ')
	dst = strconv.AppendInt(dst, int64(len(body)), 10)
	dst = append(dst, '\n')
	return append(dst, body...)
}

// ParseRequest reads a request's header line (its LF included).
func ParseRequest(line []byte) (FrameHeader, error) {
	var h FrameHeader
	f, err := frameFields(line, 5, "ID OP WORKER LEASE LENGTH")
	if err != nil {
		return h, err
	}
	if h.ID, err = frameID(f[0]); err != nil {
		return h, err
	}
	h.Op, h.Worker, h.Lease = string(f[1]), string(f[2]), string(f[3])
	h.Len, err = frameLen(f[4])
	return h, err
}

// ParseAnswer reads an answer's header line (its LF included).
func ParseAnswer(line []byte) (FrameHeader, error) {
	var h FrameHeader
	f, err := frameFields(line, 3, "ID STATUS LENGTH")
	if err != nil {
		return h, err
	}
	if h.ID, err = strconv.ParseUint(string(f[0]), 10, 64); err != nil {
		return h, fmt.Errorf("frame id %q: want a decimal number", f[0])
	}
	st, err := strconv.Atoi(string(f[1]))
	if err != nil || st < 100 || st > 599 {
		return h, fmt.Errorf("frame status %q: want an HTTP status", f[1])
	}
	h.Status = st
	h.Len, err = frameLen(f[2])
	return h, err
}

func frameFields(line []byte, n int, want string) ([][]byte, error) {
	b, ok := bytes.CutSuffix(line, []byte{'\n'})
	if !ok {
		return nil, fmt.Errorf("frame header %q: no line feed in its first %d bytes", truncate(line), MaxFrameHeader)
	}
	for i, c := range b {
		if c != ' ' && (c < 0x21 || c > 0x7e) {
			return nil, fmt.Errorf("frame header %q: byte %d is 0x%02x: want printable ASCII, fields separated by one space", truncate(b), i, c)
		}
	}
	f := bytes.Split(b, []byte{' '})
	if len(f) != n {
		return nil, fmt.Errorf("frame header %q: want %s, separated by one space", truncate(b), want)
	}
	for _, x := range f {
		if len(x) == 0 {
			return nil, fmt.Errorf("frame header %q: want %s, separated by one space", truncate(b), want)
		}
	}
	return f, nil
}

func frameID(b []byte) (uint64, error) {
	id, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil || id == 0 {
		return 0, fmt.Errorf("frame id %q: want a decimal number from 1 to %d", truncate(b), uint64(1<<64-1))
	}
	return id, nil
}

func frameLen(b []byte) (int, error) {
	n, err := strconv.ParseUint(string(b), 10, 31)
	if err != nil {
		return 0, fmt.Errorf("frame length %q: want a decimal number of bytes", truncate(b))
	}
	return int(n), nil
}

func truncate(b []byte) []byte {
	if len(b) > 40 {
		return append(b[:40:40], "..."...)
	}
	return b
}
