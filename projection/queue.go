package projection

import (
	"cmp"
	"slices"
	"strings"

	"github.com/leaselog/leaselog/event"
)

// The queue. A worker does not take the oldest job: it takes, among the
// queued jobs it can take — of a kind it takes, every label the job requires
// offered with an equal value, due (its not_before passed) —, the one of
// highest priority, then the one queued first. An evaluation queued again
// after a loss keeps its place: its first queueing's seq.
//
// So that an acquire looks at no more than it can take, the queued jobs are
// split by class, the kind and labels they require: each class is a heap of
// its due jobs, best first. An acquire looks at the heads of the classes its
// offer takes (which classes an offer takes is remembered until a class
// comes or goes), and no job it cannot take costs it anything. Jobs not yet
// due wait in one heap by not_before, and enter their class when the service
// says it is time (Promote): the fold reads no clock.
//
//	classes   (run, {})          [j7 p=5] [j2 p=0] [j9 p=0] ...
//	          (evaluation, {gpu=a100})   [j4 p=1] ...
//	delayed   [j3 not_before=10:00] [j8 not_before=10:05] ...
//
// Heap positions are no part of the table's state: which job an acquire
// takes depends on the jobs' priorities, places and times alone (no two jobs
// share a place), so a table restored from a snapshot, whose heaps are built
// anew, picks as the one that folded the log.

// Offer is what a worker takes: the kinds it takes (none: every kind) and
// the labels it offers.
type Offer struct {
	Kinds  []event.Kind
	Labels event.Labels
}

// Takes reports whether a worker offering o may take a job of kind k that
// requires labels l.
func (o Offer) Takes(k event.Kind, l event.Labels) bool {
	return (len(o.Kinds) == 0 || slices.Contains(o.Kinds, k)) && l.Within(o.Labels)
}

// key identifies o among the offers the queue remembers.
func (o Offer) key() string {
	var kinds byte
	for _, k := range o.Kinds {
		kinds |= 1 << (k & 7)
	}
	return string(kinds) + string(o.Labels)
}

type classKey struct {
	kind   event.Kind
	labels event.Labels
}

type class struct {
	classKey
	ready jobHeap // its due jobs, best first
	n     int     // its queued jobs, due or not
	at    int     // place in queue.list
}

type queue struct {
	classes map[classKey]*class
	list    []*class // the classes, with queued jobs or empty
	empty   int      // classes of list with no job
	delayed jobHeap  // queued jobs not yet due, soonest first
	n       int      // queued jobs
	// gen counts the changes to list; takes remembers, by offer, the
	// classes it takes, as of a generation.
	gen   uint64
	takes map[string]*takeable
}

type takeable struct {
	gen     uint64
	classes []*class
}

// maxOffers bounds the offers the queue remembers: past it, it forgets them
// all and learns them again.
const maxOffers = 1024

// push queues j, whose scheduling fields are set, at time at (the event's):
// in its class if it is due then, or among the delayed.
func (q *queue) push(j *job, at int64) {
	if q.classes == nil {
		q.classes = make(map[classKey]*class)
	}
	k := classKey{j.kind, j.labels}
	c := q.classes[k]
	if c == nil {
		c = &class{classKey: k, at: len(q.list)}
		q.classes[k] = c
		q.list = append(q.list, c)
		q.gen++
	} else if c.n == 0 {
		q.empty--
	}
	c.n++
	q.n++
	j.class = c
	if j.notBefore > at {
		j.waiting = true
		q.delayed.push(j)
	} else {
		c.ready.push(j)
	}
}

// labels returns l, of a job of kind k, in memory of the table's own: that
// of its class, when the class is there, so that the jobs of a class share
// it, or a copy.
func (q *queue) labels(k event.Kind, l event.Labels) event.Labels {
	if l == "" {
		return ""
	}
	if c := q.classes[classKey{k, l}]; c != nil {
		return c.labels
	}
	return event.Labels(strings.Clone(string(l)))
}

