package server_test

import (
	"net/http"
	"net/url"
	"slices"
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/ops"
	"github.com/leaselog/leaselog/server"
)

// GET /v1/workers lists every worker by id, a page at a time, reachable or
// not, with the daemon's timing.
func TestListWorkers(t *testing.T) {
	f := newFixture(t, server.Options{})
	held := map[string][]uint64{}
	for _, w := range []string{"w3", "w1", "w2"} {
		f.submit("j-"+w, event.KindRun)
		g := decode[api.Grants](t, f.do("POST", "/v1/workers/"+w+"/acquire", "", api.Acquire{Max: 1}), http.StatusOK)
		held[w] = []uint64{g.Leases[0].Lease}
	}
	// w1 and w3 keep beating; w2 falls silent past grace.
	grace := leasetest.Timing().Grace
	for range int(grace/time.Second) + 1 {
		f.clock.Advance(time.Second)
		for _, w := range []string{"w1", "w3"} {
			decode[api.HeartbeatReply](t, f.do("POST", "/v1/workers/"+w+"/heartbeat", "", api.Heartbeat{Leases: held[w]}), http.StatusOK)
		}
		f.must(f.svc.Sweep())
	}

	first := decode[api.Workers](t, f.do("GET", "/v1/workers?limit=2", "", nil), http.StatusOK)
	if ids := workerIDs(first); !slices.Equal(ids, []string{"w1", "w2"}) || first.Next == "" {
		t.Fatalf("first page %v next %q: want w1, w2 and a next", ids, first.Next)
	}
	if first.Workers[0].Reachable != true || first.Workers[1].Reachable != false || first.Workers[1].LiveLeases != 1 {
		t.Errorf("first page %+v: want w1 reachable, w2 not, holding its lease", first.Workers)
	}
	if want := ops.TimingOf(leasetest.Timing()); first.Timing != want {
		t.Errorf("timing %+v, want %+v", first.Timing, want)
	}
	last := decode[api.Workers](t, f.do("GET", "/v1/workers?limit=2&after="+url.QueryEscape(first.Next), "", nil), http.StatusOK)
	if ids := workerIDs(last); !slices.Equal(ids, []string{"w3"}) || last.Next != "" {
		t.Fatalf("last page %v next %q: want w3 and no next", ids, last.Next)
	}

	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "after=%25%25", "after=w1", "state=x"} {
		decode[api.ErrorBody](t, f.do("GET", "/v1/workers?"+q, "", nil), http.StatusBadRequest)
	}
}

func workerIDs(ws api.Workers) []string {
	var out []string
	for _, w := range ws.Workers {
		out = append(out, w.ID)
	}
	return out
}
