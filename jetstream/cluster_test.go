package jetstream

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/natstest"
	"github.com/leaselog/leaselog/lease"
)

// TestStreamLeaderLost: on a three-node cluster with three replicas, the
// node that leads the stream is shut down; the daemon's appends go on
// (the batch in flight is republished under its dedup id once a new leader
// is elected), and a daemon that opens on the two nodes left finds every
// acknowledged event.
func TestStreamLeaderLost(t *testing.T) {
	nodes := runCluster(t, 3)
	clock := clocktest.New(start)
	// A batch in flight when the leader goes waits an attempt (Timeout/5)
	// for its ack before it is asked for: a second, not the default's two.
	s := openFor(t, t.TempDir(), 3, 5*time.Second, nodes...)
	svc, ack, d, running := recorded(t, s, clock)
	// The load runs on from here to after the leader's loss, across it.
	ds := newDaemons(1)
	ds.serve(0, svc)
	load := startTraffic(t, ack.calls, ds)
	load.rounds(t, trafficRounds)
	ack.record(t, s.Log())

	leader := streamLeader(t, nodes)
	t.Logf("the stream's leader shut down with %d calls in flight", ds.inFlight(0))
	leader.Shutdown()
	rest := without(nodes, leader)

	ctx := context.Background()
	for _, id := range []string{"after1", "after2"} {
		if _, _, err := d.Submit(ctx, api.Submit{ID: id, Kind: "run"}); err != nil {
			t.Fatalf("submit %s after the stream leader went: %v", id, err)
		}
	}
	load.rounds(t, trafficRounds)
	load.halt()
	if _, err := d.Heartbeat(ctx, "w1", []uint64{running}); err != nil {
		t.Fatalf("heartbeat after the stream leader went: %v", err)
	}
	ack.record(t, s.Log())
	want := dump(t, s.Log())
	closeAll(t, svc, s)

	other := open(t, t.TempDir(), 3, rest...)
	defer other.Close()
	if got := dump(t, other.Log()); !slices.Equal(got, want) {
		t.Fatalf("the stream on the nodes left holds\n%v\nwant what was acknowledged\n%v", got, want)
	}
	checkFinished(t, ack, 3, rest, other)
}

// TestRestartEverything: an active daemon and a standby on a three-node
// cluster; then everything stops (the active daemon as by a SIGKILL, its
// key left behind) and starts again on the same disks. One of the two
// daemons leads again, with every acknowledged event, and the lease that ran
// still heartbeats: the outage is absence counted against nobody.
func TestRestartEverything(t *testing.T) {
	c := clusterOf(t, 3)
	nodes := c.start(t)
	clock := clocktest.New(start)
	ctx := context.Background()
	dirA, dirB := t.TempDir(), t.TempDir()
	a := openMemberIn(t, "a:7420", dirA, 3, nodes...)
	campaign(t, a)
	svcA, ack, _, running := recorded(t, a, clock)
	// The load runs on from here to after the restart, across the outage.
	ds := newDaemons(2)
	ds.serve(0, svcA)
	load := startTraffic(t, ack.calls, ds)
	load.rounds(t, trafficRounds)
	b := openMemberIn(t, "b:7420", dirB, 3, nodes...)
	ds.standby(1)
	standby, stopStandby := context.WithCancel(ctx)
	won := make(chan error, 1)
	go func() { won <- b.Campaign(standby) }()
	load.rounds(t, 1) // the standby tails the stream under the load

	ds.kill(t, 0) // the calls in flight there never answered
	ack.record(t, a.Log())
	waitFor(t, 10*time.Second, "the standby's cache to reach the active daemon's", func() bool {
		return b.Log().DurableSeq() == a.Log().LastSeq()
	})
	want := dump(t, a.Log())
	a.crash() // the key stays until its TTL
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	stopStandby()
	if err := <-won; !errors.Is(err, context.Canceled) {
		t.Fatalf("the standby's campaign, stopped: %v", err)
	}
	ds.exit(1)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		n.Shutdown()
	}

	nodes = c.start(t)
	// The stream needs a leader of its own again before anyone can open it
	// (a daemon that tries sooner fails its start, and is started again).
	waitFor(t, 30*time.Second, "a stream leader after the restart", func() bool {
		return slices.ContainsFunc(nodes, func(n *server.Server) bool {
			return n.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, "T")
		})
	})
	clock.Advance(time.Minute) // the outage
	a = openMemberIn(t, "a:7420", dirA, 3, nodes...)
	defer a.Close()
	b = openMemberIn(t, "b:7420", dirB, 3, nodes...)
	defer b.Close()
	leader := make(chan *Store, 2)
	campaignCtx, stop := context.WithCancel(ctx)
	defer stop()
	failed := make(chan error, 2)
	for _, s := range []*Store{a, b} {
		go func() {
			if err := s.Campaign(campaignCtx); err != nil {
				failed <- err
				return
			}
			leader <- s
		}()
	}
	var l *Store
	select {
	case l = <-leader:
	case err := <-failed:
		t.Fatalf("a daemon's campaign after the restart: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("no daemon leads after the restart")
	}
	if got := dump(t, l.Log()); len(got) < len(want) || !slices.Equal(got[:len(want)], want[:len(want)]) {
		t.Fatalf("after the restart the leader holds\n%v\nwant first every acknowledged event\n%v", got, want)
	}
	svc := service(t, l, clock)
	defer svc.Close()
	if err := svc.Sweep(); err != nil {
		t.Fatal(err)
	}
	if _, err := ack.calls.Client("test", daemonOf(svc)).Heartbeat(ctx, "w1", []uint64{running}); err != nil {
		t.Fatalf("the running lease after restarting everything: %v", err)
	}
	if l == a {
		ds.serve(0, svc)
		ds.standby(1)
	} else {
		ds.standby(0)
		ds.serve(1, svc)
	}
	load.rounds(t, trafficRounds)
	load.halt()
	ack.record(t, l.Log())
	checkFinished(t, ack, 3, nodes, a, b)
}

