package server_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/server"
)

// h2cFixture is a fixture served as the daemon serves (server.NewHTTPServer:
// HTTP/1.1 and h2c on one port), whose client (f.ts.Client(), and so f.do)
// speaks h2c with prior knowledge.
type h2cFixture struct {
	*fixture
	conns  atomic.Int32 // connections accepted
	closed atomic.Int32 // connections the server closed
	protos sync.Map     // ProtoMajor → seen
}

// newH2CFixture serves the fixture's API behind LimitListener(limit) (0: no
// cap).
func newH2CFixture(t *testing.T, opts server.Options, limit int) *h2cFixture {
	t.Helper()
	return newH2CFixtureHooked(t, opts, limit, nil)
}

func newH2CFixtureHooked(t *testing.T, opts server.Options, limit int, hook func(*server.Server)) *h2cFixture {
	t.Helper()
	h := &h2cFixture{fixture: newFixtureHooked(t, opts, hook)}
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.protos.Store(r.ProtoMajor, true)
		h.srv.ServeHTTP(w, r)
	})
	ts := httptest.NewUnstartedServer(handler)
	ts.Config = server.NewHTTPServer(handler)
	ts.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateClosed || st == http.StateHijacked {
			h.closed.Add(1)
		}
	}
	ts.Listener = &countListener{Listener: ts.Listener, n: &h.conns}
	if limit > 0 {
		ts.Listener = server.LimitListener(ts.Listener, limit)
	}
	ts.Start()
	old := h.ts
	t.Cleanup(func() {
		h.srv.Close()
		ts.Close()
		old.Close()
	})
	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	ts.Client().Transport = &http.Transport{Protocols: &p}
	h.ts = ts
	return h
}

func (h *h2cFixture) saw(protoMajor int) bool {
	_, ok := h.protos.Load(protoMajor)
	return ok
}

type countListener struct {
	net.Listener
	n *atomic.Int32
}

func (l *countListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// TestHTTP1AndH2COnOnePort: the daemon's server answers an HTTP/1.1 client
// and an h2c client with prior knowledge on the same port; api.Client speaks
// HTTP/1.1 to it, or h2c when told (api.H2C).
func TestHTTP1AndH2COnOnePort(t *testing.T) {
	f := newH2CFixture(t, server.Options{}, 0)
	if r := f.do("GET", "/healthz", "", nil); r.status != http.StatusOK {
		t.Fatalf("h2c: %s", r)
	}
	if !f.saw(2) || f.saw(1) {
		t.Fatalf("after an h2c call: saw HTTP/2 %v, HTTP/1 %v", f.saw(2), f.saw(1))
	}
	resp, err := http.Get(f.ts.URL + "/healthz") // net/http's default client: HTTP/1.1
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.ProtoMajor != 1 || !f.saw(1) {
		t.Fatalf("HTTP/1.1: %d %s, the server saw HTTP/1 %v", resp.StatusCode, resp.Proto, f.saw(1))
	}

	f.protos.Clear()
	c, err := api.NewClient(f.ts.URL, "", api.H2C(), api.PlainCalls()) // h2c carries the worker calls too
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !f.saw(2) || f.saw(1) {
		t.Fatalf("api.Client with H2C: saw HTTP/2 %v, HTTP/1 %v; want h2c only", f.saw(2), f.saw(1))
	}

	f.protos.Clear()
	if c, err = api.NewClient(f.ts.URL, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Health(context.Background()); err != nil {
		t.Fatal(err)
	}
	if f.saw(2) || !f.saw(1) {
		t.Fatalf("api.Client: saw HTTP/2 %v, HTTP/1 %v; want HTTP/1.1 only", f.saw(2), f.saw(1))
	}
}

// TestClientFallsBackToHTTP1: against a server that speaks only HTTP/1.1 (a
// daemon from before h2c), an api.Client told to speak h2c sends its first
// call again over
// HTTP/1.1, body and all, and so are the next ones.
func TestClientFallsBackToHTTP1(t *testing.T) {
	f := newFixture(t, server.Options{})                               // httptest.NewServer: HTTP/1.1 only
	c, err := api.NewClient(f.ts.URL, "", api.H2C(), api.PlainCalls()) // h2c carries the worker calls too
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, created, err := c.Submit(ctx, api.Submit{ID: "j1", Kind: "run"}); err != nil || !created {
		t.Fatalf("submit over the fallback: created %v, %v", created, err)
	}
	if _, err := c.Job(ctx, "j1"); err != nil {
		t.Fatal(err)
	}
}

// refuseFirst is a listener whose first connection is answered at once, in
// HTTP/1.1, and closed without a byte read, as an HTTP/1.1 server answers
// the HTTP/2 preface; it hands on every later one.
type refuseFirst struct {
	net.Listener
	once sync.Once
}

func (l *refuseFirst) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		first := false
		l.once.Do(func() { first = true })
		if !first {
			return c, nil
		}
		_, _ = io.WriteString(c, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
		c.Close()
	}
}

// TestClientFallsBackWhenTheServerClosesFirst: an HTTP/1.1 server that
// answers the preface and closes before reading it, so that the client's
// writes may fail before its reader has seen the answer (CI met it once):
// the call is sent again over HTTP/1.1 all the same. Twenty clients, for
// the interleavings.
func TestClientFallsBackWhenTheServerClosesFirst(t *testing.T) {
	f := newFixture(t, server.Options{})
	ctx := context.Background()
	for i := range 20 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		hs := &http.Server{Handler: f.srv}
		go func() { _ = hs.Serve(&refuseFirst{Listener: ln}) }()
		c, err := api.NewClient("http://"+ln.Addr().String(), "", api.H2C(), api.PlainCalls()) // h2c carries the worker calls too
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := c.Submit(ctx, api.Submit{ID: fmt.Sprintf("j%d", i), Kind: "run"}); err != nil {
			t.Fatalf("client %d: submit to a server that answered the preface and closed: %v", i, err)
		}
		hs.Close()
	}
}

