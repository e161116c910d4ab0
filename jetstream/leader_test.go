package jetstream

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
)

// ttl is the leadership TTL of the tests: long enough that a refresh (every
// TTL/4) is not missed on a loaded machine under the race detector.
const ttl = time.Second

// openMember opens a store that campaigns for the leadership as id.
func openMember(t testing.TB, id string, ns *server.Server) *Store {
	t.Helper()
	return openMemberIn(t, id, t.TempDir(), 1, ns)
}

// openMemberIn is openMember with its cache in dir, on a stream of replicas
// on servers.
func openMemberIn(t testing.TB, id, dir string, replicas int, servers ...*server.Server) *Store {
	t.Helper()
	var urls []string
	for _, ns := range servers {
		urls = append(urls, ns.ClientURL())
	}
	s, err := Open(context.Background(), Options{
		Servers: urls, Stream: "T", Replicas: replicas, Dir: dir,
		Log: eventlog.Options{Logger: zerolog.Nop()}, Logger: zerolog.Nop(),
		Timeout: 10 * time.Second, Leader: &Leader{ID: id, TTL: ttl},
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// crash stops the leader's refresh as a SIGKILL would: the key is left to
// expire, nothing is closed.
func (s *Store) crash() {
	s.mu.Lock()
	stop := s.mu.stopLeading
	s.mu.stopLeading = nil
	s.mu.Unlock()
	stop(false)
}

func campaign(t testing.TB, s *Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := s.Campaign(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestStandbyTakesOverAfterTheActiveDies(t *testing.T) {
	ns := runServer(t)
	ctx := context.Background()
	clock := clocktest.New(start)
	early := openMember(t, "a:7420", ns)
	if err := early.Log().Append([]event.Event{{Type: event.TypeDaemonStarted, Time: 1}}); err == nil {
		t.Fatal("a daemon appended before it won the leadership")
	}
	_ = early.Close() // the refused append failed that log
	a := openMember(t, "a:7420", ns)
	campaign(t, a)
	svcA, ack, dA, running := recorded(t, a, clock)

	b := openMember(t, "b:7420", ns)
	defer b.Close()
	won := make(chan error, 1)
	go func() { won <- b.Campaign(ctx) }()
	if _, _, err := dA.Submit(ctx, api.Submit{ID: "x", Kind: "run"}); err != nil {
		t.Fatal(err)
	}
	// The load runs on from here to after the takeover, across the kill.
	ds := newDaemons(2)
	ds.serve(0, svcA)
	ds.standby(1)
	load := startTraffic(t, ack.calls, ds)
	load.rounds(t, trafficRounds)
	ack.record(t, a.Log())
	seq := a.Log().LastSeq()
	waitFor(t, 5*time.Second, "the standby's cache to reach the active daemon's", func() bool {
		return b.Log().DurableSeq() >= seq
	})
	waitFor(t, 5*time.Second, "the second daemon to wait as a standby", b.TookOver)
	select {
	case err := <-won:
		t.Fatalf("the standby took over from a live daemon: %v", err)
	default:
	}
	if id, err := b.Active(ctx); err != nil || id != "a:7420" {
		t.Fatalf("the standby sees %q as active (%v), want a:7420", id, err)
	}

	ds.kill(t, 0) // the calls in flight there never answered
	a.crash()
	ack.record(t, a.Log())
	// The takeover comes long after the last event: the gap is absence
	// counted against nobody.
	grace := leasetest.Timing().Grace
	svcB := takeOver(t, won, b, clock, "the active daemon's death")
	defer svcB.Close()
	dB := ack.calls.Client("test", daemonOf(svcB))
	took, err := b.Log().Get(b.Log().LastSeq())
	if err != nil || took.Type != event.TypeDaemonStarted || took.Reason != TakeoverReason || took.Gap < int64(2*grace) {
		t.Fatalf("the takeover recorded %v (%v), want daemon.started reason=takeover with a gap of at least %v", took.String(), err, 2*grace)
	}
	if err := svcB.Sweep(); err != nil {
		t.Fatal(err)
	}
	if _, err := dB.Heartbeat(ctx, "w1", []uint64{running}); err != nil {
		t.Fatalf("the running lease after the takeover: %v", err)
	}
	ds.serve(1, svcB)
	load.rounds(t, trafficRounds)
	load.halt()
	ack.record(t, b.Log())
	expired := 0
	if _, err := svcB.Events(lease.EventFilter{Type: event.TypeExpired}, 0, func(*event.Event) error { expired++; return nil }); err != nil {
		t.Fatal(err)
	}
	if expired != 0 {
		t.Fatalf("%d leases expired across the takeover", expired)
	}

	// The old daemon comes back (it was paused, not dead): it cannot append.
	if _, _, err := dA.Submit(ctx, api.Submit{ID: "zombie", Kind: "run"}); !errors.Is(err, lease.ErrFailed) {
		t.Fatalf("the deposed daemon's submit: %v, want lease.ErrFailed", err)
	}
	if err := a.Log().Err(); !errors.Is(err, ErrDeposed) {
		t.Fatalf("the deposed daemon's log: %v, want ErrDeposed", err)
	}
	_ = a.Close()
	checkFinished(t, ack, 1, []*server.Server{ns}, b)
}

func TestActiveThatLosesTheKeyStopsAppending(t *testing.T) {
	ns := runServer(t)
	ctx := context.Background()
	a := openMember(t, "a:7420", ns)
	defer a.Close()
	campaign(t, a)
	svcA := service(t, a, clocktest.New(start))
	var ack acked
	ack.record(t, a.Log()) // its daemon.started
	kv, err := a.leaderBucket(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The key is taken from under the active daemon (it was paused past its
	// TTL, or an operator deleted it) and another daemon wins it.
	if err := kv.Delete(ctx, leaderKey); err != nil {
		t.Fatal(err)
	}
	b := openMember(t, "b:7420", ns)
	defer b.Close()
	campaign(t, b)
	select {
	case <-a.Lost():
	case <-time.After(5 * time.Second):
		t.Fatal("the active daemon did not see its leadership lost")
	}
	// Refusing from the moment it was deposed, before any append: the API
	// answers every call, reads too, 503 while the service has failed.
	if err := a.Log().Err(); !errors.Is(err, ErrDeposed) {
		t.Fatalf("the log once the leadership was lost: %v, want ErrDeposed", err)
	}
	if err := svcA.Err(); !errors.Is(err, lease.ErrFailed) {
		t.Fatalf("the service once the leadership was lost: %v, want lease.ErrFailed", err)
	}
	if _, _, err := svcA.Submit(ctx, "late", event.KindRun, nil); !errors.Is(err, lease.ErrFailed) {
		t.Fatalf("submit after the leadership was lost: %v, want lease.ErrFailed", err)
	}
	if err := a.Log().Err(); !errors.Is(err, ErrDeposed) {
		t.Fatalf("the log after the leadership was lost: %v, want ErrDeposed", err)
	}
	checkFinished(t, &ack, 1, []*server.Server{ns}, b)
}

// takeOver waits, for at most grace, for the campaign of standby b (won) to
// win after what (just done), then opens its service two graces later on
// clock, as the daemon that took over does. The caller closes it, before b.
func takeOver(t *testing.T, won <-chan error, b *Store, clock *clocktest.Clock, what string) *lease.Service {
	t.Helper()
	killed := time.Now()
	grace := leasetest.Timing().Grace
	select {
	case err := <-won:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(grace):
		t.Fatalf("no takeover within grace (%v) of %s", grace, what)
	}
	t.Logf("takeover %v after %s (TTL %v)", time.Since(killed).Round(time.Millisecond), what, ttl)
	clock.Advance(2 * grace)
	svc, err := lease.Open(b.Log(), lease.Options{Config: leasetest.Timing(), Clock: clock, Logger: zerolog.Nop(),
		StartReason: TakeoverReason})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}
