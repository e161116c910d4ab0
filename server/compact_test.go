package server_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/server"
)

// TestCompactedLog: once a job's heartbeats are compacted, its history shows
// the summary where they were (as the document describes it), a cursor among
// the seqs they left resumes after them in a page and in the stream, and the
// metrics count what was compacted.
func TestCompactedLog(t *testing.T) {
	doc, router := loadDoc(t)
	f := newFixtureHooked(t, server.Options{Auth: testAuth()}, nil,
		leasetest.Service(func(o *lease.Options) { o.HeartbeatRetention = time.Minute }))
	c := &contract{t: t, f: f, doc: doc, router: router, seen: map[string]bool{}}
	ctx := context.Background()
	f.submit("j1", event.KindRun)
	l := f.grant("w1")
	var beats []uint64
	for range 4 {
		f.clock.Advance(time.Second)
		_, err := f.svc.Heartbeat(ctx, "w1", []uint64{l})
		f.must(err)
		beats = append(beats, f.log.LastSeq())
	}
	_, err := f.svc.Report(ctx, "w1", l, lease.Report{Outcome: event.OutcomeSucceeded})
	f.must(err)
	f.clock.Advance(2 * time.Minute)
	st, _, err := f.svc.Compact()
	f.must(err)
	if st.Heartbeats != 3 {
		t.Fatalf("compacted %+v, want 3 heartbeats", st)
	}

	h := decode[api.History](t, c.call(request{method: "GET", path: "/v1/jobs/j1/history", token: auditorTok}, http.StatusOK), http.StatusOK)
	var types []string
	var sum *api.Event
	for i, e := range h.Events {
		types = append(types, e.Type)
		if e.Type == "lease.heartbeats" {
			sum = &h.Events[i]
		}
	}
	if want := "lease.queued lease.acquired lease.heartbeats lease.reported"; strings.Join(types, " ") != want {
		t.Fatalf("history %v, want %s", types, want)
	}
	if sum.Seq != beats[3] || sum.Heartbeats == nil || sum.Heartbeats.Count != 4 || sum.Heartbeats.FirstSeq != beats[0] ||
		!sum.Heartbeats.FirstTime.Before(sum.Time) {
		t.Fatalf("summary %+v, %+v; want 4 heartbeats from seq %d, at seq %d", sum, sum.Heartbeats, beats[0], beats[3])
	}

	// A cursor on a compacted seq: the page and the stream go on after it.
	after := fmt.Sprintf("?after=%d", beats[1])
	page := decode[api.Events](t, c.call(request{method: "GET", path: "/v1/events" + after + "&limit=1", token: auditorTok}, http.StatusOK), http.StatusOK)
	if len(page.Events) != 1 || page.Events[0].Seq != beats[3] || page.Next != beats[3] {
		t.Fatalf("page after seq %d: %+v, want the summary at seq %d", beats[1], page, beats[3])
	}
	evs := c.stream(request{method: "GET", path: "/v1/events/stream" + after, token: auditorTok}, 2)
	if evs[0].id != fmt.Sprint(beats[3]) || evs[0].event != "lease.heartbeats" || evs[1].event != "lease.reported" {
		t.Fatalf("stream after seq %d: %+v", beats[1], evs)
	}
	var e api.Event
	if err := json.Unmarshal([]byte(evs[0].data), &e); err != nil || e.Heartbeats == nil || e.Heartbeats.Count != 4 {
		t.Fatalf("streamed summary %s: %v", evs[0].data, err)
	}

	text := string(f.do("GET", "/metrics", auditorTok, nil).body)
	for _, want := range []string{
		"leaselog_compacted_jobs_total 1",
		"leaselog_compacted_heartbeats_total 3",
		"leaselog_compaction_summaries_total 1",
		`leaselog_events_total{type="lease.heartbeat"} 4`, // as the fold counts them: all four
	} {
		if !strings.Contains(text, want+"\n") {
			t.Errorf("metrics lack %q:\n%s", want, grep(text, "leaselog_"))
		}
	}
	if strings.Contains(text, `type="lease.heartbeats"`) {
		t.Errorf("metrics count summaries apart:\n%s", grep(text, "leaselog_events_total"))
	}
}
