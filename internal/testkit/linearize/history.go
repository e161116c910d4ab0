package linearize

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
)

// never is the return time of an operation whose outcome nobody knows:
// porcupine may place it anywhere after its call, the end included, where
// it is as good as not having happened.
const never = math.MaxInt64

// Operations turns the recorded calls into porcupine operations, one per
// job a call concerns, with evs, the finished stream's events (the truth,
// whichever daemons appended them) for what the calls alone cannot say:
// which job a lease is of, and what the daemon decided by itself.
//
//   - A call answered (without error, or with a definite refusal: an API
//     error that is not api.Retryable) is an operation with that answer,
//     from its call to its return.
//   - A call that failed without an answer (a transport error, a timeout, a
//     daemon failing or deposed: a 5xx) may or may not have happened: an
//     operation with an unknown output that never returns. A read or a
//     heartbeat without an answer changed nothing the model tracks and is
//     left out, as is an acquire without one: what such acquires granted is
//     in the stream (a lease.acquired whose token no answer gave), an
//     unknown acquire of that job, called when the worker's first
//     unanswered acquire was.
//   - An acquire (or a report's next acquire; a report answered as the
//     repeat of an earlier answer made none) answered with fewer grants
//     than it asked for is a miss of every other job that may have sat in
//     the queue while it was in flight: the stream says when a job was
//     queued, and the calls bound it in time — a job was not queued before
//     its first submission was called, nor after the acquire that took it
//     (or a call that saw it cancelled) returned.
//   - The sweeper's expiries (lease.expired) are operations of the daemon
//     itself (client 0), as in the simulation; with no sweep instant to put
//     them at, each is bounded by what the stream's order says against the
//     calls: after the call of every acquire answered with a token below
//     its seq, before the return of every answer naming a seq above it (a
//     token, a report's seq).
//
// A takeover (daemon.started reason=takeover) is what a restart is in the
// simulation: no operation. The daemon that takes over holds the stream's
// table, its leases live on under the same tokens, and what the deposed
// daemon could not answer is unknown, as what a crashed one could not.
func (r *Recorder) Operations(evs []event.Event) ([]porcupine.Operation, error) {
	r.mu.Lock()
	calls := slices.Clone(r.calls)
	copies := make([]record, len(calls))
	for i, c := range calls {
		copies[i] = *c
	}
	r.mu.Unlock()
	h := newHistory(copies, evs)
	if err := h.bound(); err != nil {
		return nil, err
	}
	var ops []porcupine.Operation
	for i := range h.calls {
		ops = h.callOps(ops, &h.calls[i])
	}
	ops, err := h.orphanGrants(ops)
	if err != nil {
		return nil, err
	}
	return h.expiries(ops)
}

// Check checks the recorded calls, with evs (the finished stream's events),
// against Model within timeout (see Operations and the package-level Check).
func (r *Recorder) Check(evs []event.Event, timeout time.Duration) (Result, error) {
	ops, err := r.Operations(evs)
	if err != nil {
		return Result{}, err
	}
	return Check(ops, timeout)
}

// history is the calls and the stream, indexed for Operations.
type history struct {
	calls  []record
	evs    []event.Event
	leases map[uint64]event.Event // token -> its lease.acquired
	spans  map[string][]span      // job -> when it was queued, in seq
	jobs   []string               // every job the stream queued, in order
	given  map[uint64]int64       // token -> the earliest return of an answer that gave it
}

// span is one stay of a job in the queue: from the lease.queued at seq from
// to the event that ended it at seq to (0 while it lasts), bounded in time
// by the calls: it began at or after after, and had ended by before.
type span struct {
	from, to      uint64
	end           event.Type
	after, before int64
}

func newHistory(calls []record, evs []event.Event) *history {
	h := &history{calls: calls, evs: evs, leases: map[uint64]event.Event{}, spans: map[string][]span{}, given: map[uint64]int64{}}
	for _, e := range evs {
		switch e.Type {
		case event.TypeQueued:
			if _, ok := h.spans[e.Job]; !ok {
				h.jobs = append(h.jobs, e.Job)
			}
			h.spans[e.Job] = append(h.spans[e.Job], span{from: e.Seq, before: never})
		case event.TypeAcquired, event.TypeCancelled:
			if e.Type == event.TypeAcquired {
				h.leases[e.Lease] = e
			}
			if s := h.spans[e.Job]; len(s) > 0 && s[len(s)-1].to == 0 {
				s[len(s)-1].to, s[len(s)-1].end = e.Seq, e.Type
			}
		}
	}
	return h
}

