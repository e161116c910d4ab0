package server_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/server"
)

// transports are the two ways a Go client makes the worker calls.
var transports = []struct {
	name string
	opts []api.ClientOption
}{
	{"http", []api.ClientOption{api.PlainCalls()}},
	{"session", nil}, // the default
}

// TestFencingOverBothTransports: the fencing rules hold over a worker
// session exactly as over HTTP — a stale token refused and kept, a lease of
// another worker refused, a report sent twice answered the same, a late claim
// that differs from it refused and kept.
func TestFencingOverBothTransports(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			f := newFixture(t, server.Options{Auth: testAuth()})
			ctx := context.Background()
			w1, err := api.NewClient(f.ts.URL, w1Tok, tr.opts...)
			f.must(err)
			w2, err := api.NewClient(f.ts.URL, w2Tok, tr.opts...)
			f.must(err)

			// A lease that expired: its report is stale, refused with the
			// record that keeps it, and the same again gets the same seq.
			f.submit("j1", event.KindRun)
			gs, err := w1.Acquire(ctx, "w1", 1, 0)
			if err != nil || len(gs) != 1 {
				t.Fatalf("acquire: %v %v", gs, err)
			}
			stale := gs[0].Lease
			f.expireAll()
			var first *api.Error
			for i := range 2 {
				_, err = w1.Report(ctx, stale, api.Report{Worker: "w1", Outcome: "succeeded"})
				var e *api.Error
				if !errors.As(err, &e) || e.Code != api.CodeStaleLease || e.StaleReportSeq == 0 {
					t.Fatalf("report %d on an expired lease: %v, want stale_lease with its seq", i, err)
				}
				if first != nil && e.StaleReportSeq != first.StaleReportSeq {
					t.Fatalf("the same stale report named seq %d, then %d", first.StaleReportSeq, e.StaleReportSeq)
				}
				first = e
			}
			if r, err := w1.Heartbeat(ctx, "w1", []uint64{stale}); err != nil || r.Leases[0].Directive == api.DirectiveContinue {
				t.Fatalf("heartbeat of an expired lease: %+v %v, want a directive to stop", r, err)
			}

			// A live lease of w1's: w2 may neither start nor report it, in
			// its own name (the service refuses) or in w1's (its token
			// does, over HTTP and in a frame alike).
			f.submit("j2", event.KindRun)
			gs, err = w1.Acquire(ctx, "w1", 1, 0)
			if err != nil || len(gs) != 1 {
				t.Fatalf("acquire: %v %v", gs, err)
			}
			l := gs[0].Lease
			for _, tc := range []struct {
				name   string
				call   func() error
				saying string
			}{
				{"w2 starts it as w1", func() error { _, err := w2.Start(ctx, "w1", l); return err }, `worker "w1"'s`},
				{"w2 reports it as w1", func() error {
					_, err := w2.Report(ctx, l, api.Report{Worker: "w1", Outcome: "failed"})
					return err
				}, `worker "w1"'s`},
				{"w2 starts it as w2", func() error { _, err := w2.Start(ctx, "w2", l); return err }, fmt.Sprintf(`lease %d is not worker "w2"'s`, l)},
				{"w2 reports it as w2", func() error {
					_, err := w2.Report(ctx, l, api.Report{Worker: "w2", Outcome: "failed"})
					return err
				}, fmt.Sprintf(`lease %d is not worker "w2"'s`, l)},
			} {
				if err := tc.call(); !api.IsCode(err, api.CodeForbidden) || !strings.Contains(err.Error(), tc.saying) {
					t.Errorf("%s: %v, want forbidden saying %s", tc.name, err, tc.saying)
				}
			}

			// Its report, twice: the same answer.
			if _, err := w1.Start(ctx, "w1", l); err != nil {
				t.Fatal(err)
			}
			a, err := w1.Report(ctx, l, api.Report{Worker: "w1", Outcome: "succeeded"})
			f.must(err)
			b, err := w1.Report(ctx, l, api.Report{Worker: "w1", Outcome: "succeeded"})
			f.must(err)
			if !a.Accepted || a != b {
				t.Fatalf("a report sent twice: %+v then %+v, want one accepted answer twice", a, b)
			}
			// One that says otherwise is a late claim: stale, naming the
			// record that keeps it, and the same again names the same.
			var claim *api.Error
			for i := range 2 {
				_, err := w1.Report(ctx, l, api.Report{Worker: "w1", Outcome: "failed", Ref: "refs/claim"})
				var e *api.Error
				if !errors.As(err, &e) || e.Code != api.CodeStaleLease || e.StaleReportSeq <= a.Seq ||
					(claim != nil && e.StaleReportSeq != claim.StaleReportSeq) {
					t.Fatalf("late claim %d on the reported lease: %v, want stale_lease with its record's seq", i, err)
				}
				claim = e
			}
		})
	}
}

