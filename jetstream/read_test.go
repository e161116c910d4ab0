package jetstream

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/natstest"
	"github.com/leaselog/leaselog/replay"
)

// TestReadWithoutAStreamLeader: a catch-up's read of the stream while the
// stream has no leader (two of its three nodes down) fails within its bound,
// pullAttempts requests of an attempt each, instead of retrying without end
// as an ordered consumer's fetch did; a cancelled context ends it at once.
// Its caller (a new leader holding the key) is the one that tries again.
func TestReadWithoutAStreamLeader(t *testing.T) {
	s := leaderless(t)
	s.opts.Timeout = 2 * time.Second // an attempt: 400 ms
	handed := 0
	fn := func(uint64, []byte) error { handed++; return nil }
	began := time.Now()
	err := s.pull(context.Background(), 1, 3, fn)
	took := time.Since(began)
	if err == nil {
		t.Fatalf("a read with no stream leader handed %d messages and no error", handed)
	}
	if bound := pullAttempts * (s.attempt() + s.attempt()/4); took > 2*bound {
		t.Fatalf("a read with no stream leader failed after %v, beyond twice its bound (%v): %v", took, bound, err)
	}
	t.Logf("a read with no stream leader fails after %v: %v", took.Round(time.Millisecond), err)

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	began = time.Now()
	if err := s.pull(ctx, 1, 3, fn); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled read: %v, want context.Canceled", err)
	}
	if took := time.Since(began); took > s.attempt() {
		t.Fatalf("a cancelled read returned after %v, more than an attempt (%v)", took, s.attempt())
	}
}

// TestTailWithoutAStreamLeader: a standby's tail returns when its window
// ends, even with a read in flight that no stream leader will answer (it
// would otherwise hold the campaign for an attempt, past the TTL, and
// delay the takeover by that), and without an error: the campaign goes on.
func TestTailWithoutAStreamLeader(t *testing.T) {
	s := leaderless(t) // an attempt: 2 s
	table, _, err := replay.Rebuild(s.Log(), zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	const window = 300 * time.Millisecond
	began := time.Now()
	err = s.tail(context.Background(), table, window)
	if took := time.Since(began); err != nil || took > window+s.attempt()/4 {
		t.Fatalf("a tail of %v with no stream leader: %v after %v; want nil within %v", window, err, took, window+s.attempt()/4)
	}
}

// leaderless returns a store on a three-node cluster (R3) holding three
// batches, two of its nodes then shut down: the stream has no leader.
func leaderless(t *testing.T) *Store {
	t.Helper()
	nodes := runCluster(t, 3)
	s, err := Open(context.Background(), Options{
		Servers: natstest.URLs(nodes), Stream: "T", Replicas: 3, Dir: t.TempDir(),
		Log: eventlog.Options{Logger: zerolog.Nop()}, Logger: zerolog.Nop(), Timeout: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	for i := range 3 {
		e := event.Event{Type: event.TypeQueued, ID: ulid.Make(), Time: start.UnixNano(),
			Job: fmt.Sprintf("j%d", i), Kind: event.KindRun}
		if err := s.Log().Append([]event.Event{e}); err != nil {
			t.Fatal(err)
		}
	}
	leader := streamLeader(t, nodes)
	without(nodes, leader)[0].Shutdown()
	leader.Shutdown() // one node of three left: no quorum, no stream leader
	return s
}
