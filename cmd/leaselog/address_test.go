package main

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/leaselog/leaselog/api"
)

func TestServerURL(t *testing.T) {
	for _, tc := range []struct{ in, want, err string }{
		{"", api.DefaultServer, ""},
		{"127.0.0.1:7420", "http://127.0.0.1:7420", ""},
		{"leaselog.internal:80", "http://leaselog.internal:80", ""},
		{"[::1]:7420", "http://[::1]:7420", ""},
		{"http://h:1", "http://h:1", ""},
		{"https://h", "https://h", ""},
		{"unix:///run/leaselog.sock", "unix:///run/leaselog.sock", ""},
		{"/run/leaselog.sock", "unix:///run/leaselog.sock", ""},
		{"./leaselog.sock", "unix://./leaselog.sock", ""},
		{"ftp://h:1", "", "want host:port"},
		{"localhost", "", "want host:port"},
		{"h:", "", "want host:port"},
	} {
		got, err := serverURL(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("serverURL(%q) = %q, %v; want an error saying %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("serverURL(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// TestResolveServerList: a list of servers is read element by element, and
// its token file is read only if every daemon listed is on this host.
func TestResolveServerList(t *testing.T) {
	for _, tc := range []struct {
		in, want, err string
		local         bool
	}{
		{"127.0.0.1:7420,127.0.0.1:7421", "http://127.0.0.1:7420,http://127.0.0.1:7421", "", true},
		{"http://a:1, /run/l.sock", "http://a:1,unix:///run/l.sock", "", false},
		{"unix:///run/l.sock,localhost:2", "unix:///run/l.sock,http://localhost:2", "", true},
		{"a:1,,b:2", "", "an empty element", false},
		{"a:1,ftp://b:2", "", "want host:port", false},
	} {
		got, err := resolveServer(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("resolveServer(%q) = %q, %v; want an error saying %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want || localServer(got) != tc.local {
			t.Errorf("resolveServer(%q) = %q, %v (local %v); want %q (local %v)", tc.in, got, err, localServer(got), tc.want, tc.local)
		}
	}
}

// closedPort is a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// A client command that cannot reach the daemon says where it looked, what
// the dial said, and what to check — for a bare host:port, a URL and a
// socket path alike; the cause stays matchable.
func TestUnreachableDaemonSaysWhatToCheck(t *testing.T) {
	t.Setenv("LEASELOG_TOKEN", "")
	addr := closedPort(t)
	sock := filepath.Join(t.TempDir(), "none.sock")
	for _, tc := range []struct {
		server, want string
		errno        syscall.Errno
	}{
		{addr, "cannot reach the daemon at http://" + addr + ": connection refused", syscall.ECONNREFUSED},
		{"http://" + addr, "cannot reach the daemon at http://" + addr + ": connection refused", syscall.ECONNREFUSED},
		{sock, "cannot reach the daemon at unix://" + sock + ": no such file or directory", syscall.ENOENT},
		// A list: the last daemon tried is named.
		{"unix://" + sock + "," + addr, "cannot reach the daemon at http://" + addr + ": connection refused", syscall.ECONNREFUSED},
	} {
		var out, errOut bytes.Buffer
		err := (&Main{Stdout: &out, Stderr: &errOut}).Run(context.Background(), []string{"jobs", "--server", tc.server, "--token", "t"})
		var ue *unreachableError
		if !errors.As(err, &ue) || !errors.Is(err, tc.errno) {
			t.Errorf("--server %s: %v (%T); want an unreachableError wrapping %v", tc.server, err, err, tc.errno)
			continue
		}
		if msg := err.Error(); !strings.HasPrefix(msg, tc.want) || !strings.Contains(msg, "is `leaselog serve` running? set --server or LEASELOG_SERVER") {
			t.Errorf("--server %s: %q, want %q and what to check", tc.server, msg, tc.want)
		}
	}
	// Any other failure is left as it is.
	refused := &api.Error{Status: 404, Code: api.CodeNotFound, Message: "x"}
	if got := explainUnreachable(refused); got != error(refused) {
		t.Errorf("an API error became %v", got)
	}
}

// --token is sent as the bearer token, over $LEASELOG_TOKEN; --server takes
// a bare host:port.
func TestTokenFlag(t *testing.T) {
	t.Setenv("LEASELOG_TOKEN", "from-env")
	got := make(chan string, 4)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Authorization")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"jobs":[]}`))
	}))
	defer ts.Close()
	hostport := strings.TrimPrefix(ts.URL, "http://")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--token", "from-flag"}, "Bearer from-flag"},
		{nil, "Bearer from-env"},
	} {
		var out, errOut bytes.Buffer
		args := append([]string{"jobs", "--server", hostport}, tc.args...)
		if err := (&Main{Stdout: &out, Stderr: &errOut}).Run(context.Background(), args); err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		if h := <-got; h != tc.want {
			t.Errorf("%v: Authorization %q, want %q", args, h, tc.want)
		}
	}
}

// A daemon on a unix socket is reached by the socket's path as by its
// unix:// address.
func TestE2EServerBySocketPath(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "s.sock")
	_, c := startServeUnix(t, dir, sock)
	submit(t, c, "by-path", "run", "true")
	for _, server := range []string{sock, "unix://" + sock} {
		var out, errOut bytes.Buffer
		err := (&Main{Stdout: &out, Stderr: &errOut}).Run(context.Background(), []string{"jobs", "--server", server, "--data", filepath.Join(dir, "data")})
		if err != nil || !strings.Contains(out.String(), "by-path") {
			t.Errorf("jobs --server %s: %v\n%s%s", server, err, out.String(), errOut.String())
		}
	}
}
