package server_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/server"
)

// Cursors at and past the end of the log, up to 2^64−1: an empty last page
// (no next), never a page from the start (seq+1 wrapping to 0).
const (
	maxSeq     = "18446744073709551615" // 2^64−1
	maxSeqLess = "18446744073709551614" // 2^64−2
)

func TestEventsCursorPastTheLog(t *testing.T) {
	f := newFixture(t, server.Options{})
	f.submit("j1", event.KindRun)
	f.grant("w1")
	last := fmt.Sprint(f.seq())
	for _, after := range []string{last, fmt.Sprint(f.seq() + 1), maxSeqLess, maxSeq} {
		for _, filter := range []string{"", "&type=lease.queued", "&job=j1", "&worker=w1", "&since=2020-01-01T00:00:00Z"} {
			q := "?after=" + after + filter
			p := decode[api.Events](t, f.do("GET", "/v1/events"+q, "", nil), http.StatusOK)
			if len(p.Events) != 0 || p.Events == nil || p.Next != 0 {
				t.Errorf("events%s: %d events, next %d; want none, and no next", q, len(p.Events), p.Next)
			}
		}
	}
	wantError(t, f.do("GET", "/v1/events?after=18446744073709551616", "", nil), http.StatusBadRequest, api.CodeBadRequest, "after")
	wantError(t, f.send(request{method: "GET", path: "/v1/events/stream", header: map[string]string{"Last-Event-ID": "18446744073709551616"}}),
		http.StatusBadRequest, api.CodeBadRequest, "Last-Event-ID")
}

// TestStreamCursorPastTheLog: a stream resumed at or past the end of the log
// sends nothing of what is there, nor of what comes after, while it stays
// open: keepalive comments (every 10 ms here) show it is alive and let the
// test know it has had its chance to send.
func TestStreamCursorPastTheLog(t *testing.T) {
	for _, tc := range []struct {
		name, query string
		header      map[string]string
	}{
		{"after 2^64-1", "?after=" + maxSeq, nil},
		{"after 2^64-2", "?after=" + maxSeqLess, nil},
		{"Last-Event-ID 2^64-1", "", map[string]string{"Last-Event-ID": maxSeq}},
		{"Last-Event-ID 2^64-2", "?after=0", map[string]string{"Last-Event-ID": maxSeqLess}},
		{"filtered, after 2^64-1", "?type=lease.queued&after=" + maxSeq, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, server.Options{StreamKeepalive: 10 * time.Millisecond})
			f.submit("j1", event.KindRun)
			s := f.openStream(tc.query, tc.header)
			quiet := func(keepalives int) {
				t.Helper()
				for n := 0; n < keepalives; {
					line, err := s.r.ReadString('\n')
					if err != nil {
						t.Fatal(err)
					}
					switch {
					case line == ": keepalive\n":
						n++
					case line != "\n":
						t.Fatalf("the stream sent %q", strings.TrimSpace(line))
					}
				}
			}
			quiet(2)
			f.submit("j2", event.KindRun) // durable before Submit returns
			quiet(3)
		})
	}
}
