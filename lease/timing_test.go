package lease_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/timing"
)

// perJob opens the fixture's service at the Leases page's timing, a job's
// own timing bounded by bounds.
func perJob(bounds timing.Bounds) []leasetest.Option {
	return []leasetest.Option{leasetest.Config(timing.Default()),
		leasetest.Service(func(o *lease.Options) { o.Bounds = bounds })}
}

// TestSubmitTiming: a job's own timing is recorded whole (the fields it
// names over the daemon's), and granted with its lease; one that does not
// hold together or lies out of bounds is refused naming the field,
// recording nothing; the same job again must not name another.
func TestSubmitTiming(t *testing.T) {
	f := newFixture(t)
	f.opts = perJob(timing.Bounds{MinRenew: time.Second, MaxToleration: time.Hour})
	f.restart()
	const s = time.Second
	j, _, err := f.svc.SubmitItem(ctx, lease.SubmitItem{ID: "short", Kind: event.KindRun, Timing: timing.Config{Toleration: 60 * s}})
	if want := (timing.Config{Renew: 10 * s, Grace: 50 * s, Toleration: 60 * s}); err != nil || j.Timing != want {
		t.Fatalf("submit: %+v %v, want timing %+v", j, err, want)
	}
	before := f.log.LastSeq()
	for _, tc := range []struct {
		asked timing.Config
		want  string
	}{
		{timing.Config{Renew: s / 2, Grace: 2 * s, Toleration: 3 * s}, "renew_seconds: must be at least min_renew_seconds (1), is 0.5"},
		{timing.Config{Toleration: 2 * time.Hour}, "toleration_seconds: must be at most max_toleration_seconds (3600), is 7200"},
		{timing.Config{Toleration: 40 * s}, "toleration_seconds: must exceed grace_seconds (50), is 40"},
		{timing.Config{Renew: 2 * s, Grace: 4 * s, Toleration: 8 * s}, "grace_seconds: must exceed 2 × renew_seconds (4), is 4"},
		{timing.Config{Grace: -s}, "grace_seconds: must be positive"},
	} {
		_, _, err := f.svc.SubmitItem(ctx, lease.SubmitItem{ID: "bad", Kind: event.KindRun, Timing: tc.asked})
		if !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want ErrInvalid saying %q", tc.asked, err, tc.want)
		}
	}
	for _, asked := range []timing.Config{{Toleration: 61 * s}, {Renew: 2 * s}} {
		if _, _, err := f.svc.SubmitItem(ctx, lease.SubmitItem{ID: "short", Kind: event.KindRun, Timing: asked}); !errors.Is(err, lease.ErrJobExists) {
			t.Errorf("the same job with %+v: %v, want ErrJobExists", asked, err)
		}
	}
	if f.log.LastSeq() != before {
		t.Fatalf("refused submissions recorded %d events", f.log.LastSeq()-before)
	}
	for _, asked := range []timing.Config{{}, {Toleration: 60 * s}, {Renew: 10 * s, Toleration: 60 * s}} {
		if _, created, err := f.svc.SubmitItem(ctx, lease.SubmitItem{ID: "short", Kind: event.KindRun, Timing: asked}); err != nil || created {
			t.Errorf("the same job naming %+v: created=%v %v, want the job", asked, created, err)
		}
	}
	gs, err := f.svc.Acquire(ctx, "w1", 1)
	f.must(err)
	if l, _ := f.svc.Lease(ctx, gs[0].Lease); l.Timing != j.Timing {
		t.Fatalf("lease granted with timing %+v, want the job's %+v", l.Timing, j.Timing)
	}
	e, err := f.log.Get(gs[0].Lease)
	f.must(err)
	if e.Type != event.TypeAcquired || e.Timing != j.Timing {
		t.Fatalf("the grant records %s, want the job's timing", e.String())
	}
}

