package server_test

import (
	"bufio"
	"context"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/server"
)

// TestStreamTokenInQuery: the event stream takes its token as ?token= (a
// browser's EventSource cannot send a header), with the roles of the header;
// no other route does, and a token sent twice, or blank, is refused.
func TestStreamTokenInQuery(t *testing.T) {
	f := newFixture(t, server.Options{Auth: testAuth(), StreamKeepalive: 10 * time.Millisecond})
	f.submit("j1", event.KindRun)
	q := func(tok string) string { return "?token=" + url.QueryEscape(tok) }

	// A reader's token in the query: the stream, its events from the start.
	s := f.openStream(q(auditorTok), nil)
	f.check(s.next(), 1)
	f.check(s.next(), 2)
	f.check(f.openStream(q(adminTok)+"&after=1", nil).next(), 2)

	for _, tc := range []struct {
		name, path string
		header     map[string]string
		status     int
		code, says string
	}{
		{"no token", "/v1/events/stream", nil, http.StatusUnauthorized, api.CodeUnauthorized, "?token="},
		{"unknown", "/v1/events/stream" + q("nope"), nil, http.StatusUnauthorized, api.CodeUnauthorized, "unknown token"},
		{"a worker's", "/v1/events/stream" + q(w1Tok), nil, http.StatusForbidden, api.CodeForbidden, "admin or auditor"},
		{"blank", "/v1/events/stream?token=", nil, http.StatusUnauthorized, api.CodeUnauthorized, "blank"},
		{"twice", "/v1/events/stream" + q(auditorTok) + "&token=" + auditorTok, nil, http.StatusUnauthorized, api.CodeUnauthorized, "twice"},
		{"and a header", "/v1/events/stream" + q(auditorTok), map[string]string{"Authorization": "Bearer " + auditorTok},
			http.StatusUnauthorized, api.CodeUnauthorized, "once"},
		{"on a list", "/v1/events" + q(auditorTok), map[string]string{"Authorization": "Bearer " + auditorTok},
			http.StatusBadRequest, api.CodeBadRequest, `"token"`},
		{"alone on a list", "/v1/jobs" + q(adminTok), nil, http.StatusUnauthorized, api.CodeUnauthorized, "Authorization"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			wantError(t, f.send(request{method: "GET", path: tc.path, header: tc.header}), tc.status, tc.code, tc.says)
		})
	}

	// An open daemon takes the parameter and ignores it, so that a page
	// written for a daemon with tokens works with one without.
	open := newFixture(t, server.Options{})
	open.check(open.openStream("?token=anything", nil).next(), 1)
}

// TestStreamKeepaliveDefault: a stream left at the default writes its
// keepalive comment within 15 s of silence, what EventSource clients and
// proxies with idle timeouts expect.
func TestStreamKeepaliveDefault(t *testing.T) {
	if server.DefaultStreamKeepalive <= 0 || server.DefaultStreamKeepalive > 15*time.Second {
		t.Fatalf("DefaultStreamKeepalive %v: want at most 15s", server.DefaultStreamKeepalive)
	}
}

// TestStreamOverUnixSocket: the stream works over a unix socket, as the
// daemon serves it (listen = "unix://…"): events as they come, and keepalive
// comments while it is quiet.
func TestStreamOverUnixSocket(t *testing.T) {
	f := newFixture(t, server.Options{StreamKeepalive: 10 * time.Millisecond})
	sock := filepath.Join(t.TempDir(), "leaselog.sock")
	ln, err := net.Listen("unix", sock)
	f.must(err)
	hs := &http.Server{Handler: f.srv}
	go func() { _ = hs.Serve(ln) }()
	t.Cleanup(func() { f.srv.Close(); hs.Close() })

	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, "GET", "http://leaselog/v1/events/stream?after=1", nil)
	f.must(err)
	resp, err := hc.Do(req)
	f.must(err)
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream over the socket: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	r := bufio.NewReader(resp.Body)
	if line, err := r.ReadString('\n'); err != nil || line != ": keepalive\n" {
		t.Fatalf("quiet stream: %q (%v), want a keepalive comment", line, err)
	}
	f.submit("j1", event.KindRun)
	e, err := readEvent(r) // skips the keepalives
	f.must(err)
	if e.id != "2" || e.event != "lease.queued" || !strings.Contains(e.data, `"job":"j1"`) {
		t.Fatalf("event over the socket: %+v", e)
	}
}
