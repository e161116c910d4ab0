package sim

import (
	"maps"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/leaselog/leaselog/api"
	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/projection"
	"github.com/leaselog/leaselog/timing"
)

// Routing. Each worker takes some kinds of job and offers some labels; each
// job requires labels, has a priority and, now and then, a not_before a
// little ahead. They are drawn from a stream of their own (drawRouting),
// and so that every job can end (liveness), a job's labels are some of those
// of a worker that takes its kind: the first worker takes every kind.
//
// The checker holds, at every grant (routed):
//   - a job goes only to a worker that takes its kind and offers its labels,
//     and not before its not_before;
//   - no higher-priority job that worker could take, due, waited while a
//     lower one was granted to it (the queue's order: priority, then the
//     first queueing). A job the same step put back in the queue is not
//     judged: a report that carries the next acquire reads the queue before
//     its own events (lease/rounds.go), and what it puts back, an evaluation
//     lost, goes to the next worker that asks.
//
// The daemon wakes its parked acquires when a job comes due, as the
// service's long poll does (its timer): at the job's not_before, or, if the
// daemon slept through it, when it wakes.

// maxNotBefore bounds how far ahead of its submission a job's not_before
// is drawn.
const maxNotBefore = 3 * time.Second

// labelPool is what labels are drawn from.
var labelPool = []struct {
	key    string
	values []string
}{{"gpu", []string{"a100", "h100"}}, {"repo", []string{"piloop"}}, {"zone", []string{"eu", "us"}}}

// routing is what a seed drew of the workers' offers, and draws each job's
// scheduling from.
type routing struct {
	r      *rand.Rand
	offers []api.Offer // per worker
}

// drawRouting draws the offers of n workers for seed, from a stream of its
// own: the other draws of a seed stay what they were.
func drawRouting(seed uint64, n int) *routing {
	rt := &routing{r: rand.New(rand.NewPCG(seed, 0x726f757465))}
	for i := range n {
		var o api.Offer
		if i > 0 {
			o.Kinds = [][]string{nil, {"run"}, {"evaluation"}}[rt.r.IntN(3)]
		}
		for _, l := range labelPool {
			if rt.r.IntN(2) == 0 {
				if o.Labels == nil {
					o.Labels = map[string]string{}
				}
				o.Labels[l.key] = l.values[rt.r.IntN(len(l.values))]
			}
		}
		rt.offers = append(rt.offers, o)
	}
	return rt
}

// schedule is a job's scheduling, as its client submits it every time.
type schedule struct {
	labels   map[string]string
	priority int
	delay    time.Duration // its not_before: this long after the daemon receives it
	timing   timing.Config // the timing it asks for of its own (owntiming.go); zero: the daemon's
}

// job draws the scheduling of a job of kind: some of the labels of a worker
// that takes that kind, a priority, and, one time in five, a delay.
func (rt *routing) job(kind string) schedule {
	var takers []api.Offer
	for _, o := range rt.offers {
		if len(o.Kinds) == 0 || slices.Contains(o.Kinds, kind) {
			takers = append(takers, o)
		}
	}
	o := takers[rt.r.IntN(len(takers))]
	var sc schedule
	for _, k := range slices.Sorted(maps.Keys(o.Labels)) {
		if rt.r.IntN(2) == 0 {
			if sc.labels == nil {
				sc.labels = map[string]string{}
			}
			sc.labels[k] = o.Labels[k]
		}
	}
	sc.priority = []int{-1, 0, 0, 0, 1, 5}[rt.r.IntN(6)]
	if rt.r.IntN(5) == 0 {
		sc.delay = time.Duration(rt.r.Int64N(int64(maxNotBefore)))
	}
	return sc
}

// offerOf is worker id's offer, as the service takes it; none for an id
// that is no simulated worker's.
func (s *Sim) offerOf(id string) projection.Offer {
	for i, w := range s.workers {
		if w.id == id {
			o := s.route.offers[i]
			var out projection.Offer
			for _, k := range o.Kinds {
				kind, _ := event.ParseKind(k)
				out.Kinds = append(out.Kinds, kind)
			}
			out.Labels = event.MustLabels(o.Labels)
			return out
		}
	}
	return projection.Offer{}
}

// routed checks the grants of one step of the daemon, evs, against the
// table after it (the checker's fold).
func (k *checker) routed(evs []event.Event) {
	granted := map[string][]projection.Job{} // by worker
	requeued := map[string]bool{}
	var at int64
	for _, e := range evs {
		if e.Type == event.TypeQueued {
			requeued[e.Job] = true
		}
		if e.Type != event.TypeAcquired {
			continue
		}
		j, ok := k.fold.Job(e.Job)
		if !ok {
			continue // ended in the same step: nothing to judge
		}
		offer := k.s.offerOf(e.Worker)
		if !offer.Takes(j.Kind, j.Labels) {
			k.s.fail("job %s (%s, labels {%s}) GRANTED TO A WORKER THAT CANNOT TAKE IT: %s takes kinds %v, offers {%s}",
				j.ID, j.Kind, j.Labels, e.Worker, offer.Kinds, offer.Labels)
			return
		}
		if e.Time < j.NotBefore {
			k.s.fail("job %s GRANTED BEFORE ITS NOT_BEFORE: at %d, not before %d", j.ID, e.Time, j.NotBefore)
			return
		}
		granted[e.Worker], at = append(granted[e.Worker], j), e.Time
	}
	if len(granted) == 0 {
		return
	}
	queued := k.fold.Queued(0)
	for _, w := range slices.Sorted(maps.Keys(granted)) {
		offer := k.s.offerOf(w)
		for _, q := range queued {
			if q.NotBefore > at || requeued[q.ID] || !offer.Takes(q.Kind, q.Labels) {
				continue
			}
			for _, g := range granted[w] {
				if better(q, g) {
					k.s.fail("job %s (priority %d, place %d) WAITED WHILE A LOWER ONE WAS GRANTED: %s (priority %d, place %d) to %s, which takes both",
						q.ID, q.Priority, q.Place, g.ID, g.Priority, g.Place, w)
					return
				}
			}
		}
	}
}

// better reports whether a goes before b in the queue.
func better(a, b projection.Job) bool {
	if a.Priority != b.Priority {
		return a.Priority > b.Priority
	}
	return a.Place < b.Place
}