// remove takes j, queued, out of the queue.
func (q *queue) remove(j *job) {
	c := j.class
	if j.waiting {
		q.delayed.remove(int(j.qi))
		j.waiting = false
	} else {
		c.ready.remove(int(j.qi))
	}
	j.class = nil
	q.n--
	if c.n--; c.n == 0 {
		q.empty++
		q.forget()
	}
}

// forget drops the classes left with no job, once they are many and most:
// a class that empties and fills again, as a steady trickle of jobs of one
// kind does, so costs nothing, and classes of labels no longer in use go.
func (q *queue) forget() {
	if q.empty <= 64 || q.empty <= len(q.list)/2 {
		return
	}
	kept := q.list[:0]
	for _, c := range q.list {
		if c.n == 0 {
			delete(q.classes, c.classKey)
			continue
		}
		c.at = len(kept)
		kept = append(kept, c)
	}
	clear(q.list[len(kept):])
	q.list, q.empty = kept, 0
	q.gen++
}

// promote moves the delayed jobs due at now into their classes, and says how
// many it moved.
func (q *queue) promote(now int64) int {
	n := 0
	for len(q.delayed.items) > 0 && q.delayed.items[0].notBefore <= now {
		j := q.delayed.remove(0)
		j.waiting = false
		j.class.ready.push(j)
		n++
	}
	return n
}

// taken returns the classes o takes.
func (q *queue) taken(o Offer) []*class {
	key := o.key()
	tk := q.takes[key]
	if tk != nil && tk.gen == q.gen {
		return tk.classes
	}
	if tk == nil {
		if q.takes == nil || len(q.takes) >= maxOffers {
			q.takes = make(map[string]*takeable)
		}
		tk = &takeable{}
		q.takes[key] = tk
	}
	tk.gen, tk.classes = q.gen, tk.classes[:0]
	for _, c := range q.list {
		if o.Takes(c.kind, c.labels) {
			tk.classes = append(tk.classes, c)
		}
	}
	return tk.classes
}

// pick calls fn on up to n due jobs o takes, best first. It walks each
// class's heap in order without taking from it: a frontier of heap
// positions, the best of which is the next job, its children then joining
// the frontier.
func (q *queue) pick(o Offer, n int, fn func(*job)) {
	type pos struct {
		c *class
		i int
	}
	var frontier []pos
	for _, c := range q.taken(o) {
		if len(c.ready.items) > 0 {
			frontier = append(frontier, pos{c, 0})
		}
	}
	for ; n > 0 && len(frontier) > 0; n-- {
		best := 0
		for i := 1; i < len(frontier); i++ {
			if before(frontier[i].c.ready.items[frontier[i].i], frontier[best].c.ready.items[frontier[best].i]) {
				best = i
			}
		}
		p := frontier[best]
		fn(p.c.ready.items[p.i])
		frontier[best] = frontier[len(frontier)-1]
		frontier = frontier[:len(frontier)-1]
		for _, child := range []int{2*p.i + 1, 2*p.i + 2} {
			if child < len(p.c.ready.items) {
				frontier = append(frontier, pos{p.c, child})
			}
		}
	}
}

// each calls fn on every queued job, in no particular order.
func (q *queue) each(fn func(*job)) {
	for _, c := range q.list {
		for _, j := range c.ready.items {
			fn(j)
		}
	}
	for _, j := range q.delayed.items {
		fn(j)
	}
}

// before is the queue's order: higher priority first, then the first
// queued. No two jobs share a place, so it is total.
func before(a, b *job) bool {
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	return a.place < b.place
}

// sooner is the order of the delayed: due first, then the queue's order.
func sooner(a, b *job) bool {
	if a.notBefore != b.notBefore {
		return a.notBefore < b.notBefore
	}
	return before(a, b)
}

// jobHeap is a binary heap of jobs, each of which knows its position (qi).
// A class's heap orders by before, the delayed by sooner (delayed).
type jobHeap struct {
	items   []*job
	delayed bool
}

