package natstest

import (
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/leaselog/leaselog/internal/testkit/testutil"
)

// ports returns the client and route ports the servers listen on.
func ports(servers []*server.Server) [][2]int {
	var ps [][2]int
	for _, s := range servers {
		ps = append(ps, [2]int{s.Addr().(*net.TCPAddr).Port, s.ClusterAddr().Port})
	}
	return ps
}

// meshed waits until every server has a route to every other.
func meshed(t *testing.T, servers []*server.Server) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, "a route from every server to every other", func() bool {
		for _, s := range servers {
			rz, err := s.Routez(&server.RoutezOptions{})
			if err != nil {
				t.Fatal(err)
			}
			remotes := map[string]bool{}
			for _, r := range rz.Routes {
				remotes[r.RemoteName] = true
			}
			if len(remotes) != len(servers)-1 {
				return false
			}
		}
		return true
	})
}

// take holds a port of the loopback interface the system chooses, until the
// end of the test.
func take(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l.Addr().(*net.TCPAddr).Port
}

// TestClusterStartsAgainOnItsPorts: a cluster on ports the system chose
// forms a full mesh and one meta group (Start waits for it). Stopped, it
// cannot start again while a port it had is taken (ErrPortTaken, after
// tries); the port let go, it starts again on the same ports, a full mesh
// and one meta group again.
func TestClusterStartsAgainOnItsPorts(t *testing.T) {
	c := NewCluster(t, 3)
	servers := c.Start(t)
	meshed(t, servers)
	before := ports(servers)
	for _, s := range servers {
		s.Shutdown()
	}

	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", c[1].Port))
	if err != nil {
		t.Fatal(err)
	}
	if started, err := c.start(2); !errors.Is(err, ErrPortTaken) || !errors.Is(err, syscall.EADDRINUSE) || started != nil {
		l.Close()
		t.Fatalf("start with the client port %d of n2 taken: %v, %v; want ErrPortTaken, EADDRINUSE", c[1].Port, started, err)
	}
	l.Close()

	servers = c.Start(t)
	meshed(t, servers)
	if after := ports(servers); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Fatalf("started again on ports (client, route) %v, want %v", after, before)
	}
}

// TestStartOnATakenPort: a server whose client or route port is taken fails
// its start at once with ErrPortTaken and the system's error (not after the
// readiness bound), having tried tries times.
func TestStartOnATakenPort(t *testing.T) {
	for _, which := range []string{"client", "route"} {
		t.Run(which, func(t *testing.T) {
			taken := take(t)
			opts := &server.Options{Host: "127.0.0.1", Port: taken, NoLog: true, NoSigs: true,
				Cluster: server.ClusterOpts{Name: "t", Host: "127.0.0.1", Port: server.RANDOM_PORT}}
			if which == "route" {
				opts.Port, opts.Cluster.Port = server.RANDOM_PORT, taken
			}
			began := time.Now()
			s, err := startAgain(opts, 2)
			if !errors.Is(err, ErrPortTaken) || !errors.Is(err, syscall.EADDRINUSE) || s != nil {
				t.Fatalf("start on the taken %s port %d: %v, %v; want ErrPortTaken, EADDRINUSE", which, taken, s, err)
			}
			if took := time.Since(began); took >= readyWithin {
				t.Fatalf("the start failed after %v, the readiness bound (%v): the fatal error went unseen", took, readyWithin)
			}
			t.Log(err)
		})
	}
}

// TestFirstStartOnATakenRoutePort: a cluster's first start that finds a
// route port it picked taken starts again on new ones, with empty stores:
// one meta group of every server; when every set it picks has one taken,
// it fails with ErrPortTaken.
func TestFirstStartOnATakenRoutePort(t *testing.T) {
	taken := take(t)
	picks := 0
	takenFirst := func(n int) ([]int, error) {
		picks++
		ports, err := reservePorts(n)
		if picks == 1 {
			ports[n-1] = taken
		}
		return ports, err
	}
	c := NewCluster(t, 3)
	servers, err := c.startFirst(restartTries, takenFirst)
	for _, s := range servers {
		t.Cleanup(s.Shutdown)
	}
	if err != nil || picks != 2 {
		t.Fatalf("first start with a route port taken: %v after %d picks of ports, want a start on the second", err, picks)
	}
	if p := servers[2].ClusterAddr().Port; p == taken || c[2].Cluster.Port != p {
		t.Fatalf("n3 routes on port %d (options %d), taken %d", p, c[2].Cluster.Port, taken)
	}
	meshed(t, servers)
	testutil.Eventually(t, 20*time.Second, "a JetStream meta leader with every peer", func() bool {
		return metaFormed(servers)
	})

	alwaysTaken := func(n int) ([]int, error) {
		ports, err := reservePorts(n)
		ports[0] = taken
		return ports, err
	}
	if servers, err := NewCluster(t, 3).startFirst(2, alwaysTaken); !errors.Is(err, ErrPortTaken) || servers != nil {
		t.Fatalf("first start with a route port taken on every try: %v, %v; want ErrPortTaken", servers, err)
	}
}

// TestRun: Run's server listens on a port the system chose, with JetStream.
func TestRun(t *testing.T) {
	s := Run(t)
	if s.Addr() == nil || !s.JetStreamEnabled() {
		t.Fatalf("Run's server: listening on %v, JetStream %v", s.Addr(), s.JetStreamEnabled())
	}
}
