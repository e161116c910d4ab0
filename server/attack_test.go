package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/testkit/testutil"
	"github.com/leaselog/leaselog/server"
)

// Tests of a daemon under attack, over real TCP on loopback: refusals that do
// not wait for a body, a body deadline, the connection cap, and streams and
// long-polls that cost nothing while idle and end when their client goes.

// within bounds every wait of these tests: a test that reaches it fails. It
// is far longer than anything the server is expected to take.
const within = 10 * time.Second

// dial opens a raw connection to addr.
func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, within)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// readAnswer reads one HTTP answer from br, body included.
func readAnswer(t *testing.T, conn net.Conn, br *bufio.Reader, method string) reply {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(within)); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(br, &http.Request{Method: method})
	if err != nil {
		t.Fatalf("read answer: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("read answer's body: %v", err)
	}
	if resp.Close { // ReadResponse moves Connection: close out of the header
		resp.Header.Set("Connection", "close")
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

// wantClosed checks that the server closed conn: a read ends (EOF, or a
// reset) well within the bound, with nothing more to read.
func wantClosed(t *testing.T, conn net.Conn, br *bufio.Reader) {
	t.Helper()
	if err := conn.SetReadDeadline(time.Now().Add(within)); err != nil {
		t.Fatal(err)
	}
	n, err := br.Read(make([]byte, 1))
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		t.Fatalf("the connection is still open after %v", within)
	case n > 0 || err == nil:
		t.Fatalf("more bytes after the answer")
	}
}

// TestRefusedWithoutWaitingForTheBody: a request without a valid token gets
// its 401 as soon as its headers are read, with Connection: close, and the
// connection is closed, although its body never arrives (and the body
// deadline is an hour away). So does any answer given before the body was
// read: a request no route takes, a read that has no use for a body. Nothing
// is written.
func TestRefusedWithoutWaitingForTheBody(t *testing.T) {
	f := newFixture(t, server.Options{Auth: testAuth(), BodyTimeout: time.Hour})
	seq := f.seq()
	admin := "Authorization: Bearer " + adminTok + "\r\n"
	for _, tc := range []struct {
		name, request, auth, framing string
		status                       int
	}{
		{"no token", "POST /v1/jobs", "", "Content-Length: 100", http.StatusUnauthorized},
		{"unknown token", "POST /v1/jobs", "Authorization: Bearer not-a-token-of-anyone\r\n", "Content-Length: 100", http.StatusUnauthorized},
		{"blank token", "POST /v1/jobs", "Authorization: Bearer    \r\n", "Content-Length: 100", http.StatusUnauthorized},
		{"chunked", "POST /v1/jobs", "", "Transfer-Encoding: chunked", http.StatusUnauthorized},
		{"large", "POST /v1/jobs", "", "Content-Length: 10000000", http.StatusUnauthorized}, // more than net/http would drain
		{"expecting 100-continue", "POST /v1/jobs", "", "Content-Length: 100\r\nExpect: 100-continue", http.StatusUnauthorized},
		{"no token, no body", "GET /v1/jobs", "", "Accept: */*", http.StatusUnauthorized},
		{"no route", "POST /v1/nope", admin, "Content-Length: 100", http.StatusNotFound},
		{"a read", "GET /v1/jobs", admin, "Content-Length: 100", http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := dial(t, f.ts.Listener.Addr().String())
			head := tc.request + " HTTP/1.1\r\nHost: leaselog\r\nContent-Type: application/json\r\n" + tc.auth + tc.framing + "\r\n\r\n"
			if _, err := io.WriteString(conn, head); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			r := readAnswer(t, conn, br, strings.Fields(tc.request)[0])
			if r.status != tc.status {
				t.Fatalf("%s, want %d", r, tc.status)
			}
			if tc.status == http.StatusUnauthorized {
				wantError(t, r, http.StatusUnauthorized, api.CodeUnauthorized)
			}
			if got := r.header.Get("Connection"); got != "close" {
				t.Errorf("Connection %q, want close", got)
			}
			wantClosed(t, conn, br)
		})
	}
	if got := f.seq(); got != seq {
		t.Fatalf("seq %d after the refusals, was %d", got, seq)
	}
}

