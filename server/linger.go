package server

// A lingering close. An answer given before the request was read to its end
// — a 401 once the headers are read, a body over the limit, a session's
// frame refused — is the connection's last. Closed at once, the socket
// still holds bytes the client sent that nobody read, and the kernel then
// answers with a reset, not a FIN: the client, often still writing its
// body, gets "connection reset by peer", and its kernel drops the answer it
// had received but not yet read. net/http itself closes such a connection
// at once, or half a second after its FIN, reading nothing: a body of a few
// MB was reset in most tries.
//
// So the daemon closes as nginx's lingering_close and Apache do: the answer
// written, it shuts its write side (a FIN: the answer is whole), then reads
// and discards what the client still sends, until the client closes too, or
// for at most lingerTime (or the body timeout, if shorter) and lingerBytes,
// and only then closes. While it lingers the connection keeps its place
// under LimitListener (it holds a file descriptor), and Server.Close ends
// the lingering at once, so that a shutdown is not held by it.
//
// Over HTTP/1.1 the connection is taken from net/http once the answer is
// flushed (Hijack): net/http closes without reading, and a wrapper of the
// listener's connections could not tell a connection with a refused body
// from one closed idle, which must not linger. A session owns its
// connection already. Over HTTP/2 an early answer resets only its stream,
// and net/http reads the rest of the stream's body itself: nothing to do.

import (
	"context"
	"io"
	"net"
	"net/http"
	"time"
)

// The bounds of a lingering close: enough for a client to finish sending a
// body several times the body limit and read its answer, not enough for one
// that never stops sending to hold its place for long.
const (
	lingerTime  = 2 * time.Second
	lingerBytes = 8 << 20
)

// lingerHTTP takes the connection of an HTTP/1.1 answer that hung up (the
// request's body not read to its end), flushes the answer and closes the
// connection lingering. A writer that cannot let go of its connection (a
// test's recorder) is left to net/http.
func (s *Server) lingerHTTP(w http.ResponseWriter) {
	rc := http.NewResponseController(w)
	if rc.Flush() != nil {
		return
	}
	conn, rw, err := rc.Hijack()
	if err != nil {
		return
	}
	s.lingerClose(conn, rw.Reader)
}

// lingerClose closes conn, whose answers are written, lingering: its write
// side shut, what the client still sends (r, the connection's reader, with
// what it buffered) read and discarded until the client closes, or within
// s.linger and lingerBytes. A server that closes closes at once.
func (s *Server) lingerClose(conn net.Conn, r io.Reader) {
	defer conn.Close()
	if s.base.Err() != nil {
		return
	}
	if cw, ok := conn.(interface{ CloseWrite() error }); ok && cw.CloseWrite() != nil {
		return // the client is gone
	}
	_ = conn.SetReadDeadline(time.Now().Add(s.linger))
	defer context.AfterFunc(s.base, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })()
	_, _ = io.CopyN(io.Discard, r, lingerBytes)
}
