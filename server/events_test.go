package server_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/ops"
	"github.com/leaselog/leaselog/server"
)

func TestEventsQuery(t *testing.T) {
	f := newFixture(t, server.Options{})
	f.submit("j1", event.KindRun)        // 2 (1 is daemon.started)
	f.clock.Advance(2 * time.Second)     // less than grace: no daemon.resumed
	f.grant("w1")                        // 3
	f.submit("j2", event.KindEvaluation) // 4
	f.clock.Advance(2 * time.Second)
	f.grant("w2") // 5

	all := decode[api.Events](t, f.do("GET", "/v1/events", "", nil), http.StatusOK)
	if len(all.Events) != 5 || all.Next != 0 {
		t.Fatalf("all events: %d, next %d; want 5 and no next (the last page)", len(all.Events), all.Next)
	}
	for i, e := range all.Events {
		want, err := f.log.Get(uint64(i + 1))
		f.must(err)
		if got, _ := json.Marshal(e); string(got) != string(must(json.Marshal(ops.EventOf(&want)))) {
			t.Fatalf("event %d: %s, log has %s", i+1, got, want.String())
		}
	}

	// Paging with limit and the next cursor walks the log once; the last
	// page has no next (paging_test.go pages every list).
	var seqs []uint64
	after := uint64(0)
	for {
		p := decode[api.Events](t, f.do("GET", fmt.Sprintf("/v1/events?limit=2&after=%d", after), "", nil), http.StatusOK)
		for _, e := range p.Events {
			seqs = append(seqs, e.Seq)
		}
		if p.Next == 0 {
			break
		}
		if p.Next != p.Events[len(p.Events)-1].Seq {
			t.Fatalf("next %d, last seq %d", p.Next, p.Events[len(p.Events)-1].Seq)
		}
		after = p.Next
	}
	if fmt.Sprint(seqs) != "[1 2 3 4 5]" {
		t.Fatalf("paged seqs %v", seqs)
	}

	t1 := clocktest.Epoch.Add(2 * time.Second).Format(time.RFC3339)
	t2 := clocktest.Epoch.Add(4 * time.Second).Format(time.RFC3339)
	for _, tc := range []struct{ query, want string }{
		{"type=lease.queued", "[2 4]"},
		{"job=j1", "[2 3]"},
		{"worker=w2", "[5]"},
		{"type=lease.acquired&worker=w1", "[3]"},
		{"since=" + url.QueryEscape(t1), "[3 4 5]"},
		{"until=" + url.QueryEscape(t1), "[1 2]"},
		{"since=" + url.QueryEscape(t1) + "&until=" + url.QueryEscape(t2), "[3 4]"},
		{"type=lease.queued&after=2", "[4]"},
		{"type=lease.stale_report", "[]"},
	} {
		p := decode[api.Events](t, f.do("GET", "/v1/events?"+tc.query, "", nil), http.StatusOK)
		var got []uint64
		for _, e := range p.Events {
			got = append(got, e.Seq)
		}
		if fmt.Sprint(got) != tc.want || p.Events == nil {
			t.Errorf("events?%s: %v, want %s", tc.query, got, tc.want)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// sse is one server-sent event.
type sse struct {
	id, event, data string
}

// stream is an open GET /v1/events/stream.
type stream struct {
	t      *testing.T
	resp   *http.Response
	r      *bufio.Reader
	cancel context.CancelFunc
}

func (f *fixture) openStream(query string, header map[string]string) *stream {
	f.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	resp, err := f.ts.Client().Do(f.newRequest(ctx, request{method: "GET", path: "/v1/events/stream" + query, header: header}))
	if err != nil {
		cancel()
		f.t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		cancel()
		f.t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &stream{t: f.t, resp: resp, r: bufio.NewReader(resp.Body), cancel: cancel}
	f.t.Cleanup(s.close)
	return s
}

func (s *stream) close() {
	s.cancel()
	s.resp.Body.Close()
}

// next reads the next event; it blocks until the server sends one.
func (s *stream) next() sse {
	s.t.Helper()
	e, err := readEvent(s.r)
	if err != nil {
		s.t.Fatalf("read event: %v", err)
	}
	return e
}

func readEvent(r *bufio.Reader) (sse, error) {
	var e sse
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return e, err
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if e.data == "" && e.id == "" {
				continue
			}
			return e, nil
		}
		k, v, _ := strings.Cut(line, ": ")
		switch k {
		case "id":
			e.id = v
		case "event":
			e.event = v
		case "data":
			e.data = v
		}
	}
}

// check checks that e is the log's event seq, as /v1/events shows it.
func (f *fixture) check(e sse, seq uint64) {
	f.t.Helper()
	want, err := f.log.Get(seq)
	f.must(err)
	wantData := string(must(json.Marshal(ops.EventOf(&want))))
	if e.id != strconv.FormatUint(seq, 10) || e.event != want.Type.String() || e.data != wantData {
		f.t.Fatalf("event %+v, want id %d, event %s, data %s", e, seq, want.Type, wantData)
	}
}

// TestStream: the stream delivers every event in order, with its seq as id,
// waits for new ones, and resumes after Last-Event-ID.
func TestStream(t *testing.T) {
	f := newFixture(t, server.Options{})
	f.submit("j1", event.KindRun)
	f.submit("j2", event.KindRun)

	s := f.openStream("?after=0", nil)
	for seq := uint64(1); seq <= 3; seq++ {
		f.check(s.next(), seq)
	}
	// Nothing more in the log: the stream waits for the next durable event.
	f.submit("j3", event.KindRun)
	f.check(s.next(), 4)
	f.grant("w1")
	f.check(s.next(), 5)
	s.close()

	// Resuming: Last-Event-ID wins over after=.
	r := f.openStream("?after=0", map[string]string{"Last-Event-ID": "2"})
	f.check(r.next(), 3)
	f.check(r.next(), 4)
	r.close()
	f.check(f.openStream("?after=4", nil).next(), 5)
	f.check(f.openStream("", nil).next(), 1)
}

func TestStreamFiltered(t *testing.T) {
	f := newFixture(t, server.Options{})
	f.submit("j1", event.KindRun) // 2
	f.grant("w1")                 // 3
	s := f.openStream("?type=lease.queued", nil)
	f.check(s.next(), 2)
	f.submit("j2", event.KindRun) // 4
	f.grant("w2")                 // 5: not a queued event
	f.submit("j3", event.KindRun) // 6
	f.check(s.next(), 4)
	f.check(s.next(), 6)
}

func TestCloseEndsStreams(t *testing.T) {
	f := newFixture(t, server.Options{})
	s := f.openStream("", nil)
	f.check(s.next(), 1)
	f.srv.Close()
	if _, err := readEvent(s.r); err != io.EOF {
		t.Fatalf("stream after Close: %v, want EOF", err)
	}
}
