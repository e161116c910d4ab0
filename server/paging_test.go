package server_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/server"
)

// pagingWorld fills f with jobs in every place a list reads them from: 30
// jobs submitted out of id order, of both kinds; leases live with two
// workers; jobs ended (reported succeeded and failed, cancelled), which the
// archive holds; and a job with a long history of heartbeats.
func pagingWorld(f *fixture) {
	f.t.Helper()
	ctx := context.Background()
	for i := range 30 {
		kind := event.KindRun
		if i%3 == 0 {
			kind = event.KindEvaluation
		}
		_, _, err := f.svc.Submit(ctx, fmt.Sprintf("j%02d", i*7%30), kind, []byte(`{"run":"true"}`))
		f.must(err)
	}
	w1, err := f.svc.Acquire(ctx, "w1", 12)
	f.must(err)
	for _, g := range w1[:4] {
		_, err := f.svc.Report(ctx, "w1", g.Lease, lease.Report{Outcome: event.OutcomeSucceeded})
		f.must(err)
	}
	queued, err := f.svc.Jobs(ctx, projection.JobFilter{State: fsm.Queued})
	f.must(err)
	for _, j := range queued[:5] {
		_, err := f.svc.Cancel(ctx, j.ID)
		f.must(err)
	}
	w2, err := f.svc.Acquire(ctx, "w2", 6)
	f.must(err)
	for _, g := range w2[:3] {
		_, err := f.svc.Report(ctx, "w2", g.Lease, lease.Report{Outcome: event.OutcomeFailed})
		f.must(err)
	}
	var live []uint64
	for _, g := range w1[4:] {
		live = append(live, g.Lease)
	}
	for range 8 {
		_, err := f.svc.Heartbeat(ctx, "w1", live)
		f.must(err)
	}
}

// listCase is one list of the API, with what it must list, in order, read
// from the service by its whole-list reads.
type listCase struct {
	name, path string
	field, key string // the answer's list field, and its items' key field
	want       func(f *fixture) []string
}

func listCases() []listCase {
	ctx := context.Background()
	jobs := func(jf projection.JobFilter) func(*fixture) []string {
		return func(f *fixture) []string {
			js, err := f.svc.Jobs(ctx, jf)
			f.must(err)
			var out []string
			for _, j := range js {
				out = append(out, j.ID)
			}
			return out
		}
	}
	leases := func(lf projection.LeaseFilter) func(*fixture) []string {
		return func(f *fixture) []string {
			ls, err := f.svc.Leases(ctx, lf)
			f.must(err)
			var out []string
			for _, l := range ls {
				out = append(out, strconv.FormatUint(l.ID, 10))
			}
			return out
		}
	}
	events := func(ef lease.EventFilter) func(*fixture) []string {
		return func(f *fixture) []string {
			var out []string
			_, err := f.svc.Events(ef, 0, func(e *event.Event) error {
				out = append(out, strconv.FormatUint(e.Seq, 10))
				return nil
			})
			f.must(err)
			return out
		}
	}
	return []listCase{
		{"jobs", "/v1/jobs", "jobs", "id", jobs(projection.JobFilter{})},
		{"jobs queued", "/v1/jobs?state=queued", "jobs", "id", jobs(projection.JobFilter{State: fsm.Queued})},
		{"jobs cancelled", "/v1/jobs?state=cancelled", "jobs", "id", jobs(projection.JobFilter{State: fsm.Cancelled})},
		{"jobs evaluation", "/v1/jobs?kind=evaluation", "jobs", "id", jobs(projection.JobFilter{Kind: event.KindEvaluation})},
		{"jobs reported failed", "/v1/jobs?outcome=failed", "jobs", "id", jobs(projection.JobFilter{Outcome: event.OutcomeFailed})},
		{"jobs reported succeeded", "/v1/jobs?state=reported&outcome=succeeded", "jobs", "id", jobs(projection.JobFilter{State: fsm.Reported, Outcome: event.OutcomeSucceeded})},
		{"leases", "/v1/leases", "leases", "lease", leases(projection.LeaseFilter{})},
		{"leases of w1", "/v1/leases?worker=w1", "leases", "lease", leases(projection.LeaseFilter{Worker: "w1"})},
		{"leases reported", "/v1/leases?state=reported", "leases", "lease", leases(projection.LeaseFilter{State: fsm.Reported})},
		{"worker leases", "/v1/workers/w1/leases", "leases", "lease", leases(projection.LeaseFilter{Worker: "w1"})},
		{"history", "/v1/jobs/" + histJob + "/history", "events", "seq", events(lease.EventFilter{Job: histJob})},
		{"events", "/v1/events", "events", "seq", events(lease.EventFilter{})},
		{"events of w2", "/v1/events?worker=w2", "events", "seq", events(lease.EventFilter{Worker: "w2"})},
	}
}

// histJob is the job of pagingWorld with the longest history: the first w1
// holds still (submitted first, acquired first, not reported).
const histJob = "j28"

// page is one answer of a list: its items' keys and its next, as it came.
type page struct {
	keys []string
	next json.RawMessage // nil: absent
}

