package projection

import (
	"slices"
	"time"
)

// recency orders records by the present time they were last heard from,
// oldest first, so that the sweeper finds the silent ones by walking from the
// front and stops at the first that is not. It is a doubly linked list threaded
// through the records: times almost always grow, so a record heard from again
// moves to the back in O(1); a time that steps back walks to its place.
type recency[T any, P interface {
	*T
	node() *node[T]
}] struct {
	front, back P
}

// node is the part of a record that recency owns.
type node[T any] struct {
	prev, next *T
	at         int64 // present time last heard from
	in         bool
}

// touch (re)places p at present time at.
func (r *recency[T, P]) touch(p P, at int64) {
	r.remove(p)
	n := p.node()
	n.at, n.in = at, true
	after := r.back
	for after != nil && after.node().at > at {
		after = P(after.node().prev)
	}
	if after == nil { // p goes to the front
		n.prev, n.next = nil, (*T)(r.front)
		if r.front != nil {
			r.front.node().prev = (*T)(p)
		} else {
			r.back = p
		}
		r.front = p
		return
	}
	an := after.node()
	n.prev, n.next = (*T)(after), an.next
	if an.next != nil {
		P(an.next).node().prev = (*T)(p)
	} else {
		r.back = p
	}
	an.next = (*T)(p)
}

func (r *recency[T, P]) remove(p P) {
	n := p.node()
	if !n.in {
		return
	}
	if n.prev != nil {
		P(n.prev).node().next = n.next
	} else {
		r.front = P(n.next)
	}
	if n.next != nil {
		P(n.next).node().prev = n.prev
	} else {
		r.back = P(n.prev)
	}
	n.prev, n.next, n.in = nil, nil, false
}

// upTo calls fn, oldest first, on every record last heard at or before v.
func (r *recency[T, P]) upTo(v int64, fn func(P)) {
	for p := r.front; p != nil && p.node().at <= v; p = P(p.node().next) {
		fn(p)
	}
}

// each calls fn on every record, oldest first.
func (r *recency[T, P]) each(fn func(P)) {
	for p := r.front; p != nil; p = P(p.node().next) {
		fn(p)
	}
}

func (l *lease) node() *node[lease]   { return &l.order }
func (w *worker) node() *node[worker] { return &w.order }

// liveSet holds the live leases for the sweeper, a recency list per
// toleration: the leases of the daemon's timing in one, and those granted
// with a timing of their own in one per toleration they have. Within a list
// deadlines (heard + toleration) come in the order leases were heard, so a
// heartbeat still moves its lease to the back in O(1), and the sweeper finds
// the expired ones by walking each list from its front and stopping at the
// first that is not: O(expired + tolerations in use), never O(live).
type liveSet struct {
	def recency[lease, *lease]                    // the daemon's timing
	own map[time.Duration]*recency[lease, *lease] // by toleration
}

func (s *liveSet) list(l *lease) *recency[lease, *lease] {
	if l.timing == nil {
		return &s.def
	}
	r := s.own[l.timing.Toleration]
	if r == nil {
		if s.own == nil {
			s.own = make(map[time.Duration]*recency[lease, *lease])
		}
		r = new(recency[lease, *lease])
		s.own[l.timing.Toleration] = r
	}
	return r
}

// touch (re)places l at present time at.
func (s *liveSet) touch(l *lease, at int64) { s.list(l).touch(l, at) }

// remove takes l out; a list left empty goes, so that tolerations no lease
// uses any more cost the sweeper nothing.
func (s *liveSet) remove(l *lease) {
	if !l.order.in {
		return
	}
	r := s.list(l)
	r.remove(l)
	if r.front == nil && l.timing != nil {
		delete(s.own, l.timing.Toleration)
	}
}

// tolerations are the tolerations of the leases with a timing of their own,
// ascending: the order snapshots list them in.
func (s *liveSet) tolerations() []time.Duration {
	ts := make([]time.Duration, 0, len(s.own))
	for d := range s.own {
		ts = append(ts, d)
	}
	slices.Sort(ts)
	return ts
}

// each calls fn on every live lease: those of the daemon's timing in
// recency order, then each toleration's (ascending) in theirs.
func (s *liveSet) each(fn func(*lease)) {
	s.def.each(fn)
	for _, d := range s.tolerations() {
		s.own[d].each(fn)
	}
}

// expired calls fn on every lease silent past its toleration at present time
// p, def being the daemon's toleration.
func (s *liveSet) expired(p int64, def time.Duration, fn func(*lease)) {
	s.def.upTo(p-int64(def)-1, fn)
	for d, r := range s.own {
		r.upTo(p-int64(d)-1, fn)
	}
}
