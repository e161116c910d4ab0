package server_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/server"
)

// fakeOutput is the runs of worker "local": one output per "job/lease/stream".
type fakeOutput map[string]string

// refused is the output of a stream the job tampered with.
const refused = "\x00refused"

func (fakeOutput) Worker() string { return "local" }

func (f fakeOutput) Output(_ context.Context, job string, lease uint64, stream string, offset int64, max int) ([]byte, error) {
	s, ok := f[fmt.Sprintf("%s/%d/%s", job, lease, stream)]
	if !ok {
		return nil, fmt.Errorf("lease %d: %w", lease, server.ErrNoOutput)
	}
	if s == refused {
		return nil, fmt.Errorf("%w: %s-%d/.leaselog/%s is a named pipe, not a regular file", server.ErrOutputRefused, job, lease, stream)
	}
	if offset >= int64(len(s)) {
		return nil, nil
	}
	return []byte(s[offset:min(int64(len(s)), offset+int64(max))]), nil
}

// GET /v1/jobs/{id}/output: the bytes of the daemon's own worker's run from
// an offset, the job's latest lease by default, with the headers a follower
// needs; the run of another worker, or a run gone, is a 404 saying so.
func TestOutput(t *testing.T) {
	doc, router := loadDoc(t)
	out := fakeOutput{}
	f := newFixture(t, server.Options{Auth: testAuth(), Output: out})
	c := &contract{t: t, f: f, doc: doc, router: router, seen: map[string]bool{}}
	f.submit("j1", event.KindRun)
	l1 := f.grant("local")
	f.submit("far", event.KindRun)
	lfar := f.grant("w1")
	f.submit("gone", event.KindRun)
	lgone := f.grant("local")
	f.submit("piped", event.KindRun)
	lpiped := f.grant("local")
	out[fmt.Sprintf("piped/%d/stdout", lpiped)] = refused
	f.submit("queued", event.KindRun)
	out[fmt.Sprintf("j1/%d/stdout", l1)] = "hello\nworld\n"
	out[fmt.Sprintf("j1/%d/stderr", l1)] = "oops\n"

	for _, tc := range []struct {
		query, body, lease, next, state string
	}{
		{"", "hello\nworld\n", fmt.Sprint(l1), "12", "acquired"},
		{"?offset=6", "world\n", fmt.Sprint(l1), "12", "acquired"},
		{"?offset=12", "", fmt.Sprint(l1), "12", "acquired"},
		{fmt.Sprintf("?stream=stderr&lease=%d", l1), "oops\n", fmt.Sprint(l1), "5", "acquired"},
	} {
		r := c.call(request{method: "GET", path: "/v1/jobs/j1/output" + tc.query, token: auditorTok}, http.StatusOK)
		if string(r.body) != tc.body || r.header.Get("Leaselog-Lease") != tc.lease ||
			r.header.Get("Leaselog-Next-Offset") != tc.next || r.header.Get("Leaselog-Job-State") != tc.state {
			t.Errorf("output%s: %q, lease %s, next %s, state %s; want %q, %s, %s, %s", tc.query, r.body,
				r.header.Get("Leaselog-Lease"), r.header.Get("Leaselog-Next-Offset"), r.header.Get("Leaselog-Job-State"),
				tc.body, tc.lease, tc.next, tc.state)
		}
	}
	if r := c.call(request{method: "GET", path: "/v1/jobs/queued/output?offset=3", token: adminTok}, http.StatusOK); len(r.body) != 0 ||
		r.header.Get("Leaselog-Lease") != "0" || r.header.Get("Leaselog-Next-Offset") != "3" || r.header.Get("Leaselog-Job-State") != "queued" {
		t.Errorf("a queued job's output: %q, %v", r.body, r.header)
	}
	for _, tc := range []struct {
		path   string
		status int
		want   string
	}{
		{"/v1/jobs/far/output", http.StatusNotFound, fmt.Sprintf("lease %d of job far ran on worker w1", lfar)},
		{"/v1/jobs/gone/output", http.StatusNotFound, fmt.Sprintf("the run directory of lease %d of job gone is gone", lgone)},
		{"/v1/jobs/piped/output", http.StatusConflict, fmt.Sprintf(`"code":"output_refused","message":"lease %d of job piped: output refused: piped-%d/.leaselog/stdout is a named pipe, not a regular file"`, lpiped, lpiped)},
		{fmt.Sprintf("/v1/jobs/j1/output?lease=%d", lfar), http.StatusNotFound, fmt.Sprintf("job j1 has no lease %d", lfar)},
		{"/v1/jobs/nope/output", http.StatusNotFound, `job \"nope\"`},
		{"/v1/jobs/j1/output?stream=stdin", http.StatusBadRequest, `stream \"stdin\"`},
		{"/v1/jobs/j1/output?offset=x", http.StatusBadRequest, `offset \"x\"`},
		{"/v1/jobs/j1/output?lease=0", http.StatusBadRequest, `lease \"0\"`},
		{"/v1/jobs/j1/output?limit=5", http.StatusBadRequest, `unknown query parameter \"limit\"`},
	} {
		if r := c.call(request{method: "GET", path: tc.path, token: auditorTok}, tc.status); !strings.Contains(string(r.body), tc.want) {
			t.Errorf("GET %s: %s, want a message saying %s", tc.path, r.body, tc.want)
		}
	}
}

// stuckOutput is an OutputSource whose reads never end by themselves (a
// hung filesystem): it returns when its context is done.
type stuckOutput struct{ started chan struct{} }

func (stuckOutput) Worker() string { return "local" }

func (s stuckOutput) Output(ctx context.Context, _ string, _ uint64, _ string, _ int64, _ int) ([]byte, error) {
	s.started <- struct{}{}
	<-ctx.Done()
	return nil, ctx.Err()
}

// A read of output that does not end is cut at the request's deadline: the
// route answers 503 and frees its connection.
func TestOutputReadIsBoundedByTheRequestDeadline(t *testing.T) {
	doc, router := loadDoc(t)
	src := stuckOutput{started: make(chan struct{}, 1)}
	f := newFixture(t, server.Options{Auth: testAuth(), Output: src, RequestTimeout: 200 * time.Millisecond})
	c := &contract{t: t, f: f, doc: doc, router: router, seen: map[string]bool{}}
	f.submit("j1", event.KindRun)
	f.grant("local")
	r := c.call(request{method: "GET", path: "/v1/jobs/j1/output", token: auditorTok}, http.StatusServiceUnavailable)
	if !strings.Contains(string(r.body), "no answer within 200ms") {
		t.Fatalf("a stuck read: %s", r.body)
	}
	select {
	case <-src.started:
	default:
		t.Fatal("the source was never asked")
	}
}
