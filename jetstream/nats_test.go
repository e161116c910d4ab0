package jetstream

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leaselog/leaselog/internal/testutil"
)

// runServer starts an in-process NATS server with JetStream on a free port
// of the loopback interface, stopped at the end of the test.
func runServer(t testing.TB) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{
		Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	t.Cleanup(s.Shutdown)
	return s
}

// runCluster starts n in-process NATS servers forming one JetStream cluster,
// and waits until its meta leader has every peer.
func runCluster(t testing.TB, n int) []*server.Server {
	t.Helper()
	return clusterOf(t, n).start(t)
}

// cluster is the options of n NATS servers forming one JetStream cluster,
// fixed (ports, store directories) so that it can be started again.
type cluster []*server.Options

func clusterOf(t testing.TB, n int) cluster {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = freePort(t)
	}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	c := make(cluster, n)
	for i := range c {
		c[i] = &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: freePort(t),
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "leaselog", Host: "127.0.0.1", Port: ports[i]},
			Routes:  server.RoutesFromStr(strings.Join(routes, ",")),
		}
	}
	return c
}

// start starts the servers (again) and waits until the meta leader has
// every peer: a stream of n replicas can be placed only then.
func (c cluster) start(t testing.TB) []*server.Server {
	t.Helper()
	servers := make([]*server.Server, len(c))
	for i, o := range c {
		s, err := server.NewServer(o.Clone())
		if err != nil {
			t.Fatal(err)
		}
		s.Start()
		t.Cleanup(s.Shutdown)
		servers[i] = s
	}
	for _, s := range servers {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatal("nats server not ready")
		}
	}
	waitFor(t, 20*time.Second, "a JetStream meta leader with every peer", func() bool {
		for _, s := range servers {
			if s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == len(c) {
				return true
			}
		}
		return false
	})
	return servers
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// waitFor polls cond until it holds, or fails the test after d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, d, what, cond)
}
