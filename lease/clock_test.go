package lease_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/timing"
)

// The leases of fixture.busy: r1's is running, e1's acquired and killed.
const (
	busyRun  = 6
	busyEval = 7
)

// TestEveryCommandRecordsAbsenceFirst: the daemon is absent far past
// toleration and a command arrives before any sweep. Whatever the command,
// the first thing it records is daemon.resumed with the whole gap, and
// nothing expires, then or at the next sweep. A command that records nothing
// leaves the gap for the next sweep to record.
func TestEveryCommandRecordsAbsenceFirst(t *testing.T) {
	for _, tc := range []struct {
		name string
		call func(s *lease.Service) error
	}{
		{"acquire", func(s *lease.Service) error { _, err := s.Acquire(ctx, "w2", 1); return err }},
		{"start", func(s *lease.Service) error { _, err := s.Start(ctx, "w1", busyEval); return err }},
		{"heartbeat", func(s *lease.Service) error { _, err := s.Heartbeat(ctx, "w1", []uint64{busyRun}); return err }},
		{"report", func(s *lease.Service) error {
			_, err := s.Report(ctx, "w1", busyRun, lease.Report{Outcome: event.OutcomeSucceeded})
			return err
		}},
		{"report lost", func(s *lease.Service) error {
			_, err := s.Report(ctx, "w1", busyEval, lease.Report{Outcome: event.OutcomeLost})
			return err
		}},
		{"submit", func(s *lease.Service) error { _, _, err := s.Submit(ctx, "new", event.KindRun, nil); return err }},
		{"cancel", func(s *lease.Service) error { _, err := s.Cancel(ctx, "q1"); return err }},
		{"kill", func(s *lease.Service) error { _, err := s.Kill(ctx, "r1"); return err }},
		{"stop", func(s *lease.Service) error { return s.Stop(ctx, lease.CancelQueued) }},
		{"sweep", func(s *lease.Service) error { return s.Sweep() }},
		{"nothing to record", func(s *lease.Service) error { _, err := s.Heartbeat(ctx, "w1", []uint64{999}); return err }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t)
			f.busy()
			last := f.log.LastSeq()
			jump := 10 * testConfig.Toleration
			f.clock.Advance(jump)
			f.must(tc.call(f.svc))
			f.must(f.svc.Sweep()) // records the gap if the command did not
			evs := eventsAfter(t, f.log, last)
			if len(evs) == 0 || evs[0].Type != event.TypeDaemonResumed || evs[0].Gap < int64(jump) {
				t.Fatalf("after a gap of %v, %s appended %v; want daemon.resumed first", jump, tc.name, evs)
			}
			for _, e := range evs {
				if e.Type == event.TypeExpired || e.Type == event.TypeWorkerUnreachable || (e.Type == event.TypeDaemonResumed && e.Seq != evs[0].Seq) {
					t.Errorf("%s after the gap: %s", tc.name, e.String())
				}
			}
		})
	}
}

// TestWallClockStepsExpireNothing: within one life the daemon's clock is the
// wall clock read at Open plus CLOCK_BOOTTIME's count since, so no step of the
// wall clock — between 2×renew and grace, where a wall-clock daemon would
// expire a silent worker's lease before the worker fenced itself, far beyond,
// or backwards — moves a deadline: a lease whose worker goes silent right
// after its heartbeat still has all of toleration, counted as the boot clock
// counts, and expires once that has passed.
func TestWallClockStepsExpireNothing(t *testing.T) {
	wall, boot := clocktest.New(clocktest.Epoch), clocktest.New(time.Unix(5000, 0))
	f := newLifeFixture(t, wall, boot)
	_, _, err := f.svc.Submit(ctx, "r1", event.KindRun, nil)
	f.must(err)
	gs, err := f.svc.Acquire(ctx, "w1", 1)
	f.must(err)
	last := f.log.LastSeq()
	var elapsed time.Duration
	sweep := func(d time.Duration) { // a living daemon, for d
		for i := time.Duration(0); i < d; i += testConfig.SweepEvery() {
			boot.Advance(testConfig.SweepEvery())
			elapsed += testConfig.SweepEvery()
			f.must(f.svc.Sweep())
		}
	}
	for _, step := range []time.Duration{2*testConfig.Renew + testConfig.Renew/2, testConfig.Grace - time.Millisecond, 100 * testConfig.Toleration, -time.Hour} {
		_, err := f.svc.Heartbeat(ctx, "w1", []uint64{gs[0].Lease})
		f.must(err)
		wall.Advance(step)
		sweep(testConfig.Toleration - testConfig.SweepEvery())
	}
	evs := eventsAfter(t, f.log, last)
	for _, e := range evs {
		if e.Type == event.TypeExpired || e.Type == event.TypeDaemonResumed {
			t.Fatalf("after wall-clock steps: %s", e.String())
		}
	}
	if got, want := time.Unix(0, evs[len(evs)-1].Time), clocktest.Epoch.Add(elapsed); !got.After(clocktest.Epoch) || got.After(want) {
		t.Fatalf("last event at %v, want by %v: the boot clock's count since Open", got, want)
	}
	// Real silence still counts.
	sweep(2 * testConfig.SweepEvery())
	if l, err := f.svc.Lease(ctx, gs[0].Lease); err != nil || l.Live() {
		t.Fatalf("lease %d after toleration of silence: %+v, %v", gs[0].Lease, l, err)
	}
}