// session is a raw worker session, for what the Go client never sends; its
// frames speak for worker.
type session struct {
	t      *testing.T
	conn   net.Conn
	br     *bufio.Reader
	worker string
}

// dialSession upgrades a connection to f's daemon with token, for frames
// that speak for worker.
func dialSession(t *testing.T, f *fixture, worker, token string) *session {
	t.Helper()
	return dialSessionAt(t, f.ts.Listener.Addr().String(), worker, token)
}

// dialSessionAt upgrades a connection to the daemon at addr.
func dialSessionAt(t *testing.T, addr, worker, token string) *session {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: leaselog\r\nConnection: Upgrade\r\nUpgrade: %s\r\n", api.SessionPath, api.SessionProtocol)
	if token != "" {
		fmt.Fprintf(conn, "Authorization: Bearer %s\r\n", token)
	}
	fmt.Fprintf(conn, "\r\n")
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols || resp.Header.Get("Upgrade") != api.SessionProtocol {
		t.Fatalf("upgrade: %d %v", resp.StatusCode, resp.Header)
	}
	return &session{t: t, conn: conn, br: br, worker: worker}
}

// send writes raw bytes.
func (s *session) send(raw string) {
	s.t.Helper()
	if _, err := io.WriteString(s.conn, raw); err != nil {
		s.t.Fatal(err)
	}
}

// call sends one frame and reads one answer, which must be the call's.
func (s *session) call(id uint64, op, lease, body string) reply {
	s.t.Helper()
	s.send(string(api.AppendRequest(nil, id, op, s.worker, lease, []byte(body))))
	gotID, r := s.answer()
	if gotID != id {
		s.t.Fatalf("answer of frame %d, want %d", gotID, id)
	}
	return r
}

// answer reads one answer frame.
func (s *session) answer() (uint64, reply) {
	s.t.Helper()
	line, err := s.br.ReadSlice('\n')
	if err != nil {
		s.t.Fatalf("read an answer: %v", err)
	}
	h, err := api.ParseAnswer(line)
	if err != nil {
		s.t.Fatal(err)
	}
	b := make([]byte, h.Len)
	if _, err := io.ReadFull(s.br, b); err != nil {
		s.t.Fatal(err)
	}
	// A frame has no headers: its body is always JSON.
	return h.ID, reply{status: h.Status, header: http.Header{"Content-Type": {"application/json"}}, body: b}
}

// closed waits for the daemon to close the connection: a read ends.
func (s *session) closed() {
	s.t.Helper()
	_ = s.conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	if b, err := s.br.ReadByte(); err == nil {
		s.t.Fatalf("the session goes on: read %q", b)
	} else if ne, ok := err.(net.Error); ok && ne.Timeout() {
		s.t.Fatal("the daemon did not close the session")
	}
}

