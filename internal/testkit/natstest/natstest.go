// Package natstest starts NATS servers with JetStream inside a test
// process, for the tests of the jetstream engine and of the daemon on it:
// one server, or a cluster of n forming one JetStream cluster that can be
// stopped and started again on the same ports and disks. It owns nothing
// else; every server is shut down at the end of the test that started it.
//
// A port picked free, closed, then bound by the server can be taken
// between by another test process (CI runs packages in parallel). So the
// system chooses the client ports when a server first starts; a cluster's
// route ports must be known before (every server routes to them), and its
// first start is done again on new ones when one is taken. A cluster
// started again comes back on the ports it had, trying a few times when one
// is taken; then the error says so (ErrPortTaken).
package natstest

import (
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leaselog/leaselog/internal/testkit/testutil"
)

// Run starts a NATS server with JetStream on a port of the loopback
// interface the system chooses, stopped at the end of the test.
func Run(t testing.TB) *server.Server {
	t.Helper()
	s, err := start(&server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true, StoreDir: t.TempDir(),
		NoLog: true, NoSigs: true,
	})
	if err != nil {
		t.Fatal(err)
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

// Cluster is the options of n NATS servers forming one JetStream cluster:
// their store directories, and, from their first start on, their ports, so
// that it can be started again as the same cluster.
type Cluster []*server.Options

// NewCluster makes the options of a cluster of n servers on the loopback
// interface, each with its own store directory; the ports are chosen at
// its first start.
func NewCluster(t testing.TB, n int) Cluster {
	t.Helper()
	c := make(Cluster, n)
	for i := range c {
		c[i] = &server.Options{
			ServerName: fmt.Sprintf("n%d", i+1), Host: "127.0.0.1", Port: server.RANDOM_PORT,
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "leaselog", Host: "127.0.0.1", Port: server.RANDOM_PORT},
		}
	}
	return c
}

// Start starts the servers (again) and waits until the meta leader has
// every peer: a stream of n replicas can be placed only then. Each server is
// shut down at the end of the test.
func (c Cluster) Start(t testing.TB) []*server.Server {
	t.Helper()
	servers, err := c.start(restartTries)
	for _, s := range servers {
		t.Cleanup(s.Shutdown)
	}
	if err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 20*time.Second, "a JetStream meta leader with every peer", func() bool {
		return metaFormed(servers)
	})
	return servers
}

// metaFormed tells whether one of servers leads the JetStream meta group
// with all of them as peers.
func metaFormed(servers []*server.Server) bool {
	for _, s := range servers {
		if s.JetStreamIsLeader() && len(s.JetStreamClusterPeers()) == len(servers) {
			return true
		}
	}
	return false
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
