package jetstream

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leaselog/leaselog/internal/testkit/natstest"
	"github.com/leaselog/leaselog/internal/testkit/testutil"
)

// The NATS servers of these tests are internal/testkit/natstest's, shared with the
// daemon's tests (cmd/leaselog); these names keep the tests' own words.

// runServer starts an in-process NATS server with JetStream on a free port
// of the loopback interface, stopped at the end of the test.
func runServer(t testing.TB) *server.Server {
	t.Helper()
	return natstest.Run(t)
}

// runCluster starts n in-process NATS servers forming one JetStream cluster,
// and waits until its meta leader has every peer.
func runCluster(t testing.TB, n int) []*server.Server {
	t.Helper()
	return natstest.StartCluster(t, n)
}

// cluster is the options of n NATS servers forming one JetStream cluster,
// fixed (ports, store directories) so that it can be started again.
type cluster struct{ natstest.Cluster }

func clusterOf(t testing.TB, n int) cluster {
	t.Helper()
	return cluster{natstest.NewCluster(t, n)}
}

// start starts the servers (again) and waits until the meta leader has
// every peer: a stream of n replicas can be placed only then.
func (c cluster) start(t testing.TB) []*server.Server {
	t.Helper()
	return c.Start(t)
}

// waitFor polls cond until it holds, or fails the test after d.
func waitFor(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	testutil.Eventually(t, d, what, cond)
}