// TestSessionAnswersAreTheHTTPAnswers: for the same request, a frame is
// answered with the status and bytes of the HTTP call — valid calls whose
// answer does not depend on being the first (a heartbeat, a report again, an
// acquire with nothing queued) and a few hundred bodies mangled at random,
// each sent over HTTP and then as a frame to the same daemon.
func TestSessionAnswersAreTheHTTPAnswers(t *testing.T) {
	f := newFixture(t, server.Options{Auth: testAuth()})
	f.submit("j1", event.KindRun)
	live := f.grant("w1")
	f.submit("j2", event.KindRun)
	done := f.grant("w1")
	if _, err := f.svc.Start(context.Background(), "w1", done); err != nil {
		t.Fatal(err)
	}
	r := f.do("POST", fmt.Sprintf("/v1/leases/%d/report", done), w1Tok, api.Report{Worker: "w1", Outcome: "succeeded"})
	decode[api.ReportReply](t, r, http.StatusOK)
	s := dialSession(t, f, "w1", w1Tok)

	type call struct {
		op, lease, body string
	}
	path := func(c call) string {
		if c.op == api.OpStart || c.op == api.OpReport {
			return "/v1/leases/" + c.lease + "/" + c.op
		}
		return "/v1/workers/w1/" + c.op
	}
	calls := []call{
		{api.OpHeartbeat, "-", fmt.Sprintf(`{"leases":[%d]}`, live)},
		{api.OpHeartbeat, "-", `{"leases":[]}`},
		{api.OpHeartbeat, "-", ``},
		{api.OpHeartbeat, "-", `{"leases":[1,"x"]}`},
		{api.OpAcquire, "-", `{"wait_seconds":0}`},
		{api.OpAcquire, "-", `{"max":0,"max":1}`},
		{api.OpAcquire, "-", `{"max":101}`},
		{api.OpAcquire, "-", `[]`},
		{api.OpReport, fmt.Sprint(done), `{"worker":"w1","outcome":"succeeded"}`},
		{api.OpReport, fmt.Sprint(done), `{"worker":"w1","outcome":"succeeded","next":{"max":1}}`},
		{api.OpReport, fmt.Sprint(done), `{"worker":"w2","outcome":"succeeded"}`},
		{api.OpReport, fmt.Sprint(done), `{"worker":"w1","outcome":"fine"}`},
		{api.OpReport, "abc", `{"worker":"w1","outcome":"succeeded"}`},
		{api.OpReport, "0", `{"worker":"w1","outcome":"succeeded"}`},
		{api.OpReport, fmt.Sprint(done), `{"worker":"w1","outcome":"succeeded"} {}`},
		{api.OpStart, fmt.Sprint(done), `{"worker":"w1"}`},
		{api.OpStart, "99", `{"worker":"w1"}`},
		{api.OpStart, fmt.Sprint(live), `{"worker":"w1","x":1}`},
		{api.OpStart, fmt.Sprint(live), "{\"worker\":\"w\xff\"}"},
	}
	// Mangled bodies: a byte deleted, replaced or inserted, a few times.
	rng := rand.New(rand.NewPCG(13, 1))
	const alphabet = "{}[]\":,0123456789abcdefghijklmnopqrstuvwxyz \\\xc3"
	seeds := []call{
		{api.OpHeartbeat, "-", fmt.Sprintf(`{"leases":[%d]}`, live)},
		{api.OpReport, fmt.Sprint(done), `{"worker":"w1","outcome":"succeeded","result":{"a":[1,2]}}`},
		{api.OpStart, fmt.Sprint(live), `{"worker":"w1"}`},
		{api.OpAcquire, "-", `{"max":1,"wait_seconds":0}`},
	}
	for range 300 {
		c := seeds[rng.IntN(len(seeds))]
		b := []byte(c.body)
		for range 1 + rng.IntN(3) {
			i := rng.IntN(len(b) + 1)
			ch := alphabet[rng.IntN(len(alphabet))]
			switch rng.IntN(3) {
			case 0:
				if i < len(b) {
					b = append(b[:i], b[i+1:]...)
				}
			case 1:
				if i < len(b) {
					b[i] = ch
				}
			default:
				b = append(b[:i], append([]byte{ch}, b[i:]...)...)
			}
		}
		c.body = string(b)
		calls = append(calls, c)
	}
	for i, c := range calls {
		h := f.do("POST", path(c), w1Tok, c.body)
		got := s.call(uint64(i+1), c.op, c.lease, c.body)
		if got.status != h.status || string(got.body) != string(h.body) {
			t.Errorf("%s %s %q:\nHTTP    %d %s\nsession %d %s", c.op, c.lease, c.body, h.status, h.body, got.status, got.body)
		}
	}
}