// known says whether c was answered: without error, or with a definite
// refusal.
func known(c *record) bool { return c.ret >= 0 && !api.Retryable(c.err) }

// grantsOf returns the grants c was answered (none while in flight or
// failed), how many it asked for, and whether it is an acquire (or a report
// carrying one) at all. A report carrying one answered without its next
// (api.ReportReply.Next absent) repeats an earlier answer: the acquire was
// not made by this call (the first that accepted the report made it, its
// answer perhaps lost), so the call is no acquire.
func grantsOf(c *record) (gs []api.Grant, asked int, ok bool) {
	answered := c.ret >= 0 && c.err == nil
	switch q := c.req; q.Op {
	case OpAcquire:
		if answered {
			gs = c.reply.([]api.Grant)
		}
		return gs, q.Max, true
	case OpReport:
		if q.Report.Next == nil {
			return nil, 0, false
		}
		if answered {
			n := c.reply.(api.ReportReply).Next
			if n == nil {
				return nil, 0, false
			}
			gs = n.Leases
		}
		return gs, max(q.Report.Next.Max, 1), true
	}
	return nil, 0, false
}

// bound bounds each job's stays in the queue in time from the calls.
func (h *history) bound() error {
	submitted := map[string]int64{}
	cancelled := map[string]int64{}
	for i := range h.calls {
		c := &h.calls[i]
		switch q := c.req; q.Op {
		case OpSubmit:
			if t, ok := submitted[q.Job]; !ok || c.call < t {
				submitted[q.Job] = c.call
			}
		case OpCancel, OpKill, OpRead:
			if known(c) && c.err == nil && c.reply.(api.Job).State == "cancelled" {
				id := c.reply.(api.Job).ID
				if t, ok := cancelled[id]; !ok || c.ret < t {
					cancelled[id] = c.ret
				}
			}
		}
		if gs, _, ok := grantsOf(c); ok && known(c) {
			for _, g := range gs {
				if t, ok := h.given[g.Lease]; !ok || c.ret < t {
					h.given[g.Lease] = c.ret
				}
			}
		}
	}
	for _, job := range h.jobs {
		first, ok := submitted[job]
		if !ok {
			return fmt.Errorf("linearize: job %s is in the stream, but no recorded call submitted it: record every call from the first", job)
		}
		for i := range h.spans[job] {
			s := &h.spans[job][i]
			if i == 0 {
				s.after = first // a requeue's stay began at an expiry or a loss: any time
			}
			switch s.end {
			case event.TypeAcquired:
				if t, ok := h.given[s.to]; ok {
					s.before = t
				}
			case event.TypeCancelled:
				if t, ok := cancelled[job]; ok {
					s.before = t
				}
			}
		}
	}
	return nil
}

// mayBeQueued says whether job may have sat in the queue at some time in
// [from, to].
func (h *history) mayBeQueued(job string, from, to int64) bool {
	for _, s := range h.spans[job] {
		if s.after <= to && s.before >= from {
			return true
		}
	}
	return false
}

// callOps appends the operations of call c: an answer nobody saw is an
// operation with an unknown output that never returns.
func (h *history) callOps(ops []porcupine.Operation, c *record) []porcupine.Operation {
	ok := known(c)
	jobOf := func(lease uint64) (string, bool) {
		l, found := h.leases[lease]
		return l.Job, found
	}
	acquired := func(gs []api.Grant, worker string, asked int, start bool, offer Route) []JobOp {
		if !ok {
			return nil // what it granted is in the stream: orphanGrants
		}
		return h.acquireOps(c, gs, asked, worker, start, offer)
	}
	for _, o := range CallOps(c.req, c.reply, c.err, ok, jobOf, acquired) {
		out, ret := o.Out, c.ret
		if !ok {
			out, ret = Output{Unknown: true}, never
		}
		ops = append(ops, porcupine.Operation{ClientId: c.client, Input: o.In, Call: c.call, Output: out, Return: ret})
	}
	return ops
}

