package sim

import (
	"maps"
	"math"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/internal/testkit/linearize"
)

// History records every call with its call and return times on the global
// clock, and every processing of it by the daemon (a duplicated request is
// processed twice; a request whose answer was lost, once, unseen). It turns
// them into porcupine operations, one per job a call concerns:
//
//   - the processing whose answer the caller took is an operation with that
//     output, returning when the caller got it;
//   - every other processing (a duplicate, or one whose answer was lost or
//     came after the caller's timeout) may or may not have happened as far
//     as any caller knows: an operation with an unknown output that never
//     returns (porcupine may place it anywhere after its call, the end
//     included, where it is as good as not having happened). Which jobs it
//     concerns is taken from what it did; a call that was never processed
//     (its request lost, or refused by a daemon that was down) did nothing
//     and is left out.
//
// A processing whose answer nobody saw and that appended nothing (a read, a
// duplicate submission, a repeated report, a cancel of an ended job) is left
// out too: it changed nothing, and constrains nothing. The sweeper's
// decisions (lease.expired) are operations of the daemon itself, at the
// instant of the sweep.
type History struct {
	clients []string
	calls   []*callRec
	sweeps  []sweepRec
	// queued holds, per job, when it sat in the queue: an empty acquire is
	// checked against the jobs it could have been given.
	queued map[string][]span
	since  map[string]time.Duration
	leases map[uint64]string // lease -> job
	// notBefore holds each delayed job's not_before (the daemon's clock,
	// ns); clock is the daemon's clock less the global one, as its latest
	// event tells (constant within one life of the daemon): an acquire
	// misses only the jobs due when it was processed.
	notBefore map[string]int64
	clock     int64
}

type callRec struct {
	c        *call
	procs    []*proc
	answer   *proc
	returned time.Duration
}

// proc is one processing of a call by the daemon.
type proc struct {
	at      time.Duration
	now     int64 // the daemon's clock then (ns)
	reply   any
	err     error
	changed bool // it appended events
}

type sweepRec struct {
	at  time.Duration
	evs []event.Event
}

// sweeperClient is the porcupine client id of the daemon's own decisions.
const sweeperClient = 0

func newHistory() *History {
	return &History{clients: []string{"sweeper"}, queued: map[string][]span{}, since: map[string]time.Duration{}, leases: map[uint64]string{},
		notBefore: map[string]int64{}}
}

func (h *History) newClient(name string) int {
	h.clients = append(h.clients, name)
	return len(h.clients) - 1
}

func (h *History) begin(c *call) *callRec {
	r := &callRec{c: c, returned: -1}
	h.calls = append(h.calls, r)
	return r
}

func (h *History) processed(c *call, at time.Duration, reply any, err error, changed bool) *proc {
	p := &proc{at: at, now: int64(at) + h.clock, reply: reply, err: err, changed: changed}
	c.rec.procs = append(c.rec.procs, p)
	return p
}

func (h *History) answered(r *callRec, p *proc, at time.Duration) {
	r.answer, r.returned = p, at
}

// sweep records the decisions of one sweep, and keeps track of the queue.
func (h *History) sweep(at time.Duration, evs []event.Event) {
	if len(evs) > 0 {
		h.sweeps = append(h.sweeps, sweepRec{at: at, evs: evs})
	}
}

// observe keeps, from every event appended, the queue's history and which
// job each lease is of.
func (h *History) observe(e *event.Event, t time.Duration) {
	h.clock = e.Time - int64(t)
	switch e.Type {
	case event.TypeQueued:
		h.since[e.Job] = t
		if e.NotBefore != 0 {
			h.notBefore[e.Job] = e.NotBefore
		}
	case event.TypeAcquired, event.TypeCancelled:
		if e.Type == event.TypeAcquired {
			h.leases[e.Lease] = e.Job
		}
		if from, ok := h.since[e.Job]; ok {
			h.queued[e.Job] = append(h.queued[e.Job], span{from, t})
			delete(h.since, e.Job)
		}
	}
}

