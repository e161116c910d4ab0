package projection

import (
	"cmp"
	"slices"

	"github.com/leaselog/leaselog/fsm"
)

// Paged reads: a page of what the table holds, after a cursor, in the order
// the API lists it (jobs by id, leases by token). They cost the page, never
// what the table holds nor the length of the history (which the archive
// keeps): jobs are walked in id order from the cursor (byID, index.go), and
// only a page's worth of views is built.

// JobsAfter returns, by id, up to n of the jobs f selects whose id sorts
// after after ("" is before every id): of those the table holds and, in
// RetireKeep mode, those it retired. n must be positive.
func (t *Table) JobsAfter(f JobFilter, after string, n int) []Job {
	// Each state's jobs are walked to n matches at most; the page is the
	// n smallest of what the walks found.
	var found []*job
	for s := range t.byID {
		if f.State != fsm.None && fsm.State(s) != f.State {
			continue
		}
		k := 0
		t.byID.ascend(fsm.State(s), after, f.Prefix, func(j *job) bool {
			if (f.Kind == 0 || j.kind == f.Kind) && (f.Outcome == 0 || j.outcome == f.Outcome) && f.Labels.Within(j.labels) {
				found = append(found, j)
				k++
			}
			return k < n
		})
	}
	slices.SortFunc(found, func(x, y *job) int { return cmp.Compare(x.id, y.id) })
	found = found[:min(n, len(found))]
	b := smallest[Job]{n: n, cmp: func(x, y Job) int { return cmp.Compare(x.ID, y.ID) }, items: make([]Job, 0, len(found))}
	for _, j := range found {
		b.items = append(b.items, j.view())
	}
	if f.State != fsm.None && !f.State.Terminal() {
		return b.items // every job retired has ended
	}
	k := 0
	ascendIDs(t.retired.ids, after, f.Prefix, func(id string) bool {
		if j := t.retired.jobs[id]; f.Selects(j) {
			b.add(j)
			k++
		}
		return k < n
	})
	return b.result()
}

// LeasesAfter returns, by token, up to n of the leases f selects whose token
// is greater than after: of those the table holds and, in RetireKeep mode,
// those it retired. n must be positive.
func (t *Table) LeasesAfter(f LeaseFilter, after uint64, n int) []Lease {
	var out []Lease
	// leaseList is in token order: the walk stops at the page's end.
	for _, l := range t.leaseList.items {
		if l == nil || l.id <= after {
			continue
		}
		if v := l.view(); f.Selects(v) {
			if out = append(out, v); len(out) == n {
				break
			}
		}
	}
	if len(t.retired.leases) == 0 || (f.State == 0 || f.State.Live()) {
		return out
	}
	b := smallest[Lease]{n: n, cmp: func(x, y Lease) int { return cmp.Compare(x.ID, y.ID) }, items: out}
	for id, l := range t.retired.leases {
		if id > after && f.Selects(l) {
			b.add(l)
		}
	}
	return b.result()
}

// smallest keeps the n smallest of what it is given, by cmp, in O(log n)
// amortised per item and at most 2n items of memory.
type smallest[T any] struct {
	n     int
	cmp   func(x, y T) int
	items []T
}

func (b *smallest[T]) add(v T) {
	b.items = append(b.items, v)
	if len(b.items) >= 2*b.n+16 {
		b.trim()
	}
}

func (b *smallest[T]) trim() {
	slices.SortFunc(b.items, b.cmp)
	if len(b.items) > b.n {
		clear(b.items[b.n:])
		b.items = b.items[:b.n]
	}
}

func (b *smallest[T]) result() []T {
	b.trim()
	return b.items
}