// TestSuspendIsAbsence: the host suspends (CLOCK_BOOTTIME jumps, and the wall
// clock with it) past toleration. The first command after it records the gap
// as daemon.resumed, and nothing expires.
func TestSuspendIsAbsence(t *testing.T) {
	wall, boot := clocktest.New(clocktest.Epoch), clocktest.New(time.Unix(5000, 0))
	f := newLifeFixture(t, wall, boot)
	_, _, err := f.svc.Submit(ctx, "r1", event.KindRun, nil)
	f.must(err)
	gs, err := f.svc.Acquire(ctx, "w1", 1)
	f.must(err)
	last := f.log.LastSeq()
	boot.Advance(time.Hour)
	wall.Advance(time.Hour)
	_, err = f.svc.Heartbeat(ctx, "w1", []uint64{gs[0].Lease})
	f.must(err)
	f.must(f.svc.Sweep())
	evs := eventsAfter(t, f.log, last)
	if len(evs) != 2 || evs[0].Type != event.TypeDaemonResumed || evs[0].Gap != int64(time.Hour) || evs[1].Type != event.TypeHeartbeat {
		t.Fatalf("after a suspend of 1h: %v; want daemon.resumed{1h}, then the heartbeat", evs)
	}
}

// TestShortSleepIsAbsence: the host sleeps for less than grace (CLOCK_BOOTTIME
// counts it, CLOCK_MONOTONIC does not). The local worker fences on
// CLOCK_MONOTONIC and did not see the sleep, so the daemon must not count it
// either: the next command records daemon.resumed with the sleep as its gap,
// and a lease silent for toleration of the host's waking time only — not
// counting the sleep — does not expire a moment sooner.
func TestShortSleepIsAbsence(t *testing.T) {
	wall, boot, mono := clocktest.New(clocktest.Epoch), clocktest.New(time.Unix(5000, 0)), clocktest.New(time.Unix(4000, 0))
	f := &lifeFixture{t: t, fs: vfs.NewMem(), wall: wall, boot: boot, mono: mono}
	f.open()
	awake := func(d time.Duration) { wall.Advance(d); boot.Advance(d); mono.Advance(d) }
	sleep := 3 * testConfig.Renew // past the fence's slack of 2×renew, short of grace
	_, _, err := f.svc.Submit(ctx, "r1", event.KindRun, nil)
	f.must(err)
	gs, err := f.svc.Acquire(ctx, "w1", 1)
	f.must(err)
	last := f.log.LastSeq()

	awake(testConfig.Renew)
	wall.Advance(sleep)
	boot.Advance(sleep)
	_, _, err = f.svc.Submit(ctx, "r2", event.KindRun, nil) // any command that writes
	f.must(err)
	evs := eventsAfter(t, f.log, last)
	if len(evs) == 0 || evs[0].Type != event.TypeDaemonResumed || evs[0].Gap != int64(sleep) {
		t.Fatalf("after a sleep of %v: %v; want daemon.resumed{%v} first", sleep, evs, sleep)
	}

	// w1 is silent from the grant on: toleration of waking time after it,
	// its lease expires, and not one sweep before.
	for awakeFor := testConfig.Renew; ; awakeFor += testConfig.SweepEvery() {
		f.must(f.svc.Sweep())
		l, err := f.svc.Lease(ctx, gs[0].Lease)
		f.must(err)
		if !l.Live() {
			if awakeFor <= testConfig.Toleration {
				t.Fatalf("lease expired after %v awake (and a sleep of %v): the sleep counted against its worker", awakeFor, sleep)
			}
			break
		}
		if awakeFor > testConfig.Toleration+testConfig.SweepEvery() {
			t.Fatalf("lease still live %v awake after its grant", awakeFor)
		}
		awake(testConfig.SweepEvery())
	}
}

