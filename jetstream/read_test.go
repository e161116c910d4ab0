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
	"github.com/leaselog/leaselog/internal/natstest"
)

// TestReadWithoutAStreamLeader: a catch-up's read of the stream while the
// stream has no leader (two of its three nodes down) fails within its bound,
// pullAttempts requests of an attempt each, instead of retrying without end
// as an ordered consumer's fetch did; a cancelled context ends it at once.
// Its caller (a new leader holding the key) is the one that tries again.
func TestReadWithoutAStreamLeader(t *testing.T) {
	nodes := runCluster(t, 3)
	s, err := Open(context.Background(), Options{
		Servers: natstest.URLs(nodes), Stream: "T", Replicas: 3, Dir: t.TempDir(),
		Log: eventlog.Options{Logger: zerolog.Nop()}, Logger: zerolog.Nop(),
		Timeout: 2 * time.Second, // an attempt: 400 ms
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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

	handed := 0
	fn := func(uint64, []byte) error { handed++; return nil }
	began := time.Now()
	err = s.pull(context.Background(), 1, 3, fn)
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
