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
	var f [5][]byte
	if err := frameFields(line, f[:], "ID OP WORKER LEASE LENGTH"); err != nil {
		return h, err
	}
	var err error
	if h.ID, err = frameID(f[0]); err != nil {
		return h, err
	}
	h.Op, h.Worker, h.Lease = internOp(f[1]), string(f[2]), internLease(f[3])
	h.Len, err = frameLen(f[4])
	return h, err
}

// internOp is op as a string, without a copy when it is one of the ops.
func internOp(op []byte) string {
	switch string(op) { // compared, not converted
	case OpAcquire:
		return OpAcquire
	case OpHeartbeat:
		return OpHeartbeat
	case OpStart:
		return OpStart
	case OpReport:
		return OpReport
	}
	return string(op)
}

// internLease is lease as a string, without a copy when it is "-".
func internLease(lease []byte) string {
	if string(lease) == "-" {
		return "-"
	}
	return string(lease)
}

// ParseAnswer reads an answer's header line (its LF included).
func ParseAnswer(line []byte) (FrameHeader, error) {
	var h FrameHeader
	var f [3][]byte
	if err := frameFields(line, f[:], "ID STATUS LENGTH"); err != nil {
		return h, err
	}
	id, ok := parseDecimal(f[0], 64)
	if !ok {
		return h, fmt.Errorf("frame id %q: want a decimal number", f[0])
	}
	st, ok := parseDecimal(f[1], 10)
	if !ok || st < 100 || st > 599 {
		return h, fmt.Errorf("frame status %q: want an HTTP status", f[1])
	}
	h.ID, h.Status = id, int(st)
	var err error
	h.Len, err = frameLen(f[2])
	return h, err
}

// frameFields splits a header line into len(f) fields, each non-empty and
// separated by one space, into f.
func frameFields(line []byte, f [][]byte, want string) error {
	b, ok := bytes.CutSuffix(line, []byte{'\n'})
	if !ok {
		return fmt.Errorf("frame header %q: no line feed in its first %d bytes", truncate(line), MaxFrameHeader)
	}
	for i, c := range b {
		if c != ' ' && (c < 0x21 || c > 0x7e) {
			return fmt.Errorf("frame header %q: byte %d is 0x%02x: want printable ASCII, fields separated by one space", truncate(b), i, c)
		}
	}
	rest := b
	for i := range f {
		field, after, found := bytes.Cut(rest, []byte{' '})
		if len(field) == 0 || found == (i == len(f)-1) {
			return fmt.Errorf("frame header %q: want %s, separated by one space", truncate(b), want)
		}
		f[i], rest = field, after
	}
	return nil
}

func frameID(b []byte) (uint64, error) {
	id, ok := parseDecimal(b, 64)
	if !ok || id == 0 {
		return 0, fmt.Errorf("frame id %q: want a decimal number from 1 to %d", truncate(b), uint64(1<<64-1))
	}
	return id, nil
}

func frameLen(b []byte) (int, error) {
	n, ok := parseDecimal(b, 31)
	if !ok {
		return 0, fmt.Errorf("frame length %q: want a decimal number of bytes", truncate(b))
	}
	return int(n), nil
}

// parseDecimal is strconv.ParseUint(string(b), 10, bits) without the
// string: digits only, below 2^bits.
func parseDecimal(b []byte, bits uint) (uint64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if n > (1<<64-1-d)/10 {
			return 0, false
		}
		n = n*10 + d
	}
	if bits < 64 && n >= 1<<bits {
		return 0, false
	}
	return n, true
}

func truncate(b []byte) []byte {
	if len(b) > 40 {
		return append(b[:40:40], "..."...)
	}
	return b
}
