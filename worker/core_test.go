package worker

import (
	"testing"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/timing"
)

// coreTiming: renew 1s, fence at toleration − 2×renew = 13s.
var coreTiming = api.Timing{RenewSeconds: 1, GraceSeconds: 5, TolerationSeconds: 15}

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func at(d time.Duration) time.Time { return t0.Add(d) }

func continueAll(ids []uint64) api.HeartbeatReply {
	r := api.HeartbeatReply{Timing: coreTiming}
	for _, id := range ids {
		r.Leases = append(r.Leases, api.LeaseDirective{Lease: id, Directive: api.DirectiveContinue})
	}
	return r
}

// TestCoreTurnWaitsForTheHeartbeatAfterAWake: after a gap of more than
// 2×renew between two turns (the worker's process was paused), the fence is
// not checked until the first heartbeat sent after the wake is answered or
// times out; shorter gaps change nothing.
func TestCoreTurnWaitsForTheHeartbeatAfterAWake(t *testing.T) {
	for _, tc := range []struct {
		name      string
		gap       time.Duration // between the last turn and the wake
		inflight  bool          // a heartbeat sent before the pause is still in flight
		wantFence bool          // the turn after the gap checks the fence
	}{
		{name: "turns every renew/4", gap: 250 * time.Millisecond, wantFence: true},
		{name: "a gap within 2×renew", gap: 2 * time.Second, wantFence: true},
		{name: "a pause past 2×renew", gap: 20 * time.Second, wantFence: false},
		{name: "a pause with a heartbeat in flight", gap: 20 * time.Second, inflight: true, wantFence: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := NewCore(1, ConfigOf(coreTiming), t0)
			if _, beat, fence := c.Turn(at(0)); !beat || !fence {
				t.Fatalf("first turn: beat=%v fence=%v, want both", beat, fence)
			}
			if !tc.inflight {
				c.Acked(at(0), at(0), continueAll(nil))
			}
			wake := at(tc.gap)
			ids, beat, fence := c.Turn(wake)
			if fence != tc.wantFence {
				t.Fatalf("turn after %v: fence checked %v, want %v", tc.gap, fence, tc.wantFence)
			}
			if tc.wantFence {
				return
			}
			if tc.inflight {
				// The old heartbeat is answered; the turn it wakes sends the
				// first one after the pause, and still does not fence.
				if beat {
					t.Fatal("a heartbeat sent while one is in flight")
				}
				c.Acked(at(0), wake, continueAll(nil))
				if ids, beat, fence = c.Turn(wake.Add(time.Millisecond)); !beat || fence {
					t.Fatalf("turn after the old answer: beat=%v fence=%v, want a heartbeat and no fence", beat, fence)
				}
			}
			if !beat {
				t.Fatal("no heartbeat sent on waking")
			}
			if _, _, fence := c.Turn(wake.Add(250 * time.Millisecond)); fence {
				t.Fatal("fence checked while the heartbeat after the wake is in flight")
			}
			c.Acked(wake, wake, continueAll(ids))
			if _, _, fence := c.Turn(wake.Add(300 * time.Millisecond)); !fence {
				t.Fatal("fence not checked once the heartbeat after the wake was answered")
			}
		})
	}
	t.Run("the heartbeat after the wake times out", func(t *testing.T) {
		c := NewCore(1, ConfigOf(coreTiming), t0)
		c.Turn(at(0))
		c.Acked(at(0), at(0), continueAll(nil))
		c.Turn(at(20 * time.Second))
		c.Unacked()
		if _, _, fence := c.Turn(at(21 * time.Second)); !fence {
			t.Fatal("fence not checked once the heartbeat after the wake went unanswered")
		}
	})
}

// TestCoreFenceCountsPerLease: each lease's fence counts from the send time
// of the last call that proves the daemon heard of it, not from the worker's
// last acknowledged heartbeat: a grant that arrives late is older than that.
func TestCoreFenceCountsPerLease(t *testing.T) {
	c := NewCore(2, ConfigOf(coreTiming), t0)
	fence := ConfigOf(coreTiming).SelfFence()

	// Lease 1, granted to an acquire sent at 0 and answered at once.
	h1, start := c.Take(api.Grant{Lease: 1, Timing: coreTiming}, at(0), at(0))
	if !start {
		t.Fatal("a fresh grant may not start")
	}
	if c.Started(h1, newFakeRun(), at(0)) {
		t.Fatal("a fresh run stopped at once")
	}
	// A heartbeat sent at 5s, before lease 2's grant arrived, renews lease 1.
	ids, _ := c.BeatDue(at(5 * time.Second))
	// Lease 2, granted to an acquire sent at 1s whose answer took 6s.
	h2, start := c.Take(api.Grant{Lease: 2, Timing: coreTiming}, at(time.Second), at(7*time.Second))
	if !start {
		t.Fatal("a grant 6s late, within the fence, may not start")
	}
	c.Started(h2, newFakeRun(), at(7*time.Second))
	c.Acked(at(5*time.Second), at(5*time.Second), continueAll(ids))

	// Past lease 2's fence (1s + 13s) but not lease 1's (5s + 13s).
	stops, _, _, _ := c.Fence(at(time.Second + fence + time.Millisecond))
	if len(stops) != 1 || stops[0].Lease != 2 || !stops[0].Kill || stops[0].Why != CauseFence {
		t.Fatalf("stops %+v, want lease 2 killed by the fence alone", stops)
	}
	if o, report := c.Ended(h2); !report || o.Outcome != "lost" {
		t.Fatalf("fenced lease reports %+v (%v), want lost", o, report)
	}
}

