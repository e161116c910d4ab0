package natstest

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// ErrPortTaken is the error of a server that cannot listen on a port it
// must have (a cluster's started again): something else holds it.
var ErrPortTaken = errors.New("natstest: a port of the server is taken")

// errFatal is what a server's fatal error at its start unwraps to when its
// message names no error (else it unwraps to that error).
var errFatal = errors.New("natstest: fatal error starting the server")

const (
	// readyWithin bounds a server's start, its listeners bound.
	readyWithin = 10 * time.Second
	// restartTries and restartBackoff: a cluster's first start tries this
	// many sets of route ports; started again, it tries this many times,
	// this far apart, to bind the ports it had, in case what holds one now
	// lets it go (a connection's port, a server shutting down).
	restartTries   = 5
	restartBackoff = 200 * time.Millisecond
)

// start starts a server with opts, and returns it once it listens (for
// clients, and for routes if it has a cluster port), or the fatal error
// that stopped it, wrapped; it is then shut down.
func start(opts *server.Options) (*server.Server, error) {
	s, err := server.NewServer(opts.Clone())
	if err != nil {
		return nil, err
	}
	// The server reports a listener it cannot bind (and JetStream it cannot
	// start) only to its logger, with the error among the arguments, and
	// goes on: without one, a test would wait the whole readiness bound to
	// learn nothing.
	fatal := &fatalLogger{err: make(chan error, 1)}
	s.SetLogger(fatal, false, false)
	s.Start()
	deadline := time.Now().Add(readyWithin)
	tick := time.NewTicker(5 * time.Millisecond) // the poll's interval; the listeners signal nothing
	defer tick.Stop()
	for !listening(s, opts) {
		select {
		case err := <-fatal.err:
			s.Shutdown()
			return nil, fmt.Errorf("nats server %s (client port %d, route port %d): %w", opts.ServerName, opts.Port, opts.Cluster.Port, err)
		case <-tick.C:
		}
		if time.Now().After(deadline) {
			s.Shutdown()
			return nil, fmt.Errorf("nats server %s (client port %d, route port %d) not listening within %v", opts.ServerName, opts.Port, opts.Cluster.Port, readyWithin)
		}
	}
	return s, nil
}

// listening tells whether s has bound its listeners.
func listening(s *server.Server, opts *server.Options) bool {
	return s.Addr() != nil && (opts.Cluster.Port == 0 || s.ClusterAddr() != nil)
}

// start starts the cluster's servers, each routing to every other, and
// returns them listening, or an error after shutting down those started.
//
// Only the client ports can be the system's choice at the first start: a
// server of a JetStream cluster needs its routes configured when it starts
// (one with none refuses JetStream), and sizes its meta group by them, so
// the route ports are picked before, and a start that finds one taken is
// done again on new ones, up to tries times. A start again comes back on
// the ports of the first, trying a taken one again up to tries times; then
// the error is ErrPortTaken.
func (c Cluster) start(tries int) ([]*server.Server, error) {
	if c[0].Cluster.Port != server.RANDOM_PORT {
		return c.startEach(tries)
	}
	return c.startFirst(tries, reservePorts)
}

// startFirst starts the cluster for the first time on route ports pick
// chooses, choosing again when one is taken.
func (c Cluster) startFirst(tries int, pick func(n int) ([]int, error)) ([]*server.Server, error) {
	for try := 1; ; try++ {
		ports, err := pick(len(c))
		if err != nil {
			return nil, err
		}
		var routes []*url.URL
		for _, p := range ports {
			routes = append(routes, &url.URL{Scheme: "nats-route", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(p))})
		}
		for i, o := range c {
			o.Cluster.Port, o.Routes = ports[i], routes
		}
		servers, err := c.startEach(1)
		if err == nil {
			for i, s := range servers {
				c[i].Port = s.Addr().(*net.TCPAddr).Port
			}
			return servers, nil
		}
		// A server that started wrote its first JetStream state: the next
		// try starts from empty stores (on the stale state the meta group
		// formed in about 5 s instead of 0.6).
		for _, o := range c {
			o.Cluster.Port, o.Routes = server.RANDOM_PORT, nil
			if err := empty(o.StoreDir); err != nil {
				return nil, err
			}
		}
		if !errors.Is(err, ErrPortTaken) {
			return nil, err
		}
		if try >= tries {
			return nil, fmt.Errorf("the first start, on %d sets of route ports: %w", tries, err)
		}
	}
}

// startEach starts the servers in order on their options, each trying a
// taken port up to tries times; on an error it shuts down those it started.
func (c Cluster) startEach(tries int) ([]*server.Server, error) {
	servers := make([]*server.Server, 0, len(c))
	for _, o := range c {
		s, err := startAgain(o, tries)
		if err != nil {
			for _, s := range servers {
				s.Shutdown()
			}
			return nil, err
		}
		servers = append(servers, s)
	}
	return servers, nil
}

// reservePorts returns n distinct ports of the loopback interface free now:
// each is held until all are chosen, so the system does not give one twice.
func reservePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// empty removes what dir holds, leaving dir.
func empty(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// startAgain starts a server with opts, trying again when a port it names
// is taken, up to tries times.
func startAgain(opts *server.Options, tries int) (*server.Server, error) {
	for try := 1; ; try++ {
		s, err := start(opts)
		if !errors.Is(err, syscall.EADDRINUSE) {
			return s, err
		}
		if try >= tries {
			return nil, fmt.Errorf("%w (%d tries): %w", ErrPortTaken, tries, err)
		}
		time.Sleep(restartBackoff) // the backoff between tries, not a wait for a condition
	}
}

// fatalLogger keeps the first fatal error a server reports, and drops the
// rest of its log.
type fatalLogger struct {
	once sync.Once
	err  chan error
}

func (l *fatalLogger) Fatalf(format string, v ...any) {
	err := fatalError{msg: fmt.Sprintf(format, v...), err: errFatal}
	for _, a := range v {
		if e, ok := a.(error); ok {
			err.err = e
			break
		}
	}
	l.once.Do(func() { l.err <- err })
}

// fatalError is a server's fatal message, which already says the error
// among its arguments; it unwraps to that error.
type fatalError struct {
	msg string
	err error
}

func (e fatalError) Error() string { return e.msg }
func (e fatalError) Unwrap() error { return e.err }

func (*fatalLogger) Noticef(string, ...any) {}
func (*fatalLogger) Warnf(string, ...any)   {}
func (*fatalLogger) Errorf(string, ...any)  {}
func (*fatalLogger) Debugf(string, ...any)  {}
func (*fatalLogger) Tracef(string, ...any)  {}
