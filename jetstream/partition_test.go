package jetstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/testutil"
	"github.com/leaselog/leaselog/lease"
)

// natsURLs are the NATS URLs of the proxies of p.
func natsURLs(p *testutil.Partition) []string {
	var urls []string
	for _, a := range p.Addrs() {
		urls = append(urls, "nats://"+a)
	}
	return urls
}

// TestPartitionedActiveIsDeposed: on one NATS server (R1), the active
// daemon loses NATS; see partitionedActiveIsDeposed.
func TestPartitionedActiveIsDeposed(t *testing.T) {
	partitionedActiveIsDeposed(t, 1, []*server.Server{runServer(t)})
}

// TestPartitionedActiveIsDeposedOnACluster: the same on a three-node
// cluster (R3), the active daemon cut off from every node.
func TestPartitionedActiveIsDeposedOnACluster(t *testing.T) {
	c := clusterOf(t, 3)
	// A node tells its clients the other nodes' client addresses (INFO
	// connect_urls), and a client reconnects to those too: the cut daemon's
	// reached the nodes past the proxies, and kept its key. A real partition
	// cuts every address of the nodes; NoAdvertise keeps the cut whole.
	for _, o := range c.Cluster {
		o.Cluster.NoAdvertise = true
	}
	partitionedActiveIsDeposed(t, 3, c.start(t))
}

// partitionedActiveIsDeposed: the active daemon, reaching the nodes only
// through a partition, loses NATS; its leadership lapses (it deposes itself
// after the TTL), a standby connected directly takes over on a stream of
// replicas, and when the partition heals the old daemon cannot append.
func partitionedActiveIsDeposed(t *testing.T, replicas int, nodes []*server.Server) {
	ctx := context.Background()
	clock := clocktest.New(start)
	var addrs []string
	for _, n := range nodes {
		addrs = append(addrs, n.Addr().String())
	}
	p := testutil.NewPartition(t, addrs...)
	// The load's appends in flight at the cut are answered (a 503) once
	// Timeout is out: the load goes on to the daemon that took over then.
	a, err := Open(ctx, Options{
		Servers: natsURLs(p), Stream: "T", Replicas: replicas, Dir: t.TempDir(),
		Log: eventlog.Options{Logger: zerolog.Nop()}, Logger: zerolog.Nop(),
		Timeout: 1500 * time.Millisecond, Leader: &Leader{ID: "a:7420", TTL: ttl},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	campaign(t, a)
	svcA, ack, dA, running := recorded(t, a, clock)
	// The load runs on from here to after the takeover, across the
	// partition: the calls in flight at the cut are answered by the
	// partitioned daemon (its appends, once Timeout is out, with a 503), and
	// sent again to the daemon that took over once it has stopped.
	ds := newDaemons(2)
	ds.serve(0, svcA)
	load := startTraffic(t, ack.calls, ds)
	load.rounds(t, trafficRounds)
	ack.record(t, a.Log())

	b := openMemberIn(t, "b:7420", t.TempDir(), replicas, nodes...)
	defer b.Close()
	ds.standby(1)
	won := make(chan error, 1)
	go func() { won <- b.Campaign(ctx) }()

	t.Logf("the partition cut with %d calls in flight", ds.inFlight(0))
	p.SetCut(true)
	select {
	case <-a.Lost():
		ds.exit(0) // a deposed daemon stops (cmd/leaselog)
	case <-time.After(5 * time.Second):
		t.Fatal("the partitioned daemon did not depose itself")
	}
	select {
	case err := <-won:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no takeover of the partitioned daemon")
	}
	svcB, err := lease.Open(b.Log(), lease.Options{Config: svcA.Config(), Clock: clock, Logger: zerolog.Nop(), StartReason: TakeoverReason})
	if err != nil {
		t.Fatal(err)
	}
	defer svcB.Close()
	dB := ack.calls.Client("test", daemonOf(svcB))
	if _, err := dB.Heartbeat(ctx, "w1", []uint64{running}); err != nil {
		t.Fatalf("the running lease after the takeover: %v", err)
	}
	ds.serve(1, svcB)
	load.rounds(t, trafficRounds)
	load.halt()
	ack.record(t, b.Log())

	p.SetCut(false)
	if _, _, err := dA.Submit(ctx, api.Submit{ID: "late", Kind: "run"}); !errors.Is(err, lease.ErrFailed) {
		t.Fatalf("the deposed daemon's submit after the partition healed: %v, want lease.ErrFailed", err)
	}
	// Its log failed when it was deposed (ErrDeposed), or before, on a batch
	// of the load the cut left unacknowledged for Timeout: whichever came
	// first, it appends nothing more.
	if err := a.Log().Err(); !errors.Is(err, eventlog.ErrFailed) {
		t.Fatalf("the deposed daemon's log: %v, want eventlog.ErrFailed", err)
	}
	if _, err := dB.Job(ctx, "late"); !errors.Is(err, lease.ErrNotFound) {
		t.Fatalf("the deposed daemon's job in the log: %v, want lease.ErrNotFound", err)
	}
	checkFinished(t, ack, replicas, nodes, b)
}

// TestCutOffActiveStandsDownBeforeItsKeyExpires: an active daemon whose
// refreshes NATS never answers (cut off, its writes lost or held) deposes
// itself — its service refusing every call — before NATS can expire its key
// and a standby win it: its deadline counts from when its last write of the
// key was sent, and NATS stored that write later. The key's last write is
// read straight from the server, past the cut.
func TestCutOffActiveStandsDownBeforeItsKeyExpires(t *testing.T) {
	const keyTTL = 2 * time.Second // a tenth of it is the margin for a late timer
	ns := runServer(t)
	ctx := context.Background()
	p := testutil.NewPartition(t, ns.Addr().String())
	a, err := Open(ctx, Options{
		Servers: natsURLs(p), Stream: "T", Replicas: 1, Dir: t.TempDir(),
		Log: eventlog.Options{Logger: zerolog.Nop()}, Logger: zerolog.Nop(),
		Timeout: 10 * time.Second, Leader: &Leader{ID: "a:7420", TTL: keyTTL},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	campaign(t, a)
	svcA := service(t, a, clocktest.New(start))
	direct := openMember(t, "watcher", ns) // reads the key without the cut
	defer direct.Close()
	kv, err := direct.leaderBucket(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.SetCut(true)
	select {
	case <-a.Lost():
	case <-time.After(2 * keyTTL):
		t.Fatal("the cut-off daemon never stood down")
	}
	deposed := time.Now()
	e, err := kv.Get(ctx, leaderKey)
	if err != nil {
		t.Fatalf("the key, read past the cut just after the daemon stood down: %v (expired already)", err)
	}
	if expires := e.Created().Add(keyTTL); !deposed.Before(expires) {
		t.Fatalf("stood down at %v, the key's last write (%v) expires at %v: a standby could have led first",
			deposed.Format(time.StampMilli), e.Created().Format(time.StampMilli), expires.Format(time.StampMilli))
	}
	if err := svcA.Err(); !errors.Is(err, lease.ErrFailed) {
		t.Fatalf("the deposed daemon's service: %v, want lease.ErrFailed", err)
	}
}