func (f *fixture) page(c listCase, limit int, after json.RawMessage) page {
	f.t.Helper()
	u, err := url.Parse(c.path)
	f.must(err)
	q := u.Query()
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if after != nil {
		// A cursor is passed back as it came: a string's text, a number's digits.
		var s string
		if json.Unmarshal(after, &s) != nil {
			s = string(after)
		}
		q.Set("after", s)
	}
	u.RawQuery = q.Encode()
	r := f.do("GET", u.String(), "", nil)
	if r.status != http.StatusOK {
		f.t.Fatalf("GET %s: %s", u, r)
	}
	var body map[string]json.RawMessage
	f.must(json.Unmarshal(r.body, &body))
	var items []map[string]json.RawMessage
	f.must(json.Unmarshal(body[c.field], &items))
	if items == nil {
		f.t.Fatalf("GET %s: %s is not a list: %s", u, c.field, r.body)
	}
	var p page
	for _, it := range items {
		k := it[c.key]
		var s string
		if json.Unmarshal(k, &s) != nil {
			s = string(k)
		}
		p.keys = append(p.keys, s)
	}
	if n, ok := body["next"]; ok {
		if bytes.Equal(n, []byte("null")) || bytes.Equal(n, []byte(`""`)) || bytes.Equal(n, []byte("0")) {
			f.t.Fatalf("GET %s: next %s: absent is the last page, not an empty cursor", u, n)
		}
		p.next = n
	}
	return p
}

// TestListsPage pages through every list with limits below, at and above
// its length: each item comes exactly once, in order, every page but the
// last is full and has a next, and the last has none.
func TestListsPage(t *testing.T) {
	f := newFixture(t, server.Options{})
	pagingWorld(f)
	for _, c := range listCases() {
		t.Run(c.name, func(t *testing.T) {
			f.t = t
			want := c.want(f)
			if len(want) < 3 {
				t.Fatalf("the world has %d items for %s: too few to page", len(want), c.path)
			}
			for _, limit := range []int{1, 2, len(want) - 1, len(want), len(want) + 1, 0} {
				var got []string
				var after json.RawMessage
				pages := 0
				for {
					p := f.page(c, limit, after)
					pages++
					got = append(got, p.keys...)
					if p.next == nil {
						break
					}
					if full := cmp.Or(limit, server.DefaultLimit); len(p.keys) != full {
						t.Fatalf("limit %d: page %d has %d items and a next", limit, pages, len(p.keys))
					}
					if pages > len(want)+1 {
						t.Fatalf("limit %d: %d pages and no end", limit, pages)
					}
					after = p.next
				}
				if !slices.Equal(got, want) {
					t.Fatalf("limit %d: paged %v, want %v", limit, got, want)
				}
				full := cmp.Or(limit, server.DefaultLimit)
				wantPages := (len(want) + full - 1) / full
				if pages != wantPages {
					t.Fatalf("limit %d: %d pages for %d items, want %d (the last full page has no next)", limit, pages, len(want), wantPages)
				}
			}
		})
	}
}

// TestJobPagesAreStable: jobs that end (and leave the table for the archive)
// and jobs submitted before the cursor between two pages neither repeat nor
// hide the jobs the first page did not reach.
func TestJobPagesAreStable(t *testing.T) {
	f := newFixture(t, server.Options{})
	pagingWorld(f)
	c := listCases()[0]
	want := c.want(f)
	first := f.page(c, 10, nil)
	ctx := context.Background()
	// End a queued job past the cursor, and submit one before it and one after.
	queued, err := f.svc.Jobs(ctx, projection.JobFilter{State: fsm.Queued})
	f.must(err)
	var ended string
	for _, j := range queued {
		if j.ID > first.keys[len(first.keys)-1] {
			ended = j.ID
			break
		}
	}
	if ended == "" {
		t.Fatal("no queued job past the first page")
	}
	_, err = f.svc.Cancel(ctx, ended)
	f.must(err)
	f.submit("a-before", event.KindRun)
	f.submit("z-after", event.KindRun)

	got := first.keys
	for after := first.next; after != nil; {
		p := f.page(c, 10, after)
		got = append(got, p.keys...)
		after = p.next
	}
	if w := append(slices.Clone(want), "z-after"); !slices.Equal(got, w) {
		t.Fatalf("paged %v, want %v", got, w)
	}
}

// TestListsRefuseBadPaging: a limit out of 1..1000 or a cursor that is not
// one of the list's is a 400 naming the parameter, and writes nothing.
func TestListsRefuseBadPaging(t *testing.T) {
	f := newFixture(t, server.Options{})
	pagingWorld(f)
	seq := f.seq()
	bad := []struct{ query, names string }{
		{"limit=0", "limit"}, {"limit=-1", "limit"}, {"limit=1001", "limit"}, {"limit=ten", "limit"},
		{"limit=99999999999999999999", "limit"}, {"limit=1.5", "limit"},
		{"after=-1", "after"}, {"after=%20", "after"},
		{"limit=5&limit=6", "limit"},
	}
	for _, c := range listCases() {
		for _, b := range bad {
			sep := "?"
			if strings.Contains(c.path, "?") {
				sep = "&"
			}
			wantError(t, f.do("GET", c.path+sep+b.query, "", nil), http.StatusBadRequest, api.CodeBadRequest, b.names)
		}
	}
	// Each list's own cursors: a job list's is not a number, the others' are.
	for path, after := range map[string]string{
		"/v1/jobs":                         "%21%21",               // not base64url
		"/v1/jobs?state=queued":            "AA",                   // base64url of a NUL: not a job id
		"/v1/leases":                       "abc",                  // not a token
		"/v1/workers/w1/leases":            "18446744073709551616", // past 2^64−1
		"/v1/jobs/" + histJob + "/history": "1e3",
		"/v1/events":                       "x",
	} {
		sep := "?"
		if strings.Contains(path, "?") {
			sep = "&"
		}
		wantError(t, f.do("GET", path+sep+"after="+after, "", nil), http.StatusBadRequest, api.CodeBadRequest, "after")
	}
	if got := f.seq(); got != seq {
		t.Fatalf("seq %d after refused reads, want %d", got, seq)
	}
}
