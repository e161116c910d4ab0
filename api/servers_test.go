package api_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/leaselog/leaselog/api"
)

// daemon is an httptest server counting the calls it got.
type daemon struct {
	*httptest.Server
	calls atomic.Int32
}

// activeDaemon answers a heartbeat with a continue for each lease it was
// sent, and a worker session's upgrade with 404 (a daemon without them).
func activeDaemon(t *testing.T) *daemon {
	d := &daemon{}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.calls.Add(1)
		if strings.HasSuffix(r.URL.Path, "/session") {
			http.NotFound(w, r)
			return
		}
		var hb api.Heartbeat
		if err := json.NewDecoder(r.Body).Decode(&hb); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		var reply api.HeartbeatReply
		for _, l := range hb.Leases {
			reply.Leases = append(reply.Leases, api.LeaseDirective{Lease: l, Directive: api.DirectiveContinue})
		}
		_ = json.NewEncoder(w).Encode(reply)
	}))
	t.Cleanup(d.Close)
	return d
}

// standbyDaemon answers every call as a standby does (cmd/leaselog
// store.go), naming active (a URL, or none).
func standbyDaemon(t *testing.T, active string) *daemon {
	d := &daemon{}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.calls.Add(1)
		w.Header().Set(api.HeaderRole, api.RoleStandby)
		if active != "" {
			w.Header().Set(api.HeaderActive, active)
		}
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: &api.Error{Code: api.CodeUnavailable, Message: "standby"}})
	}))
	t.Cleanup(d.Close)
	return d
}

// handlerDaemon answers with h.
func handlerDaemon(t *testing.T, h http.HandlerFunc) *daemon {
	d := &daemon{}
	d.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.calls.Add(1)
		h(w, r)
	}))
	t.Cleanup(d.Close)
	return d
}

// deadURL is an address nothing listens on.
func deadURL(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return "http://" + addr
}

func heartbeat(t *testing.T, c *api.Client) error {
	t.Helper()
	r, err := c.Heartbeat(context.Background(), "w1", []uint64{7})
	if err == nil && (len(r.Leases) != 1 || r.Leases[0].Lease != 7 || r.Leases[0].Directive != api.DirectiveContinue) {
		t.Fatalf("heartbeat: %+v, want lease 7 continue (the body sent again whole)", r)
	}
	return err
}

func listClient(t *testing.T, opts []api.ClientOption, urls ...string) *api.Client {
	t.Helper()
	c, err := api.NewClient(strings.Join(urls, ","), "", opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestServersMoveOn: a call the first servers cannot have processed (nothing
// listens; a standby answers 503) goes to the daemon the standby names, or
// the next one, and the client stays with the one that answered — with and
// without worker sessions (a session's upgrade moves on the same way).
func TestServersMoveOn(t *testing.T) {
	for _, session := range []bool{false, true} {
		opts := []api.ClientOption{api.PlainCalls()}
		if session {
			opts = []api.ClientOption{api.Session()}
		}
		active := activeDaemon(t)
		standby := standbyDaemon(t, active.URL)
		other := activeDaemon(t) // listed after the standby: the standby's name wins
		c := listClient(t, opts, deadURL(t), standby.URL, other.URL, active.URL)
		for range 3 {
			if err := heartbeat(t, c); err != nil {
				t.Fatalf("session %v: %v", session, err)
			}
		}
		wantActive := int32(3)
		if session {
			wantActive = 4 // the upgrade (404: plain calls), then 3 heartbeats
		}
		if s, o, a := standby.calls.Load(), other.calls.Load(), active.calls.Load(); s != 1 || o != 0 || a != wantActive {
			t.Errorf("session %v: calls: standby %d, other %d, active %d; want 1, 0, %d (the named one, remembered)", session, s, o, a, wantActive)
		}
	}
}

// TestServersNoneAnswers: when every server was tried once, the call fails
// with a standby's 503 unavailable if one answered, else the dial error;
// both Retryable, for the worker's own retry to send again.
func TestServersNoneAnswers(t *testing.T) {
	dead := deadURL(t)
	standby := standbyDaemon(t, dead) // names a daemon that died
	err := heartbeat(t, listClient(t, nil, standby.URL, dead))
	var e *api.Error
	if !errors.As(err, &e) || e.Status != http.StatusServiceUnavailable || e.Code != api.CodeUnavailable || !api.Retryable(err) {
		t.Errorf("standby naming a dead daemon: %v, want the standby's 503 unavailable", err)
	}
	if n := standby.calls.Load(); n != 1 {
		t.Errorf("the standby was asked %d times, want once", n)
	}
	err = heartbeat(t, listClient(t, nil, dead, deadURL(t)))
	var se *api.ServerError
	var op *net.OpError
	if !errors.As(err, &se) || !errors.As(err, &op) || op.Op != "dial" || !api.Retryable(err) {
		t.Errorf("two dead servers: %v, want a *ServerError wrapping the dial's *net.OpError", err)
	}
}

// TestServersNoRetryOnceSent: a call that may have been processed — an
// active daemon's own 503 (no standby header), a connection broken after
// the call was sent — is not sent to another server: it returns its error,
// and the next server is not called.
func TestServersNoRetryOnceSent(t *testing.T) {
	for name, h := range map[string]http.HandlerFunc{
		"503 stopping": func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusServiceUnavailable)
			_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: &api.Error{Code: api.CodeStopping, Message: "stopping"}})
		},
		"connection broken": func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		},
	} {
		first := handlerDaemon(t, h)
		next := activeDaemon(t)
		err := heartbeat(t, listClient(t, nil, first.URL, next.URL))
		if err == nil || !api.Retryable(err) {
			t.Errorf("%s: %v, want a retryable error", name, err)
		}
		if n := next.calls.Load(); n != 0 {
			t.Errorf("%s: the next server got %d calls, want none (the call may have been done)", name, n)
		}
	}
}

// TestServersList: every element of the list must be a daemon's address.
func TestServersList(t *testing.T) {
	for _, tc := range []struct {
		list string
		ok   bool
	}{
		{"http://a:1,http://b:2", true},
		{"http://a:1, unix:///run/leaselog.sock", true},
		{"https://a:1/prefix,http://b:2", true},
		{"http://a:1,", false},
		{"http://a:1,ftp://b:2", false},
		{"http://a:1,b:2", false}, // the CLI makes host:port a URL; the API does not guess
	} {
		_, err := api.NewClient(tc.list, "")
		if (err == nil) != tc.ok {
			t.Errorf("NewClient(%q): %v, want ok %v", tc.list, err, tc.ok)
		}
	}
}