// TestSessionBadFrames: a frame the daemon cannot take is answered with
// what is wrong; when the stream of frames can no longer be read (a header
// it cannot parse, a body over the limit or too slow), the session ends
// after that answer.
func TestSessionBadFrames(t *testing.T) {
	f := newFixture(t, server.Options{MaxBody: 1024, BodyTimeout: 200 * time.Millisecond})
	f.submit("j1", event.KindRun)
	l := f.grant("w1")

	t.Run("unknown op, then on", func(t *testing.T) {
		s := dialSession(t, f, "w1", "")
		wantError(t, s.call(7, "renew", "-", `{}`), http.StatusBadRequest, api.CodeBadRequest, `unknown op "renew"`)
		r := s.call(8, api.OpHeartbeat, "-", fmt.Sprintf(`{"leases":[%d]}`, l))
		if hb := decode[api.HeartbeatReply](t, r, http.StatusOK); hb.Leases[0].Directive != api.DirectiveContinue {
			t.Fatalf("heartbeat after a bad op: %+v", hb)
		}
	})
	t.Run("another worker's lease", func(t *testing.T) {
		s := dialSession(t, f, "w2", "")
		wantError(t, s.call(1, api.OpReport, fmt.Sprint(l), `{"worker":"w1","outcome":"failed"}`),
			http.StatusForbidden, api.CodeForbidden, `this frame speaks for worker "w2", not "w1"`)
	})
	t.Run("frames of two workers on one session", func(t *testing.T) {
		s := dialSession(t, f, "w1", "")
		r := s.call(1, api.OpHeartbeat, "-", fmt.Sprintf(`{"leases":[%d]}`, l))
		if hb := decode[api.HeartbeatReply](t, r, http.StatusOK); hb.Leases[0].Directive != api.DirectiveContinue {
			t.Fatalf("w1's heartbeat: %+v", hb)
		}
		s.worker = "w2"
		r = s.call(2, api.OpHeartbeat, "-", fmt.Sprintf(`{"leases":[%d]}`, l))
		if hb := decode[api.HeartbeatReply](t, r, http.StatusOK); hb.Leases[0].Directive != api.DirectiveGone {
			t.Fatalf("w2's heartbeat of w1's lease on the same session: %+v, want gone", hb)
		}
	})
	for _, tc := range []struct {
		name, raw string
		id        uint64
		status    int
		code      string
		saying    string
	}{
		{"no fields", "hello\n", 0, http.StatusBadRequest, api.CodeBadRequest, "want ID OP WORKER LEASE LENGTH"},
		{"no worker", "1 heartbeat - 2\n{}", 0, http.StatusBadRequest, api.CodeBadRequest, "want ID OP WORKER LEASE LENGTH"},
		{"id zero", "0 heartbeat w1 - 2\n{}", 0, http.StatusBadRequest, api.CodeBadRequest, `frame id "0"`},
		{"length not a number", "1 heartbeat w1 - two\n", 0, http.StatusBadRequest, api.CodeBadRequest, `frame length "two"`},
		{"two spaces", "1  heartbeat w1 - 2\n{}", 0, http.StatusBadRequest, api.CodeBadRequest, "separated by one space"},
		{"CRLF", "1 heartbeat w1 - 2\r\n{}", 0, http.StatusBadRequest, api.CodeBadRequest, "byte 18 is 0x0d: want printable ASCII"},
		{"header too long", strings.Repeat("1", 300) + "\n", 0, http.StatusBadRequest, api.CodeBadRequest, "longer than 256 bytes"},
		{"no line feed", strings.Repeat("1", 5000), 0, http.StatusBadRequest, api.CodeBadRequest, "no line feed in its first 4096 bytes"},
		{"body over the limit", "5 heartbeat w1 - 1025\n", 5, http.StatusBadRequest, api.CodeTooLarge, "body exceeds 1024 bytes"},
		{"body never comes", "6 heartbeat w1 - 20\n{\"leases\":", 6, http.StatusRequestTimeout, api.CodeBodyTimeout, "did not arrive in time"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := dialSession(t, f, "w1", "")
			s.send(tc.raw)
			id, r := s.answer()
			if id != tc.id {
				t.Errorf("answer of frame %d, want %d", id, tc.id)
			}
			wantError(t, r, tc.status, tc.code, tc.saying)
			s.closed()
		})
	}
}

