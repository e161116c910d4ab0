package worker

import (
	"fmt"
	"slices"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/timing"
)

// Core is what a worker decides, without goroutines, timers, I/O or a clock
// of its own: every decision that depends on time takes the worker's own
// reading of it. It holds the set of leases the worker holds and says which
// leases a heartbeat names, what each directive does, when the fence falls
// and which deadline each run's supervisor is to hold (Deadline, Acts.Fence),
// what to report about a run, which leases to adopt and which to drop.
//
// Worker drives a Core with goroutines and real timers; the deterministic
// simulation (package sim) drives the same Core from a discrete-event loop,
// so what the simulation checks is what the worker decides. A Core is not
// safe for concurrent use: Worker guards it with its mutex.
type Core struct {
	capacity int
	timing   timing.Config // the daemon's, as last heard (ConfigOf)
	held     map[uint64]*Held
	born     time.Time // when the worker started
	lastAck  time.Time // when the last acknowledged heartbeat was sent
	lastSent time.Time // when the last heartbeat was sent; zero before the first
	beating  bool      // a heartbeat is in flight
	fenced   bool

	// The heartbeat loop's view of its own pauses (see Turn).
	lastTurn time.Time // the worker's clock at the loop's last turn
	woke     bool      // the loop overslept, and has not sent a heartbeat since
	wakeBeat bool      // the heartbeat sent after a wake is in flight

	// The last leases let go of (Forget), each with the count of let-gos
	// when it went (see ListMark, Take, letGoKeep).
	letGo  map[uint64]uint64
	letGos uint64
}

// Held is one lease a worker holds. Its driver keeps the pointer for the
// lease's life (start, await, report) and hands it back to the Core.
//
// Each lease has its own fence base: the send time of the last call whose
// answer proves the daemon heard of the lease after it was sent — the
// acquire that granted it, then every acknowledged heartbeat naming it. The
// daemon cannot have expired the lease sooner than toleration after that, so
// its job stops once the base is toleration − 2×renew old. Counting from the
// worker's last acknowledged heartbeat instead would be wrong for a lease the
// heartbeat did not name: one whose grant arrived late (a late answer, a
// pause) may be older than that heartbeat, and even expired already.
//
// A grant's base is the acquire's send time plus how long the daemon held
// the request before granting it (api.Grant.HeldSeconds): a long poll may
// wait 30 s for a job, and the daemon's deadline counts from the grant, not
// from the poll. The daemon granted no sooner than that (it received the
// request after it was sent), so the base stays on the safe side.
type Held struct {
	grant   api.Grant
	own     *timing.Config // the lease's own timing (its job's); nil: the daemon's
	base    time.Time      // the fence counts from here; zero: never renewed
	renewed bool           // base is a grant's or a heartbeat's, not a guess (see Reattached)
	run     Run            // nil until started
	pending bool           // adopted: its job starts once a heartbeat renews it
	dropped bool           // the daemon said gone: stop, and do not report
	fenced  bool           // stopped by self-fencing

	// The job's progress (Progress): the latest read, the one the
	// heartbeat in flight carries, the last one acknowledged.
	progress, sending, acked []byte
}

// Grant is the lease and job the worker was given.
func (h *Held) Grant() api.Grant { return h.grant }

// Lease is the lease's fencing token.
func (h *Held) Lease() uint64 { return h.grant.Lease }

// Run is the lease's run, or nil before it started (or when it never will).
func (h *Held) Run() Run { return h.run }

// NewCore returns the decisions of a worker that runs up to capacity jobs at
// once and assumes timing t until the daemon says otherwise; now is the
// worker's clock when it starts.
func NewCore(capacity int, t timing.Config, now time.Time) *Core {
	return &Core{capacity: capacity, timing: t, held: make(map[uint64]*Held), born: now, lastAck: now,
		letGo: make(map[uint64]uint64)}
}