// wasQueued reports whether job sat in the queue at some time in [from, to].
func (h *History) wasQueued(job string, from, to time.Duration) bool {
	if s, ok := h.since[job]; ok && s <= to {
		return true
	}
	for _, q := range h.queued[job] {
		if q.from <= to && q.to >= from {
			return true
		}
	}
	return false
}

// never is the return time of an operation whose outcome nobody knows.
const never = math.MaxInt64

// Operations turns the history into porcupine operations.
func (h *History) Operations() []porcupine.Operation {
	var ops []porcupine.Operation
	add := func(client int, call time.Duration, ret int64, in linearize.Input, out linearize.Output) {
		ops = append(ops, porcupine.Operation{ClientId: client, Input: in, Call: int64(call), Output: out, Return: ret})
	}
	jobs := slices.Sorted(maps.Keys(h.queued))
	for _, id := range slices.Sorted(maps.Keys(h.since)) {
		if _, ok := h.queued[id]; !ok {
			jobs = append(jobs, id)
		}
	}
	for _, r := range h.calls {
		for _, p := range r.procs {
			known := p == r.answer
			if !known && !p.changed {
				continue // it changed nothing, and nobody saw what it said
			}
			ret := int64(never)
			if known {
				ret = int64(r.returned)
			}
			for _, o := range h.opsOf(r, p, known, jobs) {
				if !known {
					o.Out = linearize.Output{Unknown: true}
				}
				add(r.c.client, r.c.sent, ret, o.In, o.Out)
			}
		}
	}
	for _, sw := range h.sweeps {
		for i, e := range sw.evs {
			if e.Type != event.TypeExpired {
				continue
			}
			add(sweeperClient, sw.at, int64(sw.at), linearize.Input{Op: linearize.OpExpire, Job: e.Job, Lease: e.Lease}, linearize.Output{State: linearize.ExpiryState(sw.evs, i)})
		}
	}
	return ops
}

// acquireOps returns the operations of an acquire by worker (offering
// offer), processed as p, for up to max jobs that granted gs: one per
// grant, and, when its answer was seen and granted fewer than max, a miss
// of every job that sat in the queue while it was in flight and was due
// when p processed it (strictly: a job due that instant may come due in the
// same instant as the answer of a long poll's end).
func (h *History) acquireOps(r *callRec, p *proc, gs []api.Grant, known bool, worker string, max int, start bool, offer linearize.Route, jobs []string) []linearize.JobOp {
	var out []linearize.JobOp
	given := map[string]bool{}
	for _, g := range gs {
		given[g.Job.ID] = true
		out = append(out, linearize.JobOp{In: linearize.Input{Op: linearize.OpAcquire, Job: g.Job.ID, Worker: worker, Start: start, Offer: offer}, Out: linearize.Output{Lease: g.Lease}})
	}
	if known && len(gs) < max {
		for _, j := range jobs {
			if nb, ok := h.notBefore[j]; ok && nb >= p.now {
				continue
			}
			if !given[j] && h.wasQueued(j, r.c.sent, r.returned) {
				out = append(out, linearize.JobOp{In: linearize.Input{Op: linearize.OpMiss, Job: j, Worker: worker, Offer: offer}})
			}
		}
	}
	return out
}

// opsOf is what processing p of call r did, per job: the shared reading of
// a call (linearize.CallOps), with the simulation's bounds on an acquire's
// misses.
func (h *History) opsOf(r *callRec, p *proc, known bool, jobs []string) []linearize.JobOp {
	reply := p.reply
	if s, ok := reply.(submitted); ok {
		reply = s.created
	}
	jobOf := func(lease uint64) (string, bool) {
		job, ok := h.leases[lease]
		return job, ok
	}
	return linearize.CallOps(r.c.req.model(), reply, p.err, known, jobOf,
		func(gs []api.Grant, worker string, max int, start bool, offer linearize.Route) []linearize.JobOp {
			return h.acquireOps(r, p, gs, known, worker, max, start, offer, jobs)
		})
}
