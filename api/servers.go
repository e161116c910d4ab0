package api

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
)

// The headers a standby daemon (one waiting to take over the log of engine
// "jetstream": docs/cluster.md) puts on its 503: HeaderRole is RoleStandby,
// and HeaderActive, when a daemon leads, names it (http://host:port, the
// address it advertises: server.advertise). A standby processes nothing, so a call
// it answered can be sent to another daemon as it is.
const (
	HeaderRole   = "Leaselog-Role"
	HeaderActive = "Leaselog-Active"
	RoleStandby  = "standby"
)

// ServerError is a call that could not be sent to Server (its connection
// failed), from a client given a list of servers: Server is the last one
// tried.
type ServerError struct {
	Server string
	Err    error
}

func (e *ServerError) Error() string { return e.Server + ": " + e.Err.Error() }
func (e *ServerError) Unwrap() error { return e.Err }

// servers is the list of daemons of a client made with "a,b,…": an active
// daemon and its standbys. One rule: a call goes to the daemon that answered
// last; if it cannot have been processed there — the connection could not
// be made, or a standby answered 503 — it goes to the daemon that standby
// named (if in the list), else the next one, each tried once per call; when
// none took it, the call fails with a standby's 503 if one answered, else the
// dial's error. The daemon a standby names is followed only if listed: the
// client sends its token to the daemons it was given, not to any address an
// answer names. Any
// other failure (a connection broken mid-call, a timeout, an active
// daemon's 5xx) is the caller's to retry: the call may have been done.
type servers struct {
	list []serverEntry
	cur  atomic.Int32 // the one that answered last
}

type serverEntry struct {
	url     string // as given, for errors
	scheme  string // http or https (unix sockets: http)
	host    string // host:port; "leaselog" for a unix socket
	prefix  string // the URL's path, put before each call's
	rt      http.RoundTripper
	upgrade http.RoundTripper // for worker sessions: HTTP/1.1 only
}

// withServers makes c call the comma-separated list of daemons in list.
func (c *Client) withServers(list string, o clientOptions) error {
	s := &servers{}
	for _, raw := range strings.Split(list, ",") {
		raw = strings.TrimSpace(raw)
		e := serverEntry{url: raw, scheme: "http", host: "leaselog"}
		noH2 := map[string]func(string, *tls.Conn) http.RoundTripper{}
		if path, ok := strings.CutPrefix(raw, "unix://"); ok && path != "" {
			dial := func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", path)
			}
			e.rt = newTransport(false, o.h2c, dial)
			e.upgrade = &http.Transport{DialContext: dial, TLSNextProto: noH2}
		} else {
			u, err := url.Parse(raw)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return fmt.Errorf("api: server %q (of %q) is not an http(s):// or unix:// address", raw, list)
			}
			e.scheme, e.host, e.prefix = u.Scheme, u.Host, strings.TrimRight(u.Path, "/")
			e.rt = newTransport(u.Scheme == "https", o.h2c, nil)
			e.upgrade = &http.Transport{TLSNextProto: noH2}
		}
		s.list = append(s.list, e)
	}
	c.base = "http://leaselog" // the transport puts each server's in
	c.http.Transport = &serversTransport{s: s}
	if c.sessions != nil {
		c.sessions.upgrade = &http.Client{Transport: &serversTransport{s: s, upgrade: true}}
	}
	return nil
}

// serversTransport sends a call to the servers by their rule.
type serversTransport struct {
	s       *servers
	upgrade bool
}

func (t *serversTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		defer r.Body.Close() // each attempt sends a copy (GetBody)
	}
	s := t.s
	tried := make([]bool, len(s.list))
	i := int(s.cur.Load())
	// A standby's 503 is kept for the answer if no server takes the call:
	// it says more than a refused connection (a takeover is under way).
	var standby *http.Response
	keep := func(resp *http.Response) {
		if standby != nil {
			_, _ = io.Copy(io.Discard, io.LimitReader(standby.Body, 64<<10))
			standby.Body.Close()
		}
		standby = resp
	}
	for {
		tried[i] = true
		e := &s.list[i]
		r2 := r.Clone(r.Context())
		r2.URL.Scheme, r2.URL.Host, r2.Host = e.scheme, e.host, ""
		if e.prefix != "" {
			r2.URL.Path = e.prefix + r.URL.Path
			if r.URL.RawPath != "" {
				r2.URL.RawPath = e.prefix + r.URL.RawPath
			}
		}
		if r.Body != nil && r.Body != http.NoBody {
			if r.GetBody == nil {
				return nil, errors.New("api: a call to a list of servers needs a body it can send again")
			}
			var err error
			if r2.Body, err = r.GetBody(); err != nil {
				return nil, err
			}
		}
		rt := e.rt
		if t.upgrade {
			rt = e.upgrade
		}
		resp, err := rt.RoundTrip(r2)
		next := -1
		switch {
		case err != nil && notSent(err) && r.Context().Err() == nil:
			next = s.after(i, tried, "")
			if next < 0 && standby != nil {
				return standby, nil
			}
			if next < 0 {
				return nil, &ServerError{Server: e.url, Err: err}
			}
		case err != nil:
			keep(nil)
			return nil, err
		case resp.StatusCode == http.StatusServiceUnavailable && resp.Header.Get(HeaderRole) == RoleStandby:
			keep(resp)
			if next = s.after(i, tried, resp.Header.Get(HeaderActive)); next < 0 {
				return resp, nil // the caller reads the standby's 503
			}
		default:
			keep(nil)
			s.cur.Store(int32(i))
			return resp, nil
		}
		i = next
	}
}

// notSent reports whether err is a connection that could not be made: the
// call was not sent.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}

// after returns the server to try after i: the one named active (a URL), if
// listed and not tried yet, else the next one not tried; -1 when all were.
func (s *servers) after(i int, tried []bool, active string) int {
	if u, err := url.Parse(active); err == nil && u.Host != "" {
		for j, e := range s.list {
			if !tried[j] && e.host == u.Host && e.scheme == u.Scheme {
				return j
			}
		}
	}
	for k := 1; k < len(s.list); k++ {
		if j := (i + k) % len(s.list); !tried[j] {
			return j
		}
	}
	return -1
}

// CloseIdleConnections closes every server's idle connections.
func (t *serversTransport) CloseIdleConnections() {
	for _, e := range t.s.list {
		rt := e.rt
		if t.upgrade {
			rt = e.upgrade
		}
		if c, ok := rt.(interface{ CloseIdleConnections() }); ok {
			c.CloseIdleConnections()
		}
	}
}