// TestSlowBodyIsCut: a body that does not arrive within BodyTimeout is cut:
// 408 body_timeout, the connection closed, nothing written. A body in time
// on the next connection is served.
func TestSlowBodyIsCut(t *testing.T) {
	const timeout = 200 * time.Millisecond
	f := newFixture(t, server.Options{BodyTimeout: timeout})
	seq := f.seq()
	for _, tc := range []struct{ name, framing, sent string }{
		{"length", "Content-Length: 40", `{"id":"slow",`},
		{"chunked", "Transfer-Encoding: chunked", "d\r\n" + `{"id":"slow",` + "\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn := dial(t, f.ts.Listener.Addr().String())
			start := time.Now()
			head := "POST /v1/jobs HTTP/1.1\r\nHost: leaselog\r\n" + tc.framing + "\r\n\r\n" + tc.sent
			if _, err := io.WriteString(conn, head); err != nil {
				t.Fatal(err)
			}
			br := bufio.NewReader(conn)
			r := readAnswer(t, conn, br, "POST")
			wantError(t, r, http.StatusRequestTimeout, api.CodeBodyTimeout, "did not arrive in time")
			if took := time.Since(start); took < timeout {
				t.Errorf("cut after %v, before the deadline of %v", took, timeout)
			}
			if got := r.header.Get("Connection"); got != "close" {
				t.Errorf("Connection %q, want close", got)
			}
			wantClosed(t, conn, br)
		})
	}
	if got := f.seq(); got != seq {
		t.Fatalf("seq %d after the cut bodies, was %d", got, seq)
	}
	decode[api.Job](t, f.do("POST", "/v1/jobs", "", api.Submit{ID: "fast", Kind: "run"}), http.StatusCreated)
}

// requestsAnswered is how many requests of route the server has answered,
// whatever their status: a handler that returned.
func requestsAnswered(t *testing.T, reg *prometheus.Registry, route string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, mf := range mfs {
		if mf.GetName() != "leaselog_http_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "route" && lp.GetValue() == route {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// eventually polls cond until it holds, failing the test after the bound.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, within, what, cond)
}

// TestLongPollOutlivesTheBodyDeadline: the body deadline is lifted once the
// body is read, so an acquire can wait far longer than it; the grant says how
// long the daemon held the request. When the client of a waiting acquire
// goes, its handler returns.
func TestLongPollOutlivesTheBodyDeadline(t *testing.T) {
	const timeout = 50 * time.Millisecond
	waiting := make(chan context.Context, 2)
	f := newFixtureHooked(t, server.Options{BodyTimeout: timeout}, func(s *server.Server) {
		server.SetWaitHook(s, func(ctx context.Context) context.Context { waiting <- ctx; return ctx })
	})
	const route = "POST /v1/workers/{worker}/acquire"

	got := make(chan reply, 1)
	go func() { got <- f.do("POST", "/v1/workers/w1/acquire", "", api.Acquire{WaitSeconds: 30}) }()
	<-waiting
	// Past the body deadline several times over: a deadline left on the
	// connection would have cancelled the request by now.
	<-time.After(4 * timeout)
	f.clock.Advance(3 * time.Second) // held for 3 s, by the daemon's clock
	f.submit("j1", event.KindRun)
	g := decode[api.Grants](t, <-got, http.StatusOK)
	if len(g.Leases) != 1 || g.Leases[0].HeldSeconds != 3 {
		t.Fatalf("grants %+v, want one held 3 s", g.Leases)
	}

	// A client that goes: the wait ends and the handler returns.
	before := requestsAnswered(t, f.reg, route)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		resp, err := f.ts.Client().Do(f.newRequest(ctx, request{method: "POST", path: "/v1/workers/w1/acquire", body: api.Acquire{WaitSeconds: 30}}))
		if err == nil {
			resp.Body.Close()
		}
		done <- err
	}()
	wait := <-waiting
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the client's call: %v, want it cancelled", err)
	}
	select {
	case <-wait.Done():
	case <-time.After(within):
		t.Fatal("the acquire still waits for a client that left")
	}
	eventually(t, "the acquire's handler returns", func() bool { return requestsAnswered(t, f.reg, route) > before })
}