// TestSessionUpgradeRefused: the upgrade obeys the route's rule — a
// worker's token — and says what it needs; each frame then obeys its HTTP
// call's — the token of the worker it speaks for.
func TestSessionUpgradeRefused(t *testing.T) {
	f := newFixture(t, server.Options{Auth: testAuth()})
	up := map[string]string{"Connection": "Upgrade", "Upgrade": api.SessionProtocol}
	for _, tc := range []struct {
		name, path, token string
		header            map[string]string
		status            int
		code, saying      string
	}{
		{"no token", api.SessionPath, "", up, http.StatusUnauthorized, api.CodeUnauthorized, "missing bearer token"},
		{"an admin's token", api.SessionPath, adminTok, up, http.StatusForbidden, api.CodeForbidden, "needs a worker's token"},
		{"no upgrade", api.SessionPath, w1Tok, nil, http.StatusBadRequest, api.CodeBadRequest, "Upgrade: leaselog-session/1"},
		{"another protocol", api.SessionPath, w1Tok, map[string]string{"Connection": "Upgrade", "Upgrade": "websocket"}, http.StatusBadRequest, api.CodeBadRequest, "Upgrade: leaselog-session/1"},
		{"a query", api.SessionPath + "?x=1", w1Tok, up, http.StatusBadRequest, api.CodeBadRequest, `"x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := f.send(request{method: "GET", path: tc.path, token: tc.token, header: tc.header})
			wantError(t, r, tc.status, tc.code, tc.saying)
		})
	}
	// A frame for another worker than the token's is refused, and the
	// session goes on.
	s := dialSession(t, f, "w1", w2Tok)
	for _, op := range []string{api.OpAcquire, api.OpHeartbeat} {
		wantError(t, s.call(1, op, "-", `{}`), http.StatusForbidden, api.CodeForbidden, `this token is not worker "w1"'s`)
	}
	s.worker = "w2"
	decode[api.HeartbeatReply](t, s.call(2, api.OpHeartbeat, "-", `{"leases":[]}`), http.StatusOK)
	// The Go client hears the refusal as the API error it is.
	c, err := api.NewClient(f.ts.URL, w2Tok, api.Session())
	f.must(err)
	if _, err := c.Heartbeat(context.Background(), "w1", nil); !api.IsCode(err, api.CodeForbidden) {
		t.Fatalf("heartbeat for w1 with w2's token over a session: %v, want forbidden", err)
	}
}

// TestSessionFallsBackToPlainCalls: a client makes its worker calls over a
// session by default; where the daemon or a proxy before it refuses the
// upgrade — a daemon from before sessions (404), a proxy that forwards the
// GET without its Upgrade header (the daemon's 400), one that answers the
// upgrade itself (426, 501) or serves the GET as a plain request (200) — it
// asks once and makes plain calls from then on, the call that asked
// included. A 401 is the token's, not a refusal: the call fails, and so
// does the next, asking again.
func TestSessionFallsBackToPlainCalls(t *testing.T) {
	for _, tc := range []struct {
		name     string
		session  func(w http.ResponseWriter, r *http.Request, daemon http.Handler) // GET /v1/session, as the proxy sees it
		upgrades int                                                               // asked for, over three calls
		plain    bool                                                              // then plain calls
	}{
		{"upgraded", func(w http.ResponseWriter, r *http.Request, d http.Handler) { d.ServeHTTP(w, r) }, 1, false},
		{"old daemon", func(w http.ResponseWriter, r *http.Request, d http.Handler) {
			r.URL.Path = "/v1/no-such-path" // as the daemon answers a path it lacks
			d.ServeHTTP(w, r)
		}, 1, true},
		{"proxy drops Upgrade", func(w http.ResponseWriter, r *http.Request, d http.Handler) {
			r.Header.Del("Upgrade")
			r.Header.Del("Connection")
			d.ServeHTTP(w, r)
		}, 1, true},
		{"proxy 426", func(w http.ResponseWriter, r *http.Request, _ http.Handler) {
			http.Error(w, "upgrade required", http.StatusUpgradeRequired)
		}, 1, true},
		{"proxy 501", func(w http.ResponseWriter, r *http.Request, _ http.Handler) {
			http.Error(w, "not implemented", http.StatusNotImplemented)
		}, 1, true},
		{"proxy 200", func(w http.ResponseWriter, r *http.Request, _ http.Handler) {
			_, _ = io.WriteString(w, "<html>hello</html>")
		}, 1, true},
		{"401", func(w http.ResponseWriter, r *http.Request, _ http.Handler) {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = io.WriteString(w, `{"error":{"code":"unauthorized","message":"no"}}`)
		}, 3, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, server.Options{})
			var upgrades, plainCalls atomic.Int64
			proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == api.SessionPath {
					upgrades.Add(1)
					tc.session(w, r, f.srv)
					return
				}
				if strings.HasPrefix(r.URL.Path, "/v1/workers/") || strings.HasPrefix(r.URL.Path, "/v1/leases/") {
					plainCalls.Add(1)
				}
				f.srv.ServeHTTP(w, r)
			}))
			t.Cleanup(proxy.Close)
			c, err := api.NewClient(proxy.URL, "")
			f.must(err)
			ctx := context.Background()
			f.submit("j1", event.KindRun)
			gs, err := c.AcquireStart(ctx, "w1", 1, 0)
			if tc.name == "401" {
				for range 2 {
					if _, err = c.Heartbeat(ctx, "w1", nil); !api.IsCode(err, api.CodeUnauthorized) {
						break
					}
				}
				if !api.IsCode(err, api.CodeUnauthorized) || !c.Sessions() {
					t.Fatalf("calls after a 401 to the upgrade: %v, sessions %v; want unauthorized, still sessions", err, c.Sessions())
				}
			} else {
				if err != nil || len(gs) != 1 {
					t.Fatalf("acquire: %v %v", gs, err)
				}
				if _, err := c.Heartbeat(ctx, "w1", []uint64{gs[0].Lease}); err != nil {
					t.Fatal(err)
				}
				if _, err := c.Report(ctx, gs[0].Lease, api.Report{Worker: "w1", Outcome: "succeeded"}); err != nil {
					t.Fatal(err)
				}
				if c.Sessions() == tc.plain {
					t.Fatalf("sessions %v after a refusal %v", c.Sessions(), tc.plain)
				}
			}
			if n := upgrades.Load(); n != int64(tc.upgrades) {
				t.Fatalf("%d upgrades asked, want %d", n, tc.upgrades)
			}
			if want := map[bool]int64{true: 3}[tc.plain]; plainCalls.Load() != want {
				t.Fatalf("%d plain worker calls, want %d", plainCalls.Load(), want)
			}
		})
	}
}

