package server_test

import (
	"bufio"
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

// Tests of what a session may hold of the daemon: a frame sent in part, a
// session that sends nothing, answers left unread.

// TestSessionHalfFrameIsCut: a frame's header must be whole within the body
// timeout of its first byte, and a session's first frame must begin within
// it of the upgrade; either is answered (frame 0, 408) and the session
// closed, its place under the cap given back. Between frames a session may
// idle for as long as it likes.
func TestSessionHalfFrameIsCut(t *testing.T) {
	const timeout = 200 * time.Millisecond
	f := newFixture(t, server.Options{BodyTimeout: timeout})
	ts := httptest.NewUnstartedServer(f.srv)
	const places = 4
	ts.Listener = server.LimitListener(ts.Listener, places)
	ts.Start()
	t.Cleanup(ts.Close)
	addr := ts.Listener.Addr().String()

	// Every place taken by a session that sent half a header, or nothing.
	type cut struct {
		s      *session
		saying string
	}
	var cuts []cut
	for i := range places {
		s := dialSessionAt(t, addr, "w1", "")
		if i%2 == 0 {
			s.send("1 heartbeat w1 - ")
			cuts = append(cuts, cut{s, "not whole within"})
		} else {
			cuts = append(cuts, cut{s, "no frame within"})
		}
	}
	// Each is answered and closed; a connection waiting for a place is
	// served.
	other := dial(t, addr)
	if _, err := io.WriteString(other, "GET /healthz HTTP/1.1\r\nHost: leaselog\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	for _, c := range cuts {
		if err := c.s.conn.SetReadDeadline(time.Now().Add(within)); err != nil {
			t.Fatal(err)
		}
		id, r := c.s.answer()
		if id != 0 {
			t.Errorf("answer of frame %d, want 0", id)
		}
		wantError(t, r, http.StatusRequestTimeout, api.CodeBodyTimeout, c.saying)
		c.s.closed()
	}
	if r := readAnswer(t, other, bufio.NewReader(other), "GET"); r.status != http.StatusOK {
		t.Fatalf("a connection once the half sessions were cut: %s", r)
	}

	// A session idle between frames, for several timeouts, is kept.
	s := dialSessionAt(t, addr, "w1", "")
	s.call(1, api.OpHeartbeat, "-", `{"leases":[]}`)
	if err := s.conn.SetReadDeadline(time.Now().Add(3 * timeout)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.br.Peek(1); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("an idle session was closed, or answered: %v", err)
	}
	if err := s.conn.SetReadDeadline(time.Time{}); err != nil {
		t.Fatal(err)
	}
	decode[api.HeartbeatReply](t, s.call(2, api.OpHeartbeat, "-", `{"leases":[]}`), http.StatusOK)
}

// TestSessionUnreadAnswersAreBounded: a session that sends valid frames and
// never reads its answers is read no further once its answers waiting pass
// the backlog bound — its client's writes stall, where before the daemon
// read them all and held their answers — and is cut once a write of its
// answers does not end within the request timeout.
func TestSessionUnreadAnswersAreBounded(t *testing.T) {
	const backlog = 64 << 10
	conns := make(chan net.Conn, 1)
	f := newFixtureHooked(t, server.Options{RequestTimeout: 2 * time.Second}, func(s *server.Server) {
		server.SetSessionBacklog(s, backlog)
		server.SetSessionHook(s, func(c net.Conn) { conns <- c })
	})
	s := dialSession(t, f, "w1", "")
	// Small socket buffers, on both sides, so that what the kernel holds
	// does not hide what the daemon does.
	for _, c := range []net.Conn{s.conn, <-conns} {
		tc := c.(*net.TCPConn)
		if err := tc.SetReadBuffer(16 << 10); err != nil {
			t.Fatal(err)
		}
		if err := tc.SetWriteBuffer(16 << 10); err != nil {
			t.Fatal(err)
		}
	}

	// Heartbeats of 100 leases none holds: each answer ~4 KB, a "gone" per
	// lease, nothing written.
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = fmt.Sprint(1_000_000 + i)
	}
	body := `{"leases":[` + strings.Join(ids, ",") + `]}`
	const want = 8 << 20 // what the client tries to send: ~36 MB of answers
	written, id := 0, uint64(0)
	var err error
	for written < want {
		id++
		frame := api.AppendRequest(nil, id, api.OpHeartbeat, "w1", "-", []byte(body))
		// A write that does not end within half a second: the daemon
		// does not read.
		if err = s.conn.SetWriteDeadline(time.Now().Add(500 * time.Millisecond)); err != nil {
			t.Fatal(err)
		}
		var n int
		n, err = s.conn.Write(frame)
		written += n
		if err != nil {
			break
		}
	}
	t.Logf("wrote %d bytes in %d frames: %v", written, id, err)
	// The bound: the answers of the calls in flight (at most
	// MaxSessionCalls, a frame of ~1 KB each), the backlog, the buffers.
	if !errors.Is(err, os.ErrDeadlineExceeded) || written > 1<<20 {
		t.Fatalf("the client wrote %d bytes of frames, never reading (%v): want the daemon to stop reading after ~%d bytes of answers",
			written, err, backlog)
	}
	// The daemon cuts the session once its write has not ended within the
	// request timeout.
	eventually(t, "the session is cut", func() bool { return sessionsOpen(t, f) == 0 })
}