// TestConnectionCap: with a cap of 2, a third connection waits, unserved,
// while the two are served as before; when one closes, the third is served.
func TestConnectionCap(t *testing.T) {
	f := newFixture(t, server.Options{})
	ts := httptest.NewUnstartedServer(f.srv)
	ts.Listener = server.LimitListener(ts.Listener, 2)
	ts.Start()
	t.Cleanup(ts.Close)
	addr := ts.Listener.Addr().String()
	health := "GET /healthz HTTP/1.1\r\nHost: leaselog\r\n\r\n"

	type client struct {
		conn net.Conn
		br   *bufio.Reader
	}
	ask := func(c client) {
		t.Helper()
		if _, err := io.WriteString(c.conn, health); err != nil {
			t.Fatal(err)
		}
	}
	var open []client
	for range 2 {
		c := client{conn: dial(t, addr)}
		c.br = bufio.NewReader(c.conn)
		ask(c)
		if r := readAnswer(t, c.conn, c.br, "GET"); r.status != http.StatusOK {
			t.Fatalf("served connection: %s", r)
		}
		open = append(open, c)
	}

	third := client{conn: dial(t, addr)} // the kernel queues it
	third.br = bufio.NewReader(third.conn)
	ask(third)
	// Not served while two are open. Absence can only be observed over a
	// span: a quarter of a second is ample for loopback.
	if err := third.conn.SetReadDeadline(time.Now().Add(250 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := third.br.Peek(1); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("the connection over the cap was served: %v", err)
	}
	// The open ones are served as before.
	ask(open[0])
	if r := readAnswer(t, open[0].conn, open[0].br, "GET"); r.status != http.StatusOK {
		t.Fatalf("open connection: %s", r)
	}
	// One goes: the waiting one is taken and served.
	open[1].conn.Close()
	if r := readAnswer(t, third.conn, third.br, "GET"); r.status != http.StatusOK {
		t.Fatalf("connection once a place was free: %s", r)
	}
}

// TestLimitListenerClose: Close ends an Accept that waits for a place, and
// a connection's place comes back once, however often it is closed.
func TestLimitListenerClose(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln := server.LimitListener(inner, 1)
	dial(t, ln.Addr().String())
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	c.Close() // a second Close must not free a second place
	dial(t, ln.Addr().String())
	c2, err := ln.Accept() // the one place, given back
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept() // no place: waits
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	dial(t, ln.Addr().String())
	ln.Close()
	select {
	case err := <-accepted:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("Accept after Close: %v, want net.ErrClosed", err)
		}
	case <-time.After(within):
		t.Fatal("Close left Accept waiting")
	}
}

func TestMaxConnsFor(t *testing.T) {
	for _, tc := range []struct {
		nofile uint64
		want   int
	}{
		{0, 16},
		{1024, 16},  // less than the store needs: the floor
		{1280, 16},  // 24 spare: still the floor
		{2256, 500}, // half of the 1,000 spare
		{20000, 4096},
		{1 << 20, 4096},
	} {
		if got := server.MaxConnsFor(tc.nofile); got != tc.want {
			t.Errorf("MaxConnsFor(%d) = %d, want %d", tc.nofile, got, tc.want)
		}
	}
	if n := server.DefaultMaxConns(); n < 16 || n > 4096 {
		t.Errorf("DefaultMaxConns() = %d", n)
	}
}

// streamWatch counts the waits of the event streams of a server and tells
// when one ends.
type streamWatch struct {
	waits atomic.Int64
	wait  chan struct{} // one per wait, never blocking
	end   chan struct{}
}

func newStreamWatch() *streamWatch {
	return &streamWatch{wait: make(chan struct{}, 1<<16), end: make(chan struct{}, 16)}
}

func (w *streamWatch) hook(stage string) {
	switch stage {
	case "wait":
		w.waits.Add(1)
		select {
		case w.wait <- struct{}{}:
		default:
		}
	case "end":
		w.end <- struct{}{}
	}
}

