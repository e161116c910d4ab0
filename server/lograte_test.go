package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/server"
)

// logLines is the fixture's log, a map per line.
func (f *fixture) logLines() []map[string]any {
	f.t.Helper()
	var lines []map[string]any
	for l := range strings.SplitSeq(strings.TrimSpace(f.logs.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(l), &m); err != nil {
			f.t.Fatalf("log line %q: %v", l, err)
		}
		lines = append(lines, m)
	}
	return lines
}

// TestRefusalsAreLoggedAtABoundedRate: refused calls, over HTTP/1.1, h2c or
// a session, are logged a burst of LogBurst lines, then LogRate a second
// of the daemon's clock; the next line logged says how many were not. Each
// is still counted in the metrics. A failure (5xx) is not held back by a
// flood of refusals.
func TestRefusalsAreLoggedAtABoundedRate(t *testing.T) {
	const extra = 7
	for _, tc := range []struct {
		name   string
		fix    func(t *testing.T) *fixture
		refuse func(t *testing.T, f *fixture) // one refused call, answered
		route  string
	}{
		{"http", func(t *testing.T) *fixture { return newFixture(t, server.Options{}) },
			func(t *testing.T, f *fixture) {
				wantError(t, f.do("GET", "/v1/nope", "", nil), http.StatusNotFound, api.CodeNotFound)
			},
			"unmatched"},
		{"h2c", func(t *testing.T) *fixture { return newH2CFixture(t, server.Options{}, 0).fixture },
			func(t *testing.T, f *fixture) {
				wantError(t, f.do("GET", "/v1/nope", "", nil), http.StatusNotFound, api.CodeNotFound)
			},
			"unmatched"},
		{"session", func(t *testing.T) *fixture { return newFixture(t, server.Options{}) }, nil, "SESSION unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := tc.fix(t)
			refuse := tc.refuse
			if refuse == nil {
				s := dialSession(t, f, "w1", "")
				id := uint64(0)
				refuse = func(t *testing.T, f *fixture) {
					id++
					wantError(t, s.call(id, "renew", "-", `{}`), http.StatusBadRequest, api.CodeBadRequest)
				}
			}
			// A session answers a frame before it records the call: the
			// test waits until every refusal was recorded before it reads
			// the log or moves the clock.
			recorded := func(n int) {
				eventually(t, fmt.Sprintf("%d refusals recorded", n), func() bool {
					return requestsAnswered(t, f.reg, tc.route) == float64(n)
				})
			}
			for range server.LogBurst + extra {
				refuse(t, f)
			}
			recorded(server.LogBurst + extra)
			if n := len(f.logLines()); n != server.LogBurst {
				t.Fatalf("%d lines for %d refusals at once, want the burst of %d", n, server.LogBurst+extra, server.LogBurst)
			}
			// A second later, by the daemon's clock: LogRate lines more,
			// the first saying how many were held back.
			f.clock.Advance(time.Second)
			for range server.LogRate + extra {
				refuse(t, f)
			}
			recorded(server.LogBurst + server.LogRate + 2*extra)
			lines := f.logLines()
			if n := len(lines); n != server.LogBurst+server.LogRate {
				t.Fatalf("%d lines a second later, want %d", n, server.LogBurst+server.LogRate)
			}
			for i, l := range lines {
				want := 0.0
				if i == server.LogBurst {
					want = extra
				}
				if got, _ := l["suppressed"].(float64); got != want {
					t.Fatalf("line %d: suppressed %v, want %v: %v", i, l["suppressed"], want, l)
				}
			}
			if n := requestsAnswered(t, f.reg, tc.route); n != server.LogBurst+server.LogRate+2*extra {
				t.Fatalf("%v refusals counted, want every one, %d", n, server.LogBurst+server.LogRate+2*extra)
			}
			if tc.name != "http" {
				return
			}
			// A failure, with the refusals' lines spent: logged.
			f.must(f.log.Close())
			wantError(t, f.do("GET", "/v1/jobs", "", nil), http.StatusServiceUnavailable, api.CodeUnavailable)
			lines = f.logLines()
			if last := lines[len(lines)-1]; last["level"] != "error" || last["status"] != float64(http.StatusServiceUnavailable) {
				t.Fatalf("the failure after the refusals: last line %v, want its error", last)
			}
		})
	}
}
