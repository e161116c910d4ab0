package projection

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