// TestOwnTolerationExpires: on a manual clock, a lease of a job with a
// toleration of 60 s expires when 60 s silent, while a lease of the
// daemon's (300 s) beside it lives on; a heartbeat moves only its own
// lease's deadline.
func TestOwnTolerationExpires(t *testing.T) {
	f := newFixture(t)
	f.opts = perJob(timing.DefaultBounds())
	f.restart()
	const s = time.Second
	_, _, err := f.svc.SubmitItem(ctx, lease.SubmitItem{ID: "own", Kind: event.KindRun, Timing: timing.Config{Toleration: 60 * s}})
	f.must(err)
	_, _, err = f.svc.Submit(ctx, "default", event.KindRun, nil)
	f.must(err)
	_, _, err = f.svc.SubmitItem(ctx, lease.SubmitItem{ID: "beating", Kind: event.KindRun, Timing: timing.Config{Toleration: 60 * s}})
	f.must(err)
	gs, err := f.svc.Acquire(ctx, "w1", 3)
	f.must(err)
	beating := gs[2].Lease
	state := func(id string) fsm.State {
		j, err := f.svc.Job(ctx, id)
		f.must(err)
		return j.State
	}
	step := func(d time.Duration) {
		f.clock.Advance(d)
		f.must(f.svc.Sweep())
	}
	step(30 * s)
	_, err = f.svc.Heartbeat(ctx, "w1", []uint64{beating})
	f.must(err)
	step(30 * s) // 60 s: not past
	if got := state("own"); got != fsm.Acquired {
		t.Fatalf("own at 60 s: %s, want acquired", got)
	}
	step(time.Millisecond)
	if got := state("own"); got != fsm.Failed {
		t.Fatalf("own past 60 s: %s, want failed (worker lost)", got)
	}
	if got, got2 := state("default"), state("beating"); got != fsm.Acquired || got2 != fsm.Acquired {
		t.Fatalf("past 60 s: default %s, beating %s; want both acquired", got, got2)
	}
	step(30 * s) // the heartbeat at 30 s, 60 s ago
	if got := state("beating"); got != fsm.Failed {
		t.Fatalf("beating, 60 s after its heartbeat: %s, want failed", got)
	}
	for range 7 { // sweeps closer than grace: no absence of the daemon's
		step(30 * s)
	}
	if got := state("default"); got != fsm.Failed {
		t.Fatalf("default past 300 s: %s, want failed", got)
	}
}

// TestHeartbeatDetails: details of a lease ride its heartbeat into the log
// and the job's view; the same again records none; long ones are kept as a
// note of their size; what is no JSON object, or of a lease the heartbeat
// does not name, is refused, recording nothing.
func TestHeartbeatDetails(t *testing.T) {
	f := newFixture(t)
	_, _, err := f.svc.Submit(ctx, "j", event.KindRun, nil)
	f.must(err)
	gs, err := f.svc.Acquire(ctx, "w1", 1)
	f.must(err)
	id := gs[0].Lease
	beat := func(d string) error {
		_, err := f.svc.HeartbeatDetails(ctx, "w1", []uint64{id}, map[uint64][]byte{id: []byte(d)})
		return err
	}
	last := func() event.Event {
		e, err := f.log.Get(f.log.LastSeq())
		f.must(err)
		return e
	}
	f.must(beat(`{ "step": 3 }`))
	if e := last(); e.Type != event.TypeHeartbeat || string(e.Details) != `{"step":3}` {
		t.Fatalf("heartbeat recorded %s", e.String())
	}
	if j, _ := f.svc.Job(ctx, "j"); string(j.Details) != `{"step":3}` {
		t.Fatalf("job details %s", j.Details)
	}
	f.must(beat(`{"step":3}`))
	if e := last(); e.Type != event.TypeHeartbeat || e.Details != nil {
		t.Fatalf("the same details again recorded %s", e.String())
	}
	f.must(beat(`{"log":"` + strings.Repeat("x", event.MaxDetailsLen) + `"}`))
	if e := last(); string(e.Details) != `{"cut":4106}` {
		t.Fatalf("long details recorded %s", e.String())
	}
	before := f.log.LastSeq()
	for _, d := range []string{`[1]`, `"x"`, `{`, ``} {
		if err := beat(d); !errors.Is(err, lease.ErrInvalid) || !strings.Contains(err.Error(), "details of lease") {
			t.Errorf("details %q: %v, want ErrInvalid", d, err)
		}
	}
	if _, err := f.svc.HeartbeatDetails(ctx, "w1", nil, map[uint64][]byte{id: []byte(`{}`)}); !errors.Is(err, lease.ErrInvalid) {
		t.Errorf("details of a lease not named: %v, want ErrInvalid", err)
	}
	if f.log.LastSeq() != before {
		t.Fatalf("refused heartbeats recorded %d events", f.log.LastSeq()-before)
	}
	_, err = f.svc.Report(ctx, "w1", id, lease.Report{Outcome: event.OutcomeSucceeded})
	f.must(err)
	if j, _ := f.svc.Job(ctx, "j"); j.Details != nil {
		t.Fatalf("an ended job keeps details %s in the table", j.Details)
	}
}