// TestDescheduledReadsAreNoSleep: the daemon reads CLOCK_BOOTTIME and
// CLOCK_MONOTONIC one after the other, and on a loaded host its thread may
// be descheduled between them. That pause is no sleep of the host: no
// daemon.resumed may come of it, at Open's reading or any later. (Seen as a
// daemon.resumed in the middle of a test's log under the race detector.)
func TestDescheduledReadsAreNoSleep(t *testing.T) {
	wall, boot, mono := clocktest.New(clocktest.Epoch), clocktest.New(time.Unix(5000, 0)), clocktest.New(time.Unix(4000, 0))
	// Descheduled for 5 ms right after every third read of boot, the first
	// (Open's) included: every clock of the host moves on meanwhile.
	paused := &descheduled{Clock: boot, every: 3, pause: 5 * time.Millisecond, host: []*clocktest.Clock{wall, boot, mono}}
	log, svc := leasetest.Open(t, leasetest.Service(func(o *lease.Options) { o.Wall, o.Boot, o.Mono = wall, paused, mono }))
	for i := range 20 {
		_, _, err := svc.Submit(ctx, fmt.Sprintf("r%d", i), event.KindRun, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := svc.Sweep(); err != nil {
			t.Fatal(err)
		}
		wall.Advance(time.Millisecond)
		boot.Advance(time.Millisecond)
		mono.Advance(time.Millisecond)
	}
	if paused.pauses < 10 {
		t.Fatalf("only %d pauses: the test did not deschedule the reads", paused.pauses)
	}
	for _, e := range eventsAfter(t, log, 0) {
		if e.Type == event.TypeDaemonResumed {
			t.Fatalf("%s: a pause between two clock reads taken for a sleep of the host", e.String())
		}
	}
}

// descheduled is a host clock after whose every nth reading the reading
// thread is descheduled for pause: every clock of the host moves on.
type descheduled struct {
	*clocktest.Clock
	every, reads, pauses int
	pause                time.Duration
	host                 []*clocktest.Clock
}

func (d *descheduled) Now() time.Time {
	now := d.Clock.Now()
	if d.reads%d.every == 0 {
		for _, c := range d.host {
			c.Advance(d.pause)
		}
		d.pauses++
	}
	d.reads++
	return now
}

// TestWallClockBridgesRestarts: across a restart the wall clock dates the
// new life, so the downtime is recorded (daemon.started{gap}); a wall clock
// that stepped back meanwhile starts the life at the last event's time, so
// that event times never go back and the downtime reads as none.
func TestWallClockBridgesRestarts(t *testing.T) {
	wall, boot := clocktest.New(clocktest.Epoch), clocktest.New(time.Unix(5000, 0))
	f := newLifeFixture(t, wall, boot)
	boot.Advance(30 * time.Second)
	_, _, err := f.svc.Submit(ctx, "r1", event.KindRun, nil)
	f.must(err)
	f.must(f.log.Close())
	for _, tc := range []struct {
		name    string
		wall    time.Time
		gap     time.Duration
		started time.Time
	}{
		{"ten minutes down", clocktest.Epoch.Add(30*time.Second + 10*time.Minute), 10 * time.Minute, clocktest.Epoch.Add(30*time.Second + 10*time.Minute)},
		{"wall stepped back", clocktest.Epoch.Add(-time.Hour), 0, clocktest.Epoch.Add(30*time.Second + 10*time.Minute)},
	} {
		wall.Set(tc.wall)
		f.boot = clocktest.New(time.Unix(1, 0)) // a new boot: its clock starts over
		f.open()
		e, err := f.log.Get(f.log.LastSeq())
		f.must(err)
		if e.Type != event.TypeDaemonStarted || e.Gap != int64(tc.gap) || !time.Unix(0, e.Time).Equal(tc.started) {
			t.Errorf("%s: %s at %v, want daemon.started gap=%v at %v", tc.name, e.String(), time.Unix(0, e.Time).UTC(), tc.gap, tc.started)
		}
		f.must(f.log.Close())
	}
}

type lifeFixture struct {
	t          *testing.T
	fs         vfs.FS
	wall, boot *clocktest.Clock
	mono       *clocktest.Clock // nil: the service sees no sleep but as a gap
	cfg        timing.Config    // zero: leasetest.Timing
	log        *eventlog.Log
	svc        *lease.Service
}

// newLifeFixture opens a service on its default clock, fed by wall and boot.
func newLifeFixture(t *testing.T, wall, boot *clocktest.Clock) *lifeFixture {
	f := &lifeFixture{t: t, fs: vfs.NewMem(), wall: wall, boot: boot}
	f.open()
	return f
}

// open opens the service (again, for a restart) on the fixture's store.
func (f *lifeFixture) open() {
	f.t.Helper()
	opts := []leasetest.Option{leasetest.FS(f.fs), leasetest.Service(func(o *lease.Options) {
		o.Wall, o.Boot = f.wall, f.boot
		if f.mono != nil {
			o.Mono = f.mono
		}
	})}
	if f.cfg != (timing.Config{}) {
		opts = append(opts, leasetest.Config(f.cfg))
	}
	f.log, f.svc = leasetest.Open(f.t, opts...)
}

func (f *lifeFixture) must(err error) {
	f.t.Helper()
	if err != nil {
		f.t.Fatal(err)
	}
}

func eventsAfter(t *testing.T, log *eventlog.Log, seq uint64) []event.Event {
	t.Helper()
	it := log.Iter(seq + 1)
	var out []event.Event
	for it.Next() {
		out = append(out, it.Event().Clone())
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}