// ConfigOf is the timing a daemon sent, in a grant or a heartbeat's answer,
// as the worker reckons with it.
func ConfigOf(t api.Timing) timing.Config {
	return timing.Config{Renew: seconds(t.RenewSeconds), Grace: seconds(t.GraceSeconds), Toleration: seconds(t.TolerationSeconds)}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// fence is how long after its base the job of a lease of the daemon's
// timing stops, and after the last acknowledged heartbeat the worker takes
// no work.
func (c *Core) fence() time.Duration { return c.timing.SelfFence() }

// Timing is the daemon's timing as the worker last heard it.
func (c *Core) Timing() timing.Config { return c.timing }

// Renew is how often the worker heartbeats: the daemon's renew, or the
// shortest of its leases' own if shorter. Every heartbeat names every
// lease, so each is renewed at least as often as its timing asks, and each
// fence keeps its 2×renew of slack.
func (c *Core) Renew() time.Duration {
	r := c.timing.Renew
	for _, h := range c.held {
		if h.own != nil && h.own.Renew < r {
			r = h.own.Renew
		}
	}
	return r
}

// FenceEvery is how often the heartbeat loop checks the fence — whether or
// not a heartbeat is in flight, but not while it wakes from a pause (Turn):
// a few times per renew, so that the fence falls well inside the 2×renew of
// slack the daemon leaves.
func (c *Core) FenceEvery() time.Duration { return c.Renew() / 4 }

// BeatTimeout bounds one heartbeat call. Heartbeats go one at a time
// (BeatDue), so one whose answer is lost holds up the next until it times
// out (Unacked): after renew, when the next is due.
func (c *Core) BeatTimeout() time.Duration { return c.Renew() }

// CallTimeout bounds every call but a heartbeat (BeatTimeout); an acquire
// gets its long poll's wait on top (AcquireTimeout). Without one, a call
// whose request or answer is lost on a connection that is not reset waits
// for as long as TCP keeps it, and its lease — heartbeated all along — is
// never reported. Every call is safe to send again.
func (c *Core) CallTimeout() time.Duration { return 2 * c.Renew() }

// AcquireTimeout bounds an acquire that long-polls for wait: the wait, then
// CallTimeout as for any call.
func (c *Core) AcquireTimeout(wait time.Duration) time.Duration { return wait + c.CallTimeout() }

// Leases returns the leases held, sorted: what a heartbeat names.
func (c *Core) Leases() []uint64 {
	ids := make([]uint64, 0, len(c.held))
	for id := range c.held {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Held returns the lease id, or nil when the worker does not hold it.
func (c *Core) Held(id uint64) *Held { return c.held[id] }

// Room is how many leases the worker may ask for now: none while fenced, for
// a worker that cannot reach the daemon must not take work.
func (c *Core) Room() int {
	if c.fenced {
		return 0
	}
	return max(0, c.capacity-len(c.held))
}

// Fenced reports whether the fence has fallen and not been lifted by an
// acknowledged heartbeat since.
func (c *Core) Fenced() bool { return c.fenced }

// BeatDue reports whether a heartbeat is due at now, and if so records it
// as sent at now and returns the leases it names. A worker heartbeats once
// per renew, the first time at once, one heartbeat at a time: the next is
// due once the last was answered (Acked) or not (Unacked).
func (c *Core) BeatDue(now time.Time) (ids []uint64, due bool) {
	if c.beating || (!c.lastSent.IsZero() && now.Sub(c.lastSent) < c.Renew()) {
		return nil, false
	}
	c.lastSent, c.beating = now, true
	return c.Leases(), true
}

// Turn is one turn of the heartbeat loop at now: whether a heartbeat is due
// (BeatDue: if so it is recorded as sent, naming ids), and whether the loop
// checks the fence this turn.
//
// It does not while the worker is waking up. A turn that comes more than
// 2×renew after the last one means the worker's own process was paused (a
// SIGSTOP, a suspended VM, a daemon and its local worker stopped together)
// or starved for longer than the whole slack between the fence and the
// daemon's expiry. Its clock may then say every lease is past its fence, but
// the worker cannot tell whether the daemon saw the same gap — it does not
// count its own absence — and the answer to the next heartbeat can: continue,
// or gone. So the fence waits for the answer (or the timeout, renew) of the
// first heartbeat sent after the wake. Nothing the fence promises is lost by
// the wait: a pause that long is past what it covers already. Shorter gaps
// are within the fence's budget and change nothing.
func (c *Core) Turn(now time.Time) (ids []uint64, beat, checkFence bool) {
	if !c.lastTurn.IsZero() && now.Sub(c.lastTurn) > 2*c.Renew() {
		c.woke = true
	}
	c.lastTurn = now
	ids, beat = c.BeatDue(now)
	if beat && c.woke {
		c.woke, c.wakeBeat = false, true
	}
	return ids, beat, !c.woke && !c.wakeBeat
}

// Unacked records that the heartbeat in flight got no answer.
func (c *Core) Unacked() {
	c.beating, c.wakeBeat = false, false
	for _, h := range c.held {
		h.sending = nil
	}
}

// Stop is a run to stop: gracefully (cancel) or at once (kill, gone,
// refused, fence).
type Stop struct {
	Lease uint64
	Run   Run
	Kill  bool
	Why   Cause
}

// Cause is why a run is to be stopped.
type Cause int

const (
	CauseCancel  Cause = iota + 1 // a heartbeat's answer: cancel
	CauseKill                     // a heartbeat's answer: kill
	CauseGone                     // a heartbeat's answer: the lease is not the worker's (any more)
	CauseRefused                  // the daemon refused the run's start: the lease is not the worker's
	CauseFence                    // the worker fenced itself
)

var causes = [...]string{CauseCancel: "cancel", CauseKill: "kill", CauseGone: "gone", CauseRefused: "refused", CauseFence: "fence"}

// String is the word of the directive (cancel, kill, gone), or refused, or
// fence.
func (c Cause) String() string {
	if c > 0 && int(c) < len(causes) {
		return causes[c]
	}
	return fmt.Sprintf("cause(%d)", int(c))
}

// Acts is what an answer to a heartbeat makes the worker do.
type Acts struct {
	Stop   []Stop  // runs to stop: revoked, or gone
	Forget []*Held // leases gone before their job started
	Start  []*Held // adopted leases the heartbeat renewed: start their jobs
	Report []Ended // adopted leases revoked before their job started
	// Fence: the new deadlines of the runs whose leases the heartbeat
	// renewed, to push to their supervisors (Run.Fence).
	Fence []Deadline
	// Unfenced: the answer lifted the fence; the worker takes work again.
	Unfenced bool
}

// Deadline is a run's fence deadline, on the worker's clock, for its
// supervisor (Run.Fence): the lease's fence base plus toleration − 2×renew.
type Deadline struct {
	Lease uint64
	Run   Run
	At    time.Time
}

// Ended is a lease to report, with what to report.
type Ended struct {
	Held    *Held
	Outcome Outcome
}

// Acked takes the answer, received at now, to the heartbeat sent at sent.
// Its send time becomes the last acknowledged one, and the fence base of
// every lease it renewed: what the daemon's expiry counts from is the receipt
// of a heartbeat, which comes after its sending, so fencing from the send
// time is always on the safe side.
//
// An answer that arrives past the fence (a pause, a slow network) is old
// news: the leases it renewed may have expired since and gone to other
// workers. It still stops what it revokes, but it neither lifts the fence nor
// starts an adopted lease's job, nor moves a supervisor's deadline (Fence);
// a fresher heartbeat will.
func (c *Core) Acked(sent, now time.Time, reply api.HeartbeatReply) Acts {
	var a Acts
	c.beating, c.wakeBeat = false, false
	if sent.After(c.lastAck) {
		c.lastAck = sent
	}
	if reply.RenewSeconds > 0 {
		c.timing = ConfigOf(reply.Timing)
	}
	late := now.Sub(sent) > c.fence()
	if c.fenced && !late {
		c.fenced, a.Unfenced = false, true
	}
	for _, h := range c.held {
		if h.sending != nil {
			h.acked, h.sending = h.sending, nil
		}
	}
	for _, d := range reply.Leases {
		h := c.held[d.Lease]
		if d.Directive == api.DirectiveGone {
			s, f := c.Drop(d.Lease, CauseGone)
			if s.Run != nil {
				a.Stop = append(a.Stop, s)
			}
			if f != nil {
				a.Forget = append(a.Forget, f)
			}
			continue
		}
		if h == nil {
			continue
		}
		if !sent.Before(h.base) {
			h.base, h.renewed = sent, true
		}
		late := now.Sub(sent) > c.fenceOf(h) // past this lease's fence: old news for it
		if d, ok := c.Deadline(h); ok && !late {
			a.Fence = append(a.Fence, d)
		}
		switch {
		case h.pending && d.Directive == api.DirectiveContinue && late:
			// Stays pending: the next heartbeat says whether it is still ours.
		case h.pending && d.Directive == api.DirectiveContinue:
			h.pending = false
			a.Start = append(a.Start, h)
		case h.pending:
			h.pending = false
			o := Outcome{Outcome: "cancelled", Reason: "revoked before it started"}
			if d.Directive == api.DirectiveKill {
				o.Outcome = "killed"
			}
			a.Report = append(a.Report, Ended{h, o})
		case h.run != nil && d.Directive == api.DirectiveCancel:
			a.Stop = append(a.Stop, Stop{Lease: d.Lease, Run: h.run, Why: CauseCancel})
		case h.run != nil && d.Directive == api.DirectiveKill:
			a.Stop = append(a.Stop, Stop{Lease: d.Lease, Run: h.run, Kill: true, Why: CauseKill})
		}
	}
	return a
}

// Fence checks the fence at now: the job of every lease whose fence base is
// more than toleration − 2×renew old is to be stopped at once, two
// heartbeats before the daemon may expire the lease. Every heartbeat names
// every lease held, so when heartbeats go unacknowledged the fence falls for
// all of them together. Once the last acknowledged heartbeat is that old,
// the worker is fenced: it takes no work until a heartbeat is acknowledged.
// Fence returns the runs to stop, whether the worker became fenced now, how
// long it has been silent, and the fence.
func (c *Core) Fence(now time.Time) (stops []Stop, fell bool, silent, fence time.Duration) {
	fence = c.fence()
	silent = now.Sub(c.lastAck)
	if silent > fence && !c.fenced {
		c.fenced, fell = true, true
	}
	for _, id := range c.Leases() {
		h := c.held[id]
		if h.run == nil || h.fenced || now.Sub(h.base) <= c.fenceOf(h) || isDone(h.run) {
			continue // a job that ended on its own keeps its own outcome
		}
		h.fenced = true
		stops = append(stops, Stop{Lease: id, Run: h.run, Kill: true, Why: CauseFence})
	}
	return stops, fell, silent, fence
}

// NextFence is when the fence next falls for a running job, if no
// heartbeat renews its lease before: the earliest fence base of a lease
// whose job runs, plus toleration − 2×renew.
func (c *Core) NextFence() (at time.Time, ok bool) {
	for _, h := range c.held {
		if h.run == nil || h.fenced || h.dropped {
			continue
		}
		if t := h.base.Add(c.fenceOf(h)); !ok || t.Before(at) {
			at, ok = t, true
		}
	}
	return at, ok
}

// Take holds the lease of a grant answered to an acquire sent at sent. Its
// fence base is sent plus the time the daemon held the request
// (g.HeldSeconds), but never later than now: the daemon cannot have granted
// the lease after its answer arrived. Take reports whether the job may start
// at now: not if the answer came so late (a late answer, a pause) that the
// lease is past its fence already — it may have expired and gone to another
// worker. A lease not started is to be reported TooLate.
//
// A grant that reaches a fenced worker (a long-polled acquire, or a report's
// next sent again through the silence, answered once the daemon is heard
// again) starts like any other: the fence that matters to its job is its
// own lease's, counted from its base, and its supervisor holds it (Started,
// Deadline). The worker's fence only stops it from asking for work (Room).
//
// A grant of a lease the worker holds or has let go of is no new lease: the
// answer of a call in flight (an acquire's, a report's next) that a lease
// list overtook, its lease adopted since (and maybe run and reported). Take
// returns nil for it: there is nothing to start, or the job would run twice.
func (c *Core) Take(g api.Grant, sent, now time.Time) (h *Held, start bool) {
	if _, gone := c.letGo[g.Lease]; gone || c.held[g.Lease] != nil {
		return nil, false
	}
	if g.RenewSeconds > 0 {
		c.timing = ConfigOf(g.Timing)
	}
	base := sent
	if held := g.HeldSeconds; held > 0 {
		base = sent.Add(time.Duration(held * float64(time.Second)))
	}
	if base.After(now) {
		base = now
	}
	h = &Held{grant: g, own: ownTiming(g), base: base, renewed: true}
	c.held[g.Lease] = h
	if now.Sub(base) > c.fenceOf(h) {
		h.fenced = true
		return h, false
	}
	return h, true
}

// NextAfter is how many leases the report of h may ask for in the same call
// (api.Report.Next): the slot its end frees, if the worker holds h and may
// take work (Room: not while fenced); else none. Asking for no more than the
// one slot keeps the worker within its capacity whatever its acquire loop
// has asked for meanwhile: that asked for the room left with h held.
func (c *Core) NextAfter(h *Held) int {
	if c.fenced || c.held[h.grant.Lease] != h {
		return 0
	}
	return 1
}

// Running reports whether a grant came running (an acquire or a report's
// next with start, which the worker does not ask for itself: see Rounder):
// its start is recorded already, and no start call follows.
func Running(g api.Grant) bool {
	return g.Job.Lease != nil && g.Job.Lease.Lease == g.Lease && g.Job.Lease.State == "running"
}

// Started records the run of h, at now. It reports whether the run must be
// stopped at once: a heartbeat said gone, or its lease's fence fell, while
// it started. Otherwise its supervisor is to be given Deadline(h). The
// worker's own fence is no reason to stop it: a run stopped at once gets no
// supervisor deadline, and its kill could race a pause of the host past the
// lease's expiry (sim seed 2934), where a run with its deadline is killed
// by its supervisor on the wake.
func (c *Core) Started(h *Held, r Run, now time.Time) (stop bool) {
	h.run = r
	if !h.dropped && now.Sub(h.base) > c.fenceOf(h) {
		h.fenced = true
	}
	return h.dropped || h.fenced
}

// Reattached holds a lease the daemon still holds for this worker after a
// restart, with the run the executor found (nil if none). The worker's own
// fence counts from its start: what the worker that died knew of the lease
// died with it. That is no base for the run's supervisor, though: the daemon
// may expire the lease toleration after the last heartbeat the dead worker
// sent, which can be well before the worker's start + toleration − 2×renew.
// The supervisor keeps the deadline the dead worker gave it, and gets a new
// one only from the first heartbeat that renews the lease (Acked) — the
// first heartbeat goes at once.
func (c *Core) Reattached(g api.Grant, r Run) *Held {
	h := &Held{grant: g, own: ownTiming(g), base: c.born, run: r}
	c.held[g.Lease] = h
	return h
}

// Deadline is the fence deadline of h's run for its supervisor: its base +
// toleration − 2×renew. ok is false when there is none to give: no run, a
// run already stopped (dropped or fenced), or a base that no call to the
// daemon vouches for (a re-attached lease before its first heartbeat).
func (c *Core) Deadline(h *Held) (d Deadline, ok bool) {
	if h.run == nil || h.dropped || h.fenced || !h.renewed {
		return Deadline{}, false
	}
	return Deadline{Lease: h.grant.Lease, Run: h.run, At: h.base.Add(c.fenceOf(h))}, true
}

// Adopt holds an orphan (see Orphans). Its job does not start yet: nothing
// says when the daemon last heard of the lease, so it starts once a
// heartbeat has renewed it (Acked returns it to start). The list's grant
// carries the daemon's timing, as an acquire's does: a worker whose every
// call failed so far has heard it nowhere else, and would heartbeat at the
// timing it assumed at start.
func (c *Core) Adopt(g api.Grant) *Held {
	if g.RenewSeconds > 0 {
		c.timing = ConfigOf(g.Timing)
	}
	h := &Held{grant: g, own: ownTiming(g), pending: true}
	c.held[g.Lease] = h
	return h
}

// ListMark is to be taken when the worker asks for its lease list, and
// handed to Orphans with the answer. One list at a time.
func (c *Core) ListMark() uint64 { return c.letGos }

// Orphans returns the grants among gs, the answer to a lease list asked for
// at mark (ListMark), that the worker does not hold: live leases the daemon
// holds for it whose grant was lost on the way. Left alone they would expire
// without ever running. A lease the worker let go of since it asked is no
// orphan: the list may have been made before the daemon heard the report
// that ended it — a lost one puts its job back in the queue, and adopting it
// again would run the job beside its next holder (simulation seeds 39584,
// 95528).
func (c *Core) Orphans(gs []api.Grant, mark uint64) []api.Grant {
	var out []api.Grant
	for _, g := range gs {
		_, known := c.held[g.Lease]
		if at, ok := c.letGo[g.Lease]; known || (ok && at > mark) {
			continue
		}
		out = append(out, g)
	}
	return out
}

// Drop marks lease id as not the worker's any more (why: CauseGone, or
// CauseRefused when its start was refused): its run is to be stopped at once
// and never reported. It returns
// the run to stop, or, when it has none yet, the lease to forget now.
func (c *Core) Drop(id uint64, why Cause) (stop Stop, forget *Held) {
	h := c.held[id]
	if h == nil {
		return Stop{}, nil
	}
	h.dropped = true
	if h.run != nil {
		return Stop{Lease: id, Run: h.run, Kill: true, Why: why}, nil
	}
	return Stop{}, h
}

// Ended says what to report about h now that its run is over: nothing for a
// dropped lease (forget it), lost for a self-fenced one (Fenced), and
// otherwise the run's own outcome — lost too when its supervisor killed it
// on its fence deadline.
func (c *Core) Ended(h *Held) (o Outcome, report bool) {
	if h.dropped {
		return Outcome{}, false
	}
	if h.fenced {
		return Fenced(), true
	}
	return h.run.Outcome(), true
}

// letGoKeep is how many of the last leases let go the Core remembers, for
// Orphans and Take: an answer in flight is at most a call's timeout old, and
// no worker lets go of this many leases within one call.
const letGoKeep = 4096

// Forget lets go of h once it is reported (or dropped): its slot is free. It
// reports whether h was still held.
func (c *Core) Forget(h *Held) bool {
	if c.held[h.grant.Lease] == h {
		delete(c.held, h.grant.Lease)
		c.letGos++
		c.letGo[h.grant.Lease] = c.letGos
		if len(c.letGo) >= 2*letGoKeep {
			for id, at := range c.letGo {
				if at+letGoKeep <= c.letGos {
					delete(c.letGo, id)
				}
			}
		}
		return true
	}
	return false
}

func isDone(r Run) bool {
	select {
	case <-r.Done():
		return true
	default:
		return false
	}
}