// TestTakeoverWhileTheStreamLeaderIsLost: on a three-node cluster, the
// active daemon dies (its key left to expire) and the node leading the
// stream goes down with it. The standby takes over within grace on the two
// nodes left; the running lease heartbeats on; the old daemon cannot append.
func TestTakeoverWhileTheStreamLeaderIsLost(t *testing.T) {
	nodes := runCluster(t, 3)
	ctx := context.Background()
	clock := clocktest.New(start)
	a := openMemberIn(t, "a:7420", t.TempDir(), 3, nodes...)
	defer a.Close()
	campaign(t, a)
	svcA, ack, dA, running := recorded(t, a, clock)
	// The load runs on from here to after the takeover, across the kill.
	ds := newDaemons(2)
	ds.serve(0, svcA)
	load := startTraffic(t, ack.calls, ds)
	load.rounds(t, trafficRounds)
	ack.record(t, a.Log())
	b := openMemberIn(t, "b:7420", t.TempDir(), 3, nodes...)
	defer b.Close()
	ds.standby(1)
	won := make(chan error, 1)
	go func() { won <- b.Campaign(ctx) }()
	seq := a.Log().LastSeq()
	waitFor(t, 10*time.Second, "the standby's cache to reach the active daemon's", func() bool {
		return b.Log().DurableSeq() >= seq
	})
	waitFor(t, 10*time.Second, "the second daemon to wait as a standby", b.TookOver)

	leader := streamLeader(t, nodes)
	ds.kill(t, 0) // the calls in flight there never answered
	a.crash()
	leader.Shutdown()
	ack.record(t, a.Log())
	svcB := takeOver(t, won, b, clock, "the kill of the daemon and of the stream's leader")
	defer svcB.Close()
	if err := svcB.Sweep(); err != nil {
		t.Fatal(err)
	}
	if _, err := ack.calls.Client("test", daemonOf(svcB)).Heartbeat(ctx, "w1", []uint64{running}); err != nil {
		t.Fatalf("the running lease after the takeover: %v", err)
	}
	ds.serve(1, svcB)
	load.rounds(t, trafficRounds)
	load.halt()
	ack.record(t, b.Log())
	if _, _, err := dA.Submit(ctx, api.Submit{ID: "zombie", Kind: "run"}); !errors.Is(err, lease.ErrFailed) {
		t.Fatalf("the deposed daemon's submit: %v, want lease.ErrFailed", err)
	}
	if err := a.Log().Err(); !errors.Is(err, ErrDeposed) {
		t.Fatalf("the deposed daemon's log: %v, want ErrDeposed", err)
	}
	checkFinished(t, ack, 3, without(nodes, leader), b)
}

// streamLeader waits for the node that leads stream T, and returns it.
func streamLeader(t *testing.T, nodes []*server.Server) *server.Server {
	t.Helper()
	return natstest.StreamLeader(t, nodes, "T")
}