// TestSessionFullOpensAnother: one session carries the calls of many
// workers, and a client whose session has its MaxSessionCalls calls in
// flight — long polls of as many workers — opens another for the next call,
// so that no heartbeat waits behind them.
func TestSessionFullOpensAnother(t *testing.T) {
	var waiting atomic.Int64
	f := newFixtureHooked(t, server.Options{}, func(s *server.Server) {
		server.SetWaitHook(s, func(ctx context.Context) context.Context {
			waiting.Add(1)
			return ctx
		})
	})
	c, err := api.NewClient(f.ts.URL, "", api.Session())
	f.must(err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	for i := range server.MaxSessionCalls {
		wg.Go(func() { _, _ = c.Acquire(ctx, fmt.Sprintf("w%d", i), 1, time.Minute) })
	}
	eventually(t, "every long poll waits", func() bool { return waiting.Load() == server.MaxSessionCalls })
	if n := sessionsOpen(t, f); n != 1 {
		t.Fatalf("%v sessions for %d workers' calls, want 1", n, server.MaxSessionCalls)
	}
	hctx, hcancel := context.WithTimeout(ctx, 10*time.Second)
	defer hcancel()
	if _, err := c.Heartbeat(hctx, "w0", nil); err != nil {
		t.Fatalf("a heartbeat beside %d long polls: %v", server.MaxSessionCalls, err)
	}
	if n := sessionsOpen(t, f); n != 2 {
		t.Fatalf("%v sessions, want 2: the full one and the heartbeat's", n)
	}
}

// sessionsOpen is the daemon's leaselog_sessions gauge.
func sessionsOpen(t *testing.T, f *fixture) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	f.must(err)
	for _, mf := range mfs {
		if mf.GetName() == "leaselog_sessions" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("no leaselog_sessions")
	return 0
}

// TestSessionCut: a session cut under a call in flight — by the daemon's
// side or the client's, the socket closed for real — fails that call with
// ErrSessionBroken, which is retryable; the next call opens a new session.
// A long poll in flight does not hold the calls behind it.
func TestSessionCut(t *testing.T) {
	for _, side := range []string{"daemon", "client"} {
		t.Run(side, func(t *testing.T) {
			waiting := make(chan struct{}, 1)
			conns := make(chan net.Conn, 4)
			f := newFixtureHooked(t, server.Options{}, func(s *server.Server) {
				server.SetWaitHook(s, func(ctx context.Context) context.Context {
					waiting <- struct{}{}
					return ctx
				})
				server.SetSessionHook(s, func(c net.Conn) { conns <- c })
			})
			c, err := api.NewClient(f.ts.URL, "", api.Session())
			f.must(err)
			ctx := context.Background()
			polled := make(chan error, 1)
			go func() {
				_, err := c.Acquire(ctx, "w1", 1, time.Minute)
				polled <- err
			}()
			<-waiting
			conn := <-conns
			// The long poll waits; a heartbeat on the same session does not.
			hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if _, err := c.Heartbeat(hctx, "w1", nil); err != nil {
				t.Fatalf("heartbeat beside a long poll: %v", err)
			}
			if side == "daemon" {
				conn.Close()
			} else {
				c.CloseSessions()
			}
			err = <-polled
			if !errors.Is(err, api.ErrSessionBroken) || !api.Retryable(err) {
				t.Fatalf("the long poll of a cut session: %v, want ErrSessionBroken, retryable", err)
			}
			// The daemon ends its side: the wait is cancelled, the gauge
			// falls, nothing was granted.
			eventually(t, "the session closed on the daemon's side", func() bool { return sessionsOpen(t, f) == 0 })
			f.submit("j1", event.KindRun)
			gs, err := c.Acquire(ctx, "w1", 1, 0)
			if err != nil || len(gs) != 1 || gs[0].Job.ID != "j1" {
				t.Fatalf("acquire on a new session: %v %v", gs, err)
			}
			<-waiting // the new acquire's (the hook sees every wait)
			if sessionsOpen(t, f) != 1 {
				t.Fatalf("%v sessions open, want 1", sessionsOpen(t, f))
			}
		})
	}
}

// TestSessionMetrics: the session is a call of its route (101, counted when
// it ends), each frame one of its op's.
func TestSessionMetrics(t *testing.T) {
	f := newFixture(t, server.Options{})
	s := dialSession(t, f, "w1", "")
	for i := range 3 {
		s.call(uint64(i+1), api.OpHeartbeat, "-", `{"leases":[]}`)
	}
	s.call(4, api.OpHeartbeat, "-", `{"leases":7}`)
	s.conn.Close()
	eventually(t, "the session ended", func() bool { return sessionsOpen(t, f) == 0 })
	mfs, err := f.reg.Gather()
	f.must(err)
	got := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != "leaselog_http_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			var route, status string
			for _, l := range m.GetLabel() {
				switch l.GetName() {
				case "route":
					route = l.GetValue()
				case "status":
					status = l.GetValue()
				}
			}
			got[route+" "+status] = m.GetCounter().GetValue()
		}
	}
	for k, want := range map[string]float64{
		"GET /v1/session 101":   1,
		"SESSION heartbeat 200": 3,
		"SESSION heartbeat 400": 1,
	} {
		if got[k] != want {
			t.Errorf("%s: %v, want %v (all: %v)", k, got[k], want, got)
		}
	}
}