func (h *jobHeap) less(a, b *job) bool {
	if h.delayed {
		return sooner(a, b)
	}
	return before(a, b)
}

func (h *jobHeap) set(i int, j *job) {
	h.items[i] = j
	j.qi = int32(i)
}

func (h *jobHeap) push(j *job) {
	h.items = append(h.items, j)
	h.set(len(h.items)-1, j)
	h.up(len(h.items) - 1)
}

// remove takes out and returns the job at position i.
func (h *jobHeap) remove(i int) *job {
	j := h.items[i]
	last := len(h.items) - 1
	if i != last {
		h.set(i, h.items[last])
	}
	h.items[last] = nil
	h.items = h.items[:last]
	if i != last {
		if !h.down(i) {
			h.up(i)
		}
	}
	if cap(h.items) > 1024 && len(h.items) < cap(h.items)/4 {
		h.items = slices.Clip(slices.Clone(h.items))
	}
	j.qi = -1
	return j
}

func (h *jobHeap) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !h.less(h.items[i], h.items[p]) {
			return
		}
		a, b := h.items[i], h.items[p]
		h.set(i, b)
		h.set(p, a)
		i = p
	}
}

// down moves the job at i down to its place and says whether it moved.
func (h *jobHeap) down(i int) bool {
	start := i
	for {
		c := 2*i + 1
		if c >= len(h.items) {
			break
		}
		if r := c + 1; r < len(h.items) && h.less(h.items[r], h.items[c]) {
			c = r
		}
		if !h.less(h.items[c], h.items[i]) {
			break
		}
		a, b := h.items[i], h.items[c]
		h.set(i, b)
		h.set(c, a)
		i = c
	}
	return i > start
}

// Promote moves the queued jobs whose not_before has come by now (wall
// time, Unix ns) to where acquires find them, and says how many it moved:
// the service calls it with its clock before it picks, and wakes the
// acquires waiting when it moved any. It changes which jobs Pick sees, and
// nothing of the table's state.
func (t *Table) Promote(now int64) int { return t.queue.promote(now) }

// NextDue is the earliest not_before of a queued job not yet promoted.
func (t *Table) NextDue() (int64, bool) {
	if len(t.queue.delayed.items) == 0 {
		return 0, false
	}
	return t.queue.delayed.items[0].notBefore, true
}

// Pick returns up to n queued jobs a worker offering o may take, in the
// order it is to take them: of those promoted (Promote), the highest
// priority first, then the first queued. It looks at the classes o takes
// and nothing else.
func (t *Table) Pick(o Offer, n int) []Job {
	var out []Job
	t.queue.pick(o, n, func(j *job) { out = append(out, j.view()) })
	return out
}

// Queued returns up to n queued jobs (n <= 0: all), due or not, in the
// queue's order: the highest priority first, then the first queued.
func (t *Table) Queued(n int) []Job {
	js := make([]*job, 0, t.queue.n)
	t.queue.each(func(j *job) { js = append(js, j) })
	slices.SortFunc(js, func(a, b *job) int {
		if before(a, b) {
			return -1
		}
		return 1
	})
	if n > 0 && len(js) > n {
		js = js[:n]
	}
	out := make([]Job, len(js))
	for i, j := range js {
		out[i] = j.view()
	}
	return out
}

// Class is the queued jobs that require one kind and one set of labels.
type Class struct {
	Kind   event.Kind
	Labels event.Labels
	Queued int // its queued jobs, due or not
}

// Classes returns the classes of the queued jobs, by kind, then labels.
func (t *Table) Classes() []Class {
	var out []Class
	for _, c := range t.queue.list {
		if c.n > 0 {
			out = append(out, Class{Kind: c.kind, Labels: c.labels, Queued: c.n})
		}
	}
	slices.SortFunc(out, func(a, b Class) int {
		return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Labels, b.Labels))
	})
	return out
}