// acquireOps returns the operations of answered acquire c by worker, for up
// to asked jobs, that granted gs: one per grant and, when it granted fewer
// than it asked for, a miss of every other job that may have been queued
// while it was in flight.
func (h *history) acquireOps(c *record, gs []api.Grant, asked int, worker string, start bool, offer Route) []JobOp {
	var ops []JobOp
	given := map[string]bool{}
	for _, g := range gs {
		given[g.Job.ID] = true
		ops = append(ops, JobOp{Input{Op: OpAcquire, Job: g.Job.ID, Worker: worker, Start: start, Offer: offer}, Output{Lease: g.Lease}})
	}
	if len(gs) >= asked {
		return ops
	}
	for _, job := range h.jobs {
		if !given[job] && h.mayBeQueued(job, c.call, c.ret) {
			ops = append(ops, JobOp{Input{Op: OpMiss, Job: job, Worker: worker, Offer: offer}, Output{}})
		}
	}
	return ops
}

// orphanGrants appends an unknown acquire for every lease the stream
// granted that no answer gave: an acquire by its worker that failed without
// an answer made it, called no earlier than the first of them.
func (h *history) orphanGrants(ops []porcupine.Operation) ([]porcupine.Operation, error) {
	for _, e := range h.evs {
		if e.Type != event.TypeAcquired {
			continue
		}
		if _, ok := h.given[e.Lease]; ok {
			continue
		}
		var first *record
		start, offer := false, Route{}
		for i := range h.calls {
			c := &h.calls[i]
			if _, _, ok := grantsOf(c); !ok || known(c) || (first != nil && c.call >= first.call) {
				continue
			}
			switch q := c.req; q.Op {
			case OpAcquire:
				if q.Worker == e.Worker {
					first, start, offer = c, false, RouteOf(q.Offer)
				}
			case OpReport:
				if q.Report.Worker == e.Worker {
					first, start, offer = c, q.Report.Next.Start, RouteOf(q.Report.Next.Offer)
				}
			}
		}
		if first == nil {
			return nil, fmt.Errorf("linearize: lease %d of job %s was granted to %s, by no recorded call: record every call", e.Lease, e.Job, e.Worker)
		}
		ops = append(ops, porcupine.Operation{ClientId: first.client, Call: first.call, Return: never,
			Input: Input{Op: OpAcquire, Job: e.Job, Worker: e.Worker, Start: start, Offer: offer}, Output: Output{Unknown: true}})
	}
	return ops, nil
}

// expiries appends the sweeper's expiries, each bounded in time by the
// answers that name seqs around it.
func (h *history) expiries(ops []porcupine.Operation) ([]porcupine.Operation, error) {
	for i, e := range h.evs {
		if e.Type != event.TypeExpired {
			continue
		}
		from, to := int64(0), int64(never)
		for k := range h.calls {
			c := &h.calls[k]
			if !known(c) {
				continue
			}
			gs, _, _ := grantsOf(c)
			for _, g := range gs {
				if g.Lease < e.Seq {
					from = max(from, c.call) // its decision came before the expiry's
				} else {
					to = min(to, c.ret) // after it
				}
			}
			if q := c.req; q.Op == OpReport && c.err == nil && q.Lease != 0 {
				if seq := c.reply.(api.ReportReply).Seq; seq > e.Seq {
					to = min(to, c.ret) // the answer was recorded after the expiry
				}
			}
		}
		if to < from {
			return nil, fmt.Errorf("linearize: the stream has lease %d expire at seq %d after a grant called at %v but before one that returned at %v: its order contradicts real time",
				e.Lease, e.Seq, time.Duration(from), time.Duration(to))
		}
		state := ExpiryState(h.evs, i)
		ops = append(ops, porcupine.Operation{ClientId: 0, Call: from, Return: to,
			Input: Input{Op: OpExpire, Job: e.Job, Lease: e.Lease}, Output: Output{State: state}})
	}
	return ops, nil
}