// TestH2CWorkerOnOneConnection: under a cap of one connection, one client
// holds several long polls and makes other calls at the same time, all
// streams of one h2c connection; each long poll is woken by a submit, and
// one whose caller goes ends its wait.
func TestH2CWorkerOnOneConnection(t *testing.T) {
	waiting := make(chan context.Context, 8)
	f := newH2CFixtureHooked(t, server.Options{}, 1, func(s *server.Server) {
		server.SetWaitHook(s, func(ctx context.Context) context.Context { waiting <- ctx; return ctx })
	})
	c, err := api.NewClient(f.ts.URL, "", api.H2C(), api.PlainCalls()) // h2c carries the worker calls too
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// A first call makes the connection: calls made at once on a client
	// that has none each dial, and the transport keeps one.
	if _, err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	const polls = 4
	granted := make(chan error, polls)
	for i := range polls {
		go func() {
			gs, err := c.Acquire(ctx, fmt.Sprintf("w%d", i), 1, 30*time.Second)
			if err == nil && len(gs) != 1 {
				err = fmt.Errorf("worker w%d: %d grants", i, len(gs))
			}
			granted <- err
		}()
	}
	for range polls {
		<-waiting
	}
	for i := range polls {
		if _, _, err := c.Submit(ctx, api.Submit{ID: fmt.Sprintf("j%d", i), Kind: "run"}); err != nil {
			t.Fatal(err)
		}
	}
	for range polls {
		if err := <-granted; err != nil {
			t.Fatal(err)
		}
	}

	// A caller that goes: its stream is reset, and the wait ends.
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { _, err := c.Acquire(cctx, "w9", 1, 30*time.Second); done <- err }()
	wait := <-waiting
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the cancelled acquire: %v", err)
	}
	select {
	case <-wait.Done():
	case <-time.After(within):
		t.Fatal("the acquire still waits for a caller that left")
	}
	if _, err := c.Health(ctx); err != nil {
		t.Fatal(err)
	}
	if n := f.conns.Load(); n != 1 {
		t.Fatalf("%d connections, want 1", n)
	}
}

// TestH2CSlowBodyIsCut: under h2c too, a body that does not arrive within
// BodyTimeout is cut with 408 body_timeout and writes nothing; the other
// calls of the connection go on.
func TestH2CSlowBodyIsCut(t *testing.T) {
	const timeout = 200 * time.Millisecond
	f := newH2CFixture(t, server.Options{BodyTimeout: timeout}, 0)
	seq := f.seq()
	pr, pw := io.Pipe()
	defer pw.Close()
	go func() { _, _ = io.WriteString(pw, `{"id":"slow",`) }() // and then nothing
	req, err := http.NewRequest("POST", f.ts.URL+"/v1/jobs", pr)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := f.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	wantError(t, reply{status: resp.StatusCode, header: resp.Header, body: b}, http.StatusRequestTimeout, api.CodeBodyTimeout, "did not arrive in time")
	if took := time.Since(start); took < timeout {
		t.Errorf("cut after %v, before the deadline of %v", took, timeout)
	}
	if resp.ProtoMajor != 2 {
		t.Fatalf("answered over %s", resp.Proto)
	}
	if got := f.seq(); got != seq {
		t.Fatalf("seq %d after the cut body, was %d", got, seq)
	}
	if r := f.do("GET", "/healthz", "", nil); r.status != http.StatusOK {
		t.Fatalf("after the cut body: %s", r)
	}
	// The server closing the connection is the fault; the client may still
	// dial a second one of its own accord (Go's HTTP/2 transport counts a
	// stream it reset against the connection until the peer acknowledges).
	if n := f.closed.Load(); n != 0 {
		t.Fatalf("the server closed %d connection(s): the cut body closed the h2c connection", n)
	}
}

// TestH2CUnauthorized: under h2c a caller without a valid token gets its 401
// as JSON, with WWW-Authenticate, before its body is read; nothing is written.
func TestH2CUnauthorized(t *testing.T) {
	f := newH2CFixture(t, server.Options{Auth: testAuth(), BodyTimeout: time.Hour}, 0)
	seq := f.seq()
	r := f.do("POST", "/v1/jobs", "wrong-token-0123456789", api.Submit{ID: "j1", Kind: "run"})
	wantError(t, r, http.StatusUnauthorized, api.CodeUnauthorized)
	if r.header.Get("WWW-Authenticate") == "" {
		t.Error("no WWW-Authenticate")
	}
	if got := f.seq(); got != seq {
		t.Fatalf("seq %d after the refusal, was %d", got, seq)
	}
	if r := f.do("POST", "/v1/jobs", adminTok, api.Submit{ID: "j1", Kind: "run"}); r.status != http.StatusCreated {
		t.Fatalf("with the token: %s", r)
	}
}

// TestH2CEventStream: the event stream flushes each event under h2c.
func TestH2CEventStream(t *testing.T) {
	f := newH2CFixture(t, server.Options{}, 0)
	s := f.openStream("", nil)
	if s.resp.ProtoMajor != 2 {
		t.Fatalf("stream over %s", s.resp.Proto)
	}
	f.submit("j1", event.KindRun)
	for e := s.next(); !strings.Contains(e.data, `"j1"`); e = s.next() {
		if e.event != "daemon.started" {
			t.Fatalf("event before the submit's: %+v", e)
		}
	}
}