// TestSessionHoldsAConnection: a session is a connection under the cap —
// with a cap of 1 and a session open, another connection waits, unserved,
// until the session ends.
func TestSessionHoldsAConnection(t *testing.T) {
	f := newFixture(t, server.Options{})
	ts := httptest.NewUnstartedServer(f.srv)
	ts.Listener = server.LimitListener(ts.Listener, 1)
	ts.Start()
	t.Cleanup(ts.Close)
	addr := ts.Listener.Addr().String()
	s := dialSessionAt(t, addr, "w1", "")
	s.call(1, api.OpHeartbeat, "-", `{"leases":[]}`)

	other := dial(t, addr) // the kernel queues it
	br := bufio.NewReader(other)
	if _, err := io.WriteString(other, "GET /healthz HTTP/1.1\r\nHost: leaselog\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Not served while the session is open: absence can only be observed
	// over a span, as in TestConnectionCap.
	if err := other.SetReadDeadline(time.Now().Add(250 * time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	if _, err := br.Peek(1); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a connection over the cap was served beside a session: %v", err)
	}
	s.call(2, api.OpHeartbeat, "-", `{"leases":[]}`) // the session is served as before
	s.conn.Close()
	_ = other.SetReadDeadline(time.Time{})
	if r := readAnswer(t, other, br, "GET"); r.status != http.StatusOK {
		t.Fatalf("the connection once the session ended: %s", r)
	}
}
