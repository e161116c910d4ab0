package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leaselog/leaselog/internal/testkit/natstest"
)

// clusterGrace is the grace of jetStreamClusterText: the least a replicated
// stream can honour (minReplicatedGrace, rounded up), where jetStreamText's
// 2 s is refused.
const clusterGrace = 27 * time.Second

// jetStreamClusterText is jetStreamText on every node of a NATS cluster,
// the stream replicated on three, with grace clusterGrace.
func jetStreamClusterText(t *testing.T, nodes []*server.Server) string {
	t.Helper()
	one := fmt.Sprintf("servers = [%q]", nodes[0].ClientURL())
	text := jetStreamText(nodes[0].ClientURL())
	if strings.Count(text, one) != 1 || strings.Count(text, "replicas = 1\n") != 1 {
		t.Fatalf("jetStreamText no longer has one %q and one replicas = 1:\n%s", one, text)
	}
	var urls []string
	for _, u := range natstest.URLs(nodes) {
		urls = append(urls, fmt.Sprintf("%q", u))
	}
	text = strings.Replace(text, one, "servers = ["+strings.Join(urls, ", ")+"]", 1)
	text = strings.Replace(text, "replicas = 1\n", "replicas = 3\n", 1)
	timing := fmt.Sprintf("grace_seconds = %v\ntoleration_seconds = %v\n", clusterGrace.Seconds(), clusterGrace.Seconds()+3)
	if strings.Count(text, jetStreamTiming) != 1 {
		t.Fatalf("jetStreamText no longer has one %q:\n%s", jetStreamTiming, text)
	}
	return strings.Replace(text, jetStreamTiming, timing, 1)
}

// TestJetStreamClusterWorkerFollowsStandby: TestJetStreamWorkerFollowsStandby
// on three NATS nodes embedded in the test (R3), the node leading the stream
// shut down the moment the active daemon is SIGKILLed: the standby takes
// over within grace on the two nodes left, the worker's lease heartbeats to
// it, nothing expires, and the job is reported once, succeeded.
func TestJetStreamClusterWorkerFollowsStandby(t *testing.T) {
	nodes := natstest.StartCluster(t, 3)
	workerFollowsStandby(t, jetStreamClusterText(t, nodes), clusterGrace, nodes)
}

// TestJetStreamClusterTakeoverAfterSIGKILL: TestJetStreamTakeoverAfterSIGKILL
// on three NATS nodes embedded in the test (R3), the node leading the stream
// shut down the moment the active daemon is SIGKILLed: the standby takes
// over within grace on the two nodes left, the lease heartbeats on, nothing
// expires, and the killed daemon, started again, waits as a standby.
func TestJetStreamClusterTakeoverAfterSIGKILL(t *testing.T) {
	nodes := natstest.StartCluster(t, 3)
	takeoverAfterSIGKILL(t, jetStreamClusterText(t, nodes), clusterGrace, nodes)
}
