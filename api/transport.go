package api

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// ClientOption changes how NewClient's client calls the daemon.
type ClientOption func(*clientOptions)

type clientOptions struct {
	h2c   bool
	plain bool // PlainCalls: no worker sessions
}

// H2C makes a client speak HTTP/2 without TLS (prior knowledge) to an
// http:// or unix:// daemon: all its calls are streams of one connection,
// which the daemon's connection cap counts once. It is not the default
// because it costs more than HTTP/1.1 kept alive: net/http's HTTP/2 hands
// each call between more goroutines and allocates more, for no more jobs a
// second (docs/performance.md has the figures).
func H2C() ClientOption { return func(o *clientOptions) { o.h2c = true } }

// answerBuffers holds the buffers a Client reads answers into: an answer is
// read whole, decoded, and dropped.
var answerBuffers = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

// putAnswerBuffer returns a buffer to the pool unless a large answer (a page
// of events) grew it.
func putAnswerBuffer(b *[]byte) {
	if cap(*b) <= 64<<10 {
		answerBuffers.Put(b)
	}
}

// readAnswer is io.ReadAll(io.LimitReader(r, limit)) into buf.
func readAnswer(r io.Reader, buf []byte, limit int) ([]byte, error) {
	for len(buf) < limit {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):min(cap(buf), limit)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
	}
	return buf, nil
}

// newTransport returns the transport a Client sends its calls with: HTTP/1.1,
// a connection per call in flight, kept alive between calls. With h2c, for
// the daemon's http:// and unix:// addresses, it speaks HTTP/2 without TLS,
// with prior knowledge: every call of a client, long polls and heartbeats
// alike, is a stream of one connection, not a connection each. A server that
// answers the HTTP/2 preface in HTTP/1.1 (a daemon from before h2c, a proxy
// that speaks only HTTP/1.1) has read no request: the call is sent again over
// HTTP/1.1, and so is every later one. https:// addresses negotiate HTTP/2 or
// HTTP/1.1 with TLS, as net/http does.
//
// dial, if set, replaces the dialer (a unix socket's).
func newTransport(tls, h2c bool, dial func(ctx context.Context, network, addr string) (net.Conn, error)) http.RoundTripper {
	http1 := &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second, DialContext: dial, ForceAttemptHTTP2: tls}
	if tls || !h2c {
		return http1
	}
	if dial == nil {
		var d net.Dialer
		dial = d.DialContext
	}
	t := &h2cTransport{http1: http1}
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	t.h2c = &http.Transport{
		Protocols:       &p,
		IdleConnTimeout: 90 * time.Second,
		HTTP2: &http.HTTP2Config{
			// A connection that stops answering (a cut network) is closed
			// after a ping goes unanswered, so that the calls after it dial
			// again rather than wait on it: they all share it.
			SendPingTimeout: 15 * time.Second,
			PingTimeout:     5 * time.Second,
		},
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &sniffConn{Conn: c, http1: &t.useHTTP1}, nil
		},
	}
	return t
}

// h2cTransport sends over h2c until a server answers in HTTP/1.1.
type h2cTransport struct {
	h2c, http1 *http.Transport
	useHTTP1   atomic.Bool // a server answered the preface in HTTP/1.1
}

func (t *h2cTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if t.useHTTP1.Load() {
		return t.http1.RoundTrip(r)
	}
	resp, err := t.h2c.RoundTrip(r)
	if err == nil || !t.useHTTP1.Load() {
		return resp, err
	}
	// The server read "PRI * HTTP/2.0" as an HTTP/1.1 request and refused
	// it: it never saw this call, which can be sent again as it is.
	t.h2c.CloseIdleConnections()
	r2 := r.Clone(r.Context())
	if r.Body != nil && r.Body != http.NoBody {
		if r.GetBody == nil {
			return nil, err
		}
		if r2.Body, err = r.GetBody(); err != nil {
			return nil, err
		}
	}
	return t.http1.RoundTrip(r2)
}

// CloseIdleConnections closes both transports' idle connections.
func (t *h2cTransport) CloseIdleConnections() {
	t.h2c.CloseIdleConnections()
	t.http1.CloseIdleConnections()
}

// sniffConn looks at the first byte a server sends on an h2c connection. An
// HTTP/2 server's first frame is its SETTINGS, whose first byte (the high
// byte of a 24-bit length under 16 KiB) is 0; an HTTP/1.1 server's answer
// starts "HTTP/1.1".
type sniffConn struct {
	net.Conn
	http1   *atomic.Bool
	sniffed atomic.Bool // the first byte was read (by the reader, or by Write)
}

func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	switch {
	case n > 0:
		if c.sniffed.CompareAndSwap(false, true) && p[0] == 'H' {
			c.http1.Store(true)
		}
	case !c.sniffed.Load() && (errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)):
		// Closed by the server without a word: not an HTTP/2 server (see
		// Write), its HTTP/1.1 answer lost to the reset.
		c.http1.Store(true)
	}
	return n, err
}

// Write writes p. A write that fails before anything was read is the
// preface or the first request meeting a server that closed without a word
// of HTTP/2 — whose first word is its SETTINGS, sent before it reads any
// request: an HTTP/1.1 server that answered the preface at once and closed.
// Its answer may still be read (Write reads it, for at most a second, since
// the connection's reader may not have started), or may have been lost to
// the reset; either way the call was not served, and it is sent again over
// HTTP/1.1, which a daemon that speaks h2c serves too.
func (c *sniffConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if err != nil && !c.sniffed.Load() {
		_ = c.Conn.SetReadDeadline(time.Now().Add(time.Second))
		var b [1]byte
		_, _ = c.Read(b[:])
		if !c.sniffed.Load() {
			c.http1.Store(true)
		}
	}
	return n, err
}