// TestCoreLateGrantIsNotStarted: a grant that arrives past its fence may
// have expired and gone to another worker already: its job never starts,
// and it is reported lost.
func TestCoreLateGrantIsNotStarted(t *testing.T) {
	c := NewCore(1, ConfigOf(coreTiming), t0)
	fence := ConfigOf(coreTiming).SelfFence()
	if _, start := c.Take(api.Grant{Lease: 9, Timing: coreTiming}, at(0), at(fence+time.Millisecond)); start {
		t.Fatal("a grant past its fence was started")
	}
	if o := TooLate(); o.Outcome != "lost" {
		t.Fatalf("TooLate is %q, want lost", o.Outcome)
	}
	if c.Room() != 0 {
		t.Fatalf("room %d while the late lease is still held (until reported)", c.Room())
	}
}

// TestCoreFencedWorkerTakesNoWork: once the last acknowledged heartbeat is
// past the fence the worker takes no work, until a heartbeat is answered.
func TestCoreFencedWorkerTakesNoWork(t *testing.T) {
	c := NewCore(3, ConfigOf(coreTiming), t0)
	fence := ConfigOf(coreTiming).SelfFence()
	if _, fell, _, _ := c.Fence(at(fence)); fell || c.Room() != 3 {
		t.Fatalf("fenced at the fence (room %d)", c.Room())
	}
	if _, fell, _, _ := c.Fence(at(fence + time.Millisecond)); !fell || c.Room() != 0 {
		t.Fatalf("not fenced past the fence (fell %v, room %d)", fell, c.Room())
	}
	ids, _ := c.BeatDue(at(fence + time.Second))
	if a := c.Acked(at(fence+time.Second), at(fence+time.Second), continueAll(ids)); !a.Unfenced || c.Room() != 3 {
		t.Fatalf("an answered heartbeat did not lift the fence (unfenced %v, room %d)", a.Unfenced, c.Room())
	}
}

// TestCoreLateAnswerStartsNothing: an adopted lease's job starts on the
// first heartbeat that renews it — unless that answer arrives past the fence
// (the worker was paused, the network slow): by then the lease may have
// expired and its job gone to another worker. Such an answer does not lift
// the fence either. (Found by the simulation, seed 60684: a paused worker
// started a job that another worker was running.)
func TestCoreLateAnswerStartsNothing(t *testing.T) {
	fence := ConfigOf(coreTiming).SelfFence()
	c := NewCore(2, ConfigOf(coreTiming), t0)
	h := c.Adopt(api.Grant{Lease: 9, Timing: coreTiming})
	ids, _ := c.BeatDue(at(0))
	c.Fence(at(fence + time.Second)) // silent past the fence: fenced
	if a := c.Acked(at(0), at(fence+time.Second), continueAll(ids)); len(a.Start) != 0 || a.Unfenced {
		t.Fatalf("an answer past the fence started %d job(s), unfenced %v", len(a.Start), a.Unfenced)
	}
	if c.Held(9) != h || c.Room() != 0 {
		t.Fatalf("after a late answer: held %v, room %d; want lease 9 still pending and the worker still fenced", c.Held(9), c.Room())
	}
	ids, _ = c.BeatDue(at(fence + 2*time.Second))
	if a := c.Acked(at(fence+2*time.Second), at(fence+2*time.Second), continueAll(ids)); len(a.Start) != 1 || a.Start[0] != h || !a.Unfenced {
		t.Fatalf("a fresh answer: start %v, unfenced %v; want lease 9 started and the fence lifted", a.Start, a.Unfenced)
	}
}

// TestCoreAdoptTakesTheDaemonsTiming: a worker whose every call failed so
// far has heard the daemon's timing only in the lease list; it heartbeats
// by it, not by what it assumed at start (renew 10 s, where the daemon's
// toleration is 15 s).
func TestCoreAdoptTakesTheDaemonsTiming(t *testing.T) {
	c := NewCore(1, timing.Config{Renew: 10 * time.Second, Grace: 50 * time.Second, Toleration: 300 * time.Second}, t0)
	c.Adopt(api.Grant{Lease: 7, Timing: coreTiming})
	if got, want := c.Timing(), ConfigOf(coreTiming); got != want {
		t.Fatalf("timing after an adoption: %+v, want the grant's %+v", got, want)
	}
	if _, due := c.BeatDue(at(0)); !due {
		t.Fatal("no heartbeat due at the adoption")
	}
	c.Unacked()
	if ids, due := c.BeatDue(at(time.Second)); !due || len(ids) != 1 {
		t.Fatalf("one renew (1 s) later: due %v, ids %v; want lease 7 named", due, ids)
	}
}

// A lease list asked for before the worker let a lease go (its report was
// answered) may answer after, still showing the lease: it is no orphan, for
// a lost lease's job is back in the queue and may already run elsewhere. A
// list asked for after the let-go is believed again (simulation seeds 39584,
// 95528).
func TestCoreLeaseLetGoIsNoOrphan(t *testing.T) {
	c := NewCore(2, ConfigOf(coreTiming), t0)
	h, _ := c.Take(api.Grant{Lease: 9, Timing: coreTiming}, at(0), at(0))
	mark := c.ListMark() // the list is asked for while lease 9 is held
	if !c.Forget(h) {    // its report is answered: let go
		t.Fatal("lease 9 was not held")
	}
	stale := []api.Grant{{Lease: 9}, {Lease: 11}}
	if got := c.Orphans(stale, mark); len(got) != 1 || got[0].Lease != 11 {
		t.Fatalf("orphans of a list asked for before lease 9 was let go: %v; want only 11", got)
	}
	if got := c.Orphans(stale, c.ListMark()); len(got) != 2 {
		t.Fatalf("orphans of a list asked for after: %v; want both", got)
	}
}
