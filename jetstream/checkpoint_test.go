package jetstream

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	natsjs "github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/replay"
)

// compacting opens the lease service on s's log, as the daemon does: its
// heartbeats compacted a minute after their job ended.
func compacting(t testing.TB, s *Store, clock *clocktest.Clock) *lease.Service {
	t.Helper()
	svc, err := lease.Open(s.Log(), lease.Options{Config: leasetest.Timing(), Clock: clock, Logger: zerolog.Nop(),
		HeartbeatRetention: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	return svc
}

// jobs runs n jobs through svc, each heartbeating five times, to their end,
// then lets their retention pass and compacts them.
func jobs(t testing.TB, svc *lease.Service, clock *clocktest.Clock, prefix string, n int) {
	t.Helper()
	ctx := context.Background()
	for i := range n {
		id := fmt.Sprint(prefix, i)
		if _, _, err := svc.Submit(ctx, id, event.KindRun, nil); err != nil {
			t.Fatal(err)
		}
		gs, err := svc.AcquireWith(ctx, "w1", lease.AcquireOptions{Max: 1, Start: true})
		if err != nil || len(gs) != 1 {
			t.Fatalf("acquire: %v %v", gs, err)
		}
		for range 5 {
			clock.Advance(time.Second)
			if _, err := svc.Heartbeat(ctx, "w1", []uint64{gs[0].Lease}); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := svc.Report(ctx, "w1", gs[0].Lease, lease.Report{Outcome: event.OutcomeSucceeded}); err != nil {
			t.Fatal(err)
		}
	}
	clock.Advance(2 * time.Minute)
	if st, _, err := svc.Compact(); err != nil || st.Jobs != n {
		t.Fatalf("compacted %+v, %v; want %d jobs", st, err, n)
	}
}

// TestCheckpointCompactsTheStream: the active daemon checkpoints its
// compacted cache; the second checkpoint purges the stream below the first.
// A cache rebuilt from the stream then, and the cache of a daemon that was
// down while the stream was purged past it, load the checkpoint and the
// batches after it: each verifies, and holds the events and the archive
// the active daemon's cache does.
func TestCheckpointCompactsTheStream(t *testing.T) {
	ns := runServer(t)
	ctx := context.Background()
	clock := clocktest.New(start)
	active := open(t, t.TempDir(), 1, ns)
	svc := compacting(t, active, clock)
	defer closeAll(t, svc, active)
	jobs(t, svc, clock, "a", 5)
	down := t.TempDir()
	closed := open(t, down, 1, ns) // caught up to here, then down
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}

	first, err := active.Checkpoint(ctx)
	if err != nil || first.Marker != active.StreamSeq() || first.Purged != 0 || first.Events == 0 {
		t.Fatalf("first checkpoint %+v, %v; want one at stream seq %d, nothing purged", first, err, active.StreamSeq())
	}
	if again, err := active.Checkpoint(ctx); err != nil || again.Bytes != 0 {
		t.Fatalf("a checkpoint with nothing new: %+v, %v; want none written", again, err)
	}
	jobs(t, svc, clock, "b", 5)
	before, err := active.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	second, err := active.Checkpoint(ctx)
	if err != nil || second.Purged != first.Marker+1 {
		t.Fatalf("second checkpoint %+v, %v; want the stream purged below %d", second, err, first.Marker+1)
	}
	after, err := active.stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if after.State.FirstSeq != first.Marker+1 || after.State.Msgs >= before.State.Msgs || after.State.Bytes >= before.State.Bytes {
		t.Fatalf("stream after the purge: first seq %d, %d messages, %d bytes; before: %d messages, %d bytes",
			after.State.FirstSeq, after.State.Msgs, after.State.Bytes, before.State.Msgs, before.State.Bytes)
	}
	// A batch after the checkpoint: a rebuilt cache reads it from the stream.
	if _, _, err := svc.Submit(ctx, "c", event.KindRun, nil); err != nil {
		t.Fatal(err)
	}
	want := dump(t, active.Log())
	if !slices.ContainsFunc(want, func(l string) bool { return strings.Contains(l, "lease.heartbeats") }) {
		t.Fatalf("the active cache holds no summary:\n%v", want)
	}
	for _, dir := range []string{t.TempDir(), down} {
		s := open(t, dir, 1, ns)
		if _, err := replay.Verify(s.Log()); err != nil {
			t.Fatalf("cache in %s: %v", dir, err)
		}
		if got := dump(t, s.Log()); !slices.Equal(got, want) {
			t.Fatalf("cache in %s holds\n%v\nthe active one\n%v", dir, got, want)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestStandbyBehindThePurge: a standby whose cache a purge passed (it
// lagged a checkpoint interval) stops its campaign with ErrBehind, rather
// than wait for batches the stream will never hold again; opened again, its
// cache is rebuilt from the checkpoint.
func TestStandbyBehindThePurge(t *testing.T) {
	ns := runServer(t)
	ctx := context.Background()
	clock := clocktest.New(start)
	active := open(t, t.TempDir(), 1, ns)
	svc := compacting(t, active, clock)
	defer closeAll(t, svc, active)
	jobs(t, svc, clock, "a", 2)
	dir := t.TempDir()
	standby := openMemberIn(t, "b:7420", dir, 1, ns) // caught up to here
	for _, prefix := range []string{"b", "c"} {
		jobs(t, svc, clock, prefix, 2)
		if _, err := active.Checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := standby.Campaign(cctx); !errors.Is(err, ErrBehind) {
		t.Fatalf("the campaign of a standby behind the purge: %v, want ErrBehind", err)
	}
	if err := standby.Close(); err != nil {
		t.Fatal(err)
	}
	again := open(t, dir, 1, ns)
	defer again.Close()
	if got, want := dump(t, again.Log()), dump(t, active.Log()); !slices.Equal(got, want) {
		t.Fatalf("the standby's cache, opened again, holds\n%v\nthe active one\n%v", got, want)
	}
}

// TestCheckpointOnAStreamThatDeniesPurges: a stream created by a build
// before checkpoints denies purges, and NATS does not let that change: the
// checkpoint is written, the stream keeps every batch, and Checkpoint says
// so (ErrPurgeDenied).
func TestCheckpointOnAStreamThatDeniesPurges(t *testing.T) {
	ns := runServer(t)
	ctx := context.Background()
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := natsjs.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, natsjs.StreamConfig{Name: "T", Subjects: []string{"leaselog.T"},
		Retention: natsjs.LimitsPolicy, Storage: natsjs.FileStorage, MaxMsgs: -1, MaxBytes: -1,
		DenyDelete: true, DenyPurge: true, Duplicates: 2 * time.Minute}); err != nil {
		t.Fatal(err)
	}
	clock := clocktest.New(start)
	active := open(t, t.TempDir(), 1, ns)
	svc := compacting(t, active, clock)
	defer closeAll(t, svc, active)
	for _, prefix := range []string{"a", "b"} {
		jobs(t, svc, clock, prefix, 2)
		_, err = active.Checkpoint(ctx)
	}
	if !errors.Is(err, ErrPurgeDenied) {
		t.Fatalf("second checkpoint: %v, want ErrPurgeDenied", err)
	}
	info, err := active.stream.Info(ctx)
	if err != nil || info.State.FirstSeq != 1 {
		t.Fatalf("stream first seq %d (%v): want every batch kept", info.State.FirstSeq, err)
	}
}

// TestRunCheckpoints: the loop checkpoints when the stream holds enough
// (here: anything), as often as it looks, and returns when its context
// ends.
func TestRunCheckpoints(t *testing.T) {
	ns := runServer(t)
	ctx := context.Background()
	active, err := Open(ctx, Options{Servers: []string{ns.ClientURL()}, Stream: "T", Replicas: 1, Dir: t.TempDir(),
		Log: eventlog.Options{Logger: zerolog.Nop()}, Logger: zerolog.Nop(), Timeout: 10 * time.Second, CheckpointBytes: 1})
	if err != nil {
		t.Fatal(err)
	}
	clock := clocktest.New(start)
	svc := compacting(t, active, clock)
	defer closeAll(t, svc, active)
	runCtx, cancel := context.WithCancel(ctx)
	tick := make(chan time.Time)
	done := make(chan error, 1)
	go func() { done <- active.RunCheckpoints(runCtx, tick) }()
	firstSeq := func() uint64 {
		info, err := active.stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.FirstSeq
	}
	for i, prefix := range []string{"a", "b", "c"} {
		jobs(t, svc, clock, prefix, 2)
		tick <- time.Now()
		if i == 2 {
			waitFor(t, 10*time.Second, "the stream purged below a checkpoint", func() bool { return firstSeq() > 1 })
		}
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
