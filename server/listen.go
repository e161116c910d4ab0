package server

import (
	"errors"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"
)

// MaxStreams is how many requests one HTTP/2 connection may have in flight
// at once (http.HTTP2Config.MaxConcurrentStreams; net/http's own default).
// An HTTP/2 connection counts once against LimitListener's cap however many
// streams it carries: the cap keeps file descriptors for the store, and a
// stream takes none. A client past it waits for a stream to end, or opens
// another connection, which the cap then counts.
const MaxStreams = 250

// NewHTTPServer returns the http.Server the daemon serves h with. It speaks
// HTTP/1.1 and HTTP/2 without TLS, with prior knowledge (h2c, as api.Client
// speaks it), on the same port: a worker then multiplexes its calls, long
// polls and heartbeats alike, on one connection. A connection that sends no
// request headers within 10 s, or stays idle for 2 minutes, is closed and
// gives its place under LimitListener back.
func NewHTTPServer(h http.Handler) *http.Server {
	var p http.Protocols
	p.SetHTTP1(true)
	p.SetUnencryptedHTTP2(true)
	return &http.Server{
		Handler:           h,
		Protocols:         &p,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: MaxStreams},
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
	}
}

// The connection cap leaves the store the file descriptors it needs. Pebble
// keeps up to 1,000 sstables open by default (pebble.Options.MaxOpenFiles),
// plus its WAL, manifest and lock; the rest of the daemon (logs, the local
// worker's run directories and pipes, /proc reads) takes a few hundred more.
const (
	storeFiles   = 1000 // Pebble's table cache, at its default
	otherFiles   = 256  // the WAL, manifest, lock, logs, the local worker
	minConns     = 16   // below this the API is unusable; the limit is too low anyway
	maxConnsCeil = 4096 // more than a daemon with a few hundred workers needs
)

// MaxConnsFor is the connection cap for a process allowed nofile open files:
// half of what the store and the rest of the daemon leave, between 16 and
// 4,096. Half, so that connections can never take more than half of what is
// spare, whatever else grows.
func MaxConnsFor(nofile uint64) int {
	reserved := uint64(storeFiles + otherFiles)
	if nofile <= reserved+2*minConns {
		return minConns
	}
	return int(min((nofile-reserved)/2, maxConnsCeil))
}

// DefaultMaxConns is MaxConnsFor this process's RLIMIT_NOFILE (its soft
// limit, which the Go runtime raises to the hard limit at start). If the limit
// cannot be read it assumes 1,024, the usual default.
func DefaultMaxConns() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Cur == 0 {
		return MaxConnsFor(1024)
	}
	return MaxConnsFor(lim.Cur)
}

// LimitListener returns a listener that keeps at most n of ln's connections
// open at once (n <= 0: DefaultMaxConns()). Once n are open, Accept waits
// for one to close: further clients wait in the kernel's accept queue, and
// past its length (net.core.somaxconn) their connections are refused, while
// the open ones are served as before. Close unblocks a waiting Accept.
//
// The daemon's http.Server serves on it; with ReadHeaderTimeout and
// IdleTimeout set, a connection that sends nothing gives its place back, and
// a worker session has deadlines of its own (session.go). A connection
// closed lingering (linger.go) keeps its place until it is closed for good.
func LimitListener(ln net.Listener, n int) net.Listener {
	if n <= 0 {
		n = DefaultMaxConns()
	}
	return &limitListener{Listener: ln, sem: make(chan struct{}, n), done: make(chan struct{})}
}

type limitListener struct {
	net.Listener
	sem       chan struct{} // one token per open connection
	done      chan struct{} // closed by Close
	closeOnce sync.Once
}

func (l *limitListener) Accept() (net.Conn, error) {
	select {
	case l.sem <- struct{}{}:
	case <-l.done:
		return nil, net.ErrClosed
	}
	c, err := l.Listener.Accept()
	if err != nil {
		<-l.sem
		return nil, err
	}
	return &limitConn{Conn: c, release: func() { <-l.sem }}, nil
}

func (l *limitListener) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// limitConn gives its place back once, on its first Close.
type limitConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite half-closes the connection, as net/http does before closing a
// connection whose client may still be sending: the wrapper must not hide
// it, or the client's last answer could be lost to a reset.
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}
