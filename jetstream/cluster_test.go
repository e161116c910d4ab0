package jetstream

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/clocktest"
)

// TestStreamLeaderLost: on a three-node cluster with three replicas, the
// node that leads the stream is shut down; the daemon's appends go on
// (the batch in flight is republished under its dedup id once a new leader
// is elected), and a daemon that opens on the two nodes left finds every
// acknowledged event.
func TestStreamLeaderLost(t *testing.T) {
	nodes := runCluster(t, 3)
	clock := clocktest.New(start)
	s := open(t, t.TempDir(), 3, nodes...)
	svc := service(t, s, clock)
	running := life(t, svc, "j")

	var leader *server.Server
	waitFor(t, 10*time.Second, "a stream leader", func() bool {
		for _, n := range nodes {
			if n.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, "T") {
				leader = n
				return true
			}
		}
		return false
	})
	leader.Shutdown()
	rest := slices.DeleteFunc(slices.Clone(nodes), func(n *server.Server) bool { return n == leader })

	ctx := context.Background()
	for _, id := range []string{"after1", "after2"} {
		if _, _, err := svc.Submit(ctx, id, event.KindRun, nil); err != nil {
			t.Fatalf("submit %s after the stream leader went: %v", id, err)
		}
	}
	if _, err := svc.Heartbeat(ctx, "w1", []uint64{running}); err != nil {
		t.Fatalf("heartbeat after the stream leader went: %v", err)
	}
	want := dump(t, s.Log())
	closeAll(t, svc, s)

	other := open(t, t.TempDir(), 3, rest...)
	defer other.Close()
	if got := dump(t, other.Log()); !slices.Equal(got, want) {
		t.Fatalf("the stream on the nodes left holds\n%v\nwant what was acknowledged\n%v", got, want)
	}
}
