package lease_test

import (
	"bytes"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/rs/zerolog"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/internal/testkit/clocktest"
	"github.com/leaselog/leaselog/internal/testkit/leasetest"
	"github.com/leaselog/leaselog/lease"
	"github.com/leaselog/leaselog/timing"
)

// crashLoopTiming is short, so that a daemon's life of 1.5 s is half of
// toleration.
var crashLoopTiming = timing.Config{Renew: 250 * time.Millisecond, Grace: time.Second, Toleration: 3 * time.Second}

// TestCrashLoopExpiresASilentWorker: the daemon is killed every 1.5 s of its
// life (toleration 3 s) and started again on the same store half a second
// later, while the worker that took an evaluation says nothing more. Only
// the time the daemon was down is its absence: the lease expires at the
// first sweep after toleration of the daemon's up-time since the grant, and
// the evaluation is queued again. Whatever the wall clock does across the
// restarts (it only bridges them): stepped back, the downtime reads as none
// and the lives before still count; stepped forward, the step is absence.
func TestCrashLoopExpiresASilentWorker(t *testing.T) {
	const (
		life = 1500 * time.Millisecond
		down = 500 * time.Millisecond
	)
	step := crashLoopTiming.SweepEvery()
	for _, tc := range []struct {
		name string
		wall func(restart int) time.Duration // the wall clock's step at a restart, beside the downtime
		gap  func(restart int) time.Duration // the gap daemon.started records
	}{
		{"wall steady", func(int) time.Duration { return 0 }, func(int) time.Duration { return down }},
		{"wall steps back an hour at each restart", func(int) time.Duration { return -time.Hour }, func(int) time.Duration { return 0 }},
		{"wall steps a day forward at the first restart",
			func(r int) time.Duration { return map[bool]time.Duration{true: 24 * time.Hour}[r == 1] },
			func(r int) time.Duration { return down + map[bool]time.Duration{true: 24 * time.Hour}[r == 1] }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewCrashableMem()
			wall, boot := clocktest.New(clocktest.Epoch), clocktest.New(time.Unix(5000, 0))
			f := &lifeFixture{t: t, fs: fs, wall: wall, boot: boot, cfg: crashLoopTiming}
			f.open()
			_, _, err := f.svc.Submit(ctx, "e1", event.KindEvaluation, nil)
			f.must(err)
			gs, err := f.svc.Acquire(ctx, "w1", 1)
			f.must(err)
			id := gs[0].Lease // w1 says nothing more
			var up time.Duration
			for restart := 0; ; restart++ {
				if restart > 0 {
					// Killed: its host keeps what it wrote, synced or not.
					f.fs = fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(1, uint64(restart)))})
					fs = f.fs.(*vfs.MemFS)
					_ = f.log.Close()
					wall.Advance(down + tc.wall(restart))
					boot.Advance(down)
					f.open()
					e, err := f.log.Get(f.log.LastSeq())
					f.must(err)
					if e.Type != event.TypeDaemonStarted || e.Gap != int64(tc.gap(restart)) {
						t.Errorf("restart %d: %s, want daemon.started gap=%v: the downtime alone", restart, e.String(), tc.gap(restart))
					}
				}
				last := f.log.LastSeq()
				for lived := time.Duration(0); lived < life; lived += step {
					wall.Advance(step)
					boot.Advance(step)
					up += step
					f.must(f.svc.Sweep())
					l, err := f.svc.Lease(ctx, id)
					f.must(err)
					if l.Live() {
						if up > crashLoopTiming.Toleration+step {
							t.Fatalf("lease %d still live after %v of the daemon's up-time in %d lives (toleration %v)", id, up, restart+1, crashLoopTiming.Toleration)
						}
						continue
					}
					if up <= crashLoopTiming.Toleration {
						t.Fatalf("lease %d expired after %v of the daemon's up-time: not past toleration", id, up)
					}
					evs := eventsAfter(t, f.log, last)
					if n := len(evs); n < 2 || evs[n-2].Type != event.TypeExpired || evs[n-2].Lease != id || evs[n-1].Type != event.TypeQueued {
						t.Fatalf("at the expiry the log ends %v, want lease.expired then lease.queued", evs)
					}
					return
				}
			}
		})
	}
}

// TestUnreadableAliveMark: a mark that cannot be read is left out, and said
// so: the restart counts its downtime from the last event, longer than it
// was, which delays an expiry and causes none.
func TestUnreadableAliveMark(t *testing.T) {
	fs := vfs.NewMem()
	clock := clocktest.New(clocktest.Epoch)
	var logs bytes.Buffer
	open := func() (*eventlog.Log, *lease.Service) {
		return leasetest.Open(t, leasetest.FS(fs), leasetest.Clock(clock),
			leasetest.Service(func(o *lease.Options) { o.Logger = zerolog.New(&logs) }))
	}
	log, svc := open()
	const sweeps = 10
	for range sweeps {
		clock.Advance(testConfig.SweepEvery())
		if err := svc.Sweep(); err != nil {
			t.Fatal(err)
		}
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create(leasetest.Dir+"/alive", vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("not a mark")); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	log, _ = open()
	e, err := log.Get(log.LastSeq())
	if err != nil {
		t.Fatal(err)
	}
	if want := time.Minute + sweeps*testConfig.SweepEvery(); e.Type != event.TypeDaemonStarted || e.Gap != int64(want) {
		t.Fatalf("restart after a damaged mark: %s, want daemon.started gap=%v: since the last event", e.String(), want)
	}
	if !strings.Contains(logs.String(), "alive mark unreadable") || !strings.Contains(logs.String(), leasetest.Dir+"/alive") {
		t.Fatalf("the daemon's log says nothing of the damaged mark:\n%s", logs.String())
	}
}