// TestIdleStreamSleeps: an idle stream — caught up, or with a cursor after
// which nothing can come — waits once and does not loop (2^64−1 + 1 must not
// wrap to 0, which is always durable); its handler returns when its client
// hangs up.
func TestIdleStreamSleeps(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		header      map[string]string
	}{
		{"caught up", "?after=0", nil},
		{"after 2^64-1", "?after=18446744073709551615", nil},
		{"after 2^64-1, filtered", "?type=lease.stale_report&after=18446744073709551615", nil},
		{"Last-Event-ID 2^64-1", "", map[string]string{"Last-Event-ID": "18446744073709551615"}},
		{"after 2^64-2", "?after=18446744073709551614", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newStreamWatch()
			f := newFixtureHooked(t, server.Options{}, func(s *server.Server) { server.SetStreamHook(s, w.hook) })
			s := f.openStream(tc.query, tc.header)
			<-w.wait
			// A loop would wait again at once, thousands of times: a tenth of
			// a second shows it.
			<-time.After(100 * time.Millisecond)
			if n := w.waits.Load(); n != 1 {
				t.Fatalf("an idle stream waited %d times", n)
			}
			s.close()
			select {
			case <-w.end:
			case <-time.After(within):
				t.Fatal("the stream's handler still runs after its client left")
			}
		})
	}
}

// TestStreamKeepalive: a silent stream writes a comment every keepalive
// interval, which readers skip, and the next event still comes.
func TestStreamKeepalive(t *testing.T) {
	f := newFixture(t, server.Options{StreamKeepalive: 20 * time.Millisecond})
	s := f.openStream("?after=1", nil) // after daemon.started: nothing yet
	for range 2 {
		line, err := s.r.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line != ": keepalive\n" {
			t.Fatalf("line %q, want the keepalive comment", line)
		}
		if line, err = s.r.ReadString('\n'); err != nil || line != "\n" {
			t.Fatalf("line %q (%v), want the comment's end", line, err)
		}
	}
	f.submit("j1", event.KindRun)
	f.check(s.next(), 2)
}

// TestLongPollPinsNoBody: a long-poll acquire lets go of its body's buffer
// once the body is decoded, before it waits: long polls of bodies near the
// limit (valid JSON padded with spaces), over HTTP/1.1, h2c or a session,
// do not hold those bodies' bytes while they wait.
func TestLongPollPinsNoBody(t *testing.T) {
	const polls = 24
	acquire := `{"wait_seconds":60}`
	body := acquire + strings.Repeat(" ", server.DefaultMaxBody-len(acquire))
	for _, transport := range []string{"http", "h2c", "session"} {
		t.Run(transport, func(t *testing.T) {
			var waiting atomic.Int64
			hook := func(s *server.Server) {
				server.SetWaitHook(s, func(ctx context.Context) context.Context { waiting.Add(1); return ctx })
			}
			var f *fixture
			if transport == "h2c" {
				f = newH2CFixtureHooked(t, server.Options{}, 0, hook).fixture
			} else {
				f = newFixtureHooked(t, server.Options{}, hook)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			before := liveHeap()
			if transport == "session" {
				s := dialSession(t, f, "w0", "")
				for i := range polls {
					s.send(string(api.AppendRequest(nil, uint64(i+1), api.OpAcquire, fmt.Sprintf("w%d", i), "-", []byte(body))))
				}
			} else {
				for i := range polls {
					req := f.newRequest(ctx, request{method: "POST", path: fmt.Sprintf("/v1/workers/w%d/acquire", i), body: body})
					go func() {
						if resp, err := f.ts.Client().Do(req); err == nil {
							resp.Body.Close()
						}
					}()
				}
			}
			eventually(t, "every long poll waits", func() bool { return waiting.Load() == polls })
			grew := liveHeap() - before
			t.Logf("the live heap grew by %.1f MiB", float64(grew)/(1<<20))
			if grew > polls*server.DefaultMaxBody/2 {
				t.Fatalf("the live heap grew by %d MiB with %d long polls of 1 MiB bodies waiting: their bodies are held",
					grew>>20, polls)
			}
		})
	}
}

// liveHeap is the bytes of the heap that a collection leaves.
func liveHeap() int64 {
	runtime.GC()
	runtime.GC() // what sync.Pool's victim cache kept is dropped by the second
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
