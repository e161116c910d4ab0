// Package natstest starts NATS servers with JetStream inside a test
// process, for the tests of the jetstream engine and of the daemon on it:
// one server, or a cluster of n forming one JetStream cluster that can be
// stopped and started again on the same ports and disks. It owns nothing
// else; every server is shut down at the end of the test that started it.
package natstest

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leaselog/leaselog/internal/testutil"
)

// Run starts a NATS server with JetStream on a free port of the loopback
// interface, stopped at the end of the test.
func Run(t testing.TB) *server.Server {
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

// StartCluster starts n NATS servers forming one JetStream cluster, and
// waits until its meta leader has every peer.
func StartCluster(t testing.TB, n int) []*server.Server {
	t.Helper()
	return NewCluster(t, n).Start(t)
}

// Cluster is the options of n NATS servers forming one JetStream cluster,
// fixed (ports, store directories) so that it can be started again.
type Cluster []*server.Options

// NewCluster fixes the options of a cluster of n servers on loopback ports
// free now, each with its own store directory.
func NewCluster(t testing.TB, n int) Cluster {
	t.Helper()
	ports := make([]int, n)
	for i := range ports {
		ports[i] = freePort(t)
	}
	var routes []string
	for _, p := range ports {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", p))
	}
	c := make(Cluster, n)
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

// Start starts the servers (again) and waits until the meta leader has
// every peer: a stream of n replicas can be placed only then.
func (c Cluster) Start(t testing.TB) []*server.Server {
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
	for i, s := range servers {
		if !s.ReadyForConnections(10 * time.Second) {
			t.Fatalf("nats server %s (client port %d, route port %d) not ready within 10 s", c[i].ServerName, c[i].Port, c[i].Cluster.Port)
		}
	}
	testutil.Eventually(t, 20*time.Second, "a JetStream meta leader with every peer", func() bool {
		for _, s := range servers {
			if s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == len(c) {
				return true
			}
		}
		return false
	})
	return servers
}

// StreamLeader waits for the server that leads stream (of the default
// account), and returns it.
func StreamLeader(t testing.TB, servers []*server.Server, stream string) *server.Server {
	t.Helper()
	var leader *server.Server
	testutil.Eventually(t, 10*time.Second, "a leader of stream "+stream, func() bool {
		for _, s := range servers {
			if s.JetStreamIsStreamLeader(server.DEFAULT_GLOBAL_ACCOUNT, stream) {
				leader = s
				return true
			}
		}
		return false
	})
	return leader
}

// URLs returns the client URLs of servers.
func URLs(servers []*server.Server) []string {
	urls := make([]string, len(servers))
	for i, s := range servers {
		urls[i] = s.ClientURL()
	}
	return urls
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
