package main

import (
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestDaemonGovernsItsProcs: a daemon left idle goes down to one P, and
// comes back to all of them as soon as it serves two calls at once (one
// holds still: its body comes slowly). internal/procs has the rule; this is
// its wiring into the daemon, read from the daemon's debug log.
func TestDaemonGovernsItsProcs(t *testing.T) {
	if _, set := os.LookupEnv("GOMAXPROCS"); set || runtime.GOMAXPROCS(0) < 2 {
		t.Skip("one P, or GOMAXPROCS set: the daemon runs no governor")
	}
	dir := t.TempDir()
	d := startServe(t, dir, 0)
	waitProcs := func(n int) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for !hasProcsLine(d.output(), n) {
			if time.Now().After(deadline) {
				t.Fatalf("the daemon never logged gomaxprocs %d", n)
			}
			select {
			case <-d.done:
				t.Fatalf("serve exited: %v", d.err)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	waitProcs(1)

	token, err := clientToken(d.url, filepath.Join(dir, "data"))
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(d.url)
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", u.Host)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A submit whose body stops half-way: in flight until its body times out.
	fmt.Fprintf(conn, "POST /v1/jobs HTTP/1.1\r\nHost: leaselog\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{", token)
	// A second call while it is in flight, until the governor has gone up
	// (the first may not yet have reached the point where it counts).
	deadline := time.Now().Add(20 * time.Second)
	for !hasProcsLine(d.output(), runtime.GOMAXPROCS(0)) {
		if _, err := d.c.Health(t.Context()); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("the daemon never went back to gomaxprocs %d", runtime.GOMAXPROCS(0))
		}
	}
}

// hasProcsLine says whether a daemon's log has the governor setting
// GOMAXPROCS to n.
func hasProcsLine(log string, n int) bool {
	for _, line := range strings.Split(log, "\n") {
		var l struct {
			GOMAXPROCS *int `json:"gomaxprocs"`
		}
		if json.Unmarshal([]byte(line), &l) == nil && l.GOMAXPROCS != nil && *l.GOMAXPROCS == n {
			return true
		}
	}
	return false
}
