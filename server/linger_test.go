package server_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/server"
)

// Tests of the lingering close (linger.go): an answer given before the
// request was read to its end reaches the client, rather than a reset.

// tries is how many times a refused body is sent: closed at once, a body of
// a few MB was reset in most tries, not in all.
const tries = 20

// bigBody is a body of 5 MB: five times the body limit, more than the
// socket buffers of loopback hold once the daemon stops reading.
var bigBody = strings.Repeat(" ", 5<<20)

// sendWhole writes raw to conn and the daemon's answer is read after, as a
// client does that sends its request before it reads (curl, most
// libraries): a write cut by a reset is the failure, not the answer.
func sendWhole(t *testing.T, conn net.Conn, raw string) {
	t.Helper()
	if err := conn.SetWriteDeadline(time.Now().Add(within)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, raw); err != nil {
		t.Fatalf("send the request whole: %v", err)
	}
}

// TestRefusedBodyIsAnswered: a body of 5 MB refused over HTTP/1.1 — too
// large, or sent without a token — gets its 4xx answer, every try: the
// daemon reads and drops the rest of the body before it closes. Nothing is
// written.
func TestRefusedBodyIsAnswered(t *testing.T) {
	f := newFixture(t, server.Options{Auth: testAuth()})
	seq := f.seq()
	for _, tc := range []struct {
		name, auth string
		status     int
		code       string
	}{
		{"over the limit", "Authorization: Bearer " + adminTok + "\r\n", http.StatusBadRequest, api.CodeTooLarge},
		{"no token", "", http.StatusUnauthorized, api.CodeUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i := range tries {
				conn := dial(t, f.ts.Listener.Addr().String())
				sendWhole(t, conn, fmt.Sprintf("POST /v1/jobs HTTP/1.1\r\nHost: leaselog\r\n%sContent-Length: %d\r\n\r\n%s", tc.auth, len(bigBody), bigBody))
				br := bufio.NewReader(conn)
				r := readAnswer(t, conn, br, "POST")
				wantError(t, r, tc.status, tc.code)
				if got := r.header.Get("Connection"); got != "close" {
					t.Errorf("try %d: Connection %q, want close", i, got)
				}
				wantClosed(t, conn, br)
				conn.Close()
			}
		})
	}
	if got := f.seq(); got != seq {
		t.Fatalf("seq %d after the refused bodies, was %d", got, seq)
	}
}

// TestRefusedBodyIsAnsweredOverH2C: over HTTP/2 an early answer resets its
// stream only; the client still reads it.
func TestRefusedBodyIsAnsweredOverH2C(t *testing.T) {
	f := newH2CFixture(t, server.Options{Auth: testAuth()}, 0)
	for i := range tries {
		wantError(t, f.do("POST", "/v1/jobs", adminTok, bigBody), http.StatusBadRequest, api.CodeTooLarge)
		wantError(t, f.do("POST", "/v1/jobs", "", bigBody), http.StatusUnauthorized, api.CodeUnauthorized)
		if !f.saw(2) {
			t.Fatalf("try %d: not over HTTP/2", i)
		}
	}
}

// TestRefusedSessionHeaderIsAnswered: a session's header of 5 MB with no
// line feed gets its answer (frame 0, 400), every try.
func TestRefusedSessionHeaderIsAnswered(t *testing.T) {
	f := newFixture(t, server.Options{})
	header := strings.Repeat("1", 5<<20)
	for range tries {
		s := dialSession(t, f, "w1", "")
		sendWhole(t, s.conn, header)
		if err := s.conn.SetReadDeadline(time.Now().Add(within)); err != nil {
			t.Fatal(err)
		}
		id, r := s.answer()
		if id != 0 {
			t.Fatalf("answer of frame %d, want 0", id)
		}
		wantError(t, r, http.StatusBadRequest, api.CodeBadRequest, "no line feed")
		s.closed()
		s.conn.Close()
	}
}

// TestLingerIsBounded: a connection lingers, holding its place under the
// cap, until its client closes, but no longer than the linger's time, nor
// past lingerBytes read, nor once the server closes.
func TestLingerIsBounded(t *testing.T) {
	// capped serves f behind a cap of one connection.
	capped := func(f *fixture) string {
		ts := httptest.NewUnstartedServer(f.srv)
		ts.Listener = server.LimitListener(ts.Listener, 1)
		ts.Start()
		t.Cleanup(ts.Close)
		return ts.Listener.Addr().String()
	}
	// refused sends a body over the limit, of a length still to come, and
	// reads its answer: the daemon lingers.
	refused := func(addr string) net.Conn {
		conn := dial(t, addr)
		if _, err := io.WriteString(conn, "POST /v1/jobs HTTP/1.1\r\nHost: leaselog\r\nContent-Length: 1000000000\r\n\r\n"+
			strings.Repeat(" ", server.DefaultMaxBody+1)); err != nil {
			t.Fatal(err)
		}
		wantError(t, readAnswer(t, conn, bufio.NewReader(conn), "POST"), http.StatusBadRequest, api.CodeTooLarge)
		return conn
	}
	// waiting sends a request on a connection over the cap, and checks it
	// is not served for a while: absence is seen over a span only.
	waiting := func(addr string) (net.Conn, *bufio.Reader) {
		conn := dial(t, addr)
		br := bufio.NewReader(conn)
		if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: leaselog\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		if err := conn.SetReadDeadline(time.Now().Add(250 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		if _, err := br.Peek(1); !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("a connection over the cap was served beside a lingering one: %v", err)
		}
		return conn, br
	}
	served := func(conn net.Conn, br *bufio.Reader) {
		t.Helper()
		if r := readAnswer(t, conn, br, "GET"); r.status != http.StatusOK {
			t.Fatalf("the connection once the linger ended: %s", r)
		}
	}

	t.Run("time", func(t *testing.T) {
		const linger = time.Second
		f := newFixtureHooked(t, server.Options{}, func(s *server.Server) { server.SetLinger(s, linger) })
		addr := capped(f)
		start := time.Now()
		refused(addr) // and silent, open
		served(waiting(addr))
		if took := time.Since(start); took < linger {
			t.Fatalf("the place came back after %v, before the linger of %v ended", took, linger)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		f := newFixtureHooked(t, server.Options{}, func(s *server.Server) { server.SetLinger(s, time.Hour) })
		conn := refused(f.ts.Listener.Addr().String())
		sent := make(chan error, 1)
		go func() {
			chunk := bytes.Repeat([]byte(" "), 64<<10)
			for {
				if _, err := conn.Write(chunk); err != nil {
					sent <- err
					return
				}
			}
		}()
		select {
		case <-sent: // the daemon read its lingerBytes, and closed
		case <-time.After(within):
			t.Fatalf("the client still sends: the daemon read on past %d bytes", server.LingerBytes)
		}
	})
	t.Run("server closes", func(t *testing.T) {
		f := newFixtureHooked(t, server.Options{}, func(s *server.Server) { server.SetLinger(s, time.Hour) })
		addr := capped(f)
		refused(addr)
		conn, br := waiting(addr)
		f.srv.Close()
		served(conn, br)
	})
}
