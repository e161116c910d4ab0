package projection

import (
	"cmp"
	"slices"
	"strings"
)

// Paged reads: a page of what the table holds, after a cursor, in the order
// the API lists it (jobs by id, leases by token). They cost what the table
// holds, never the length of the history (which the archive keeps), and
// copy only the page: a read of the first page of 40,000 queued jobs walks
// them once and keeps at most 2n of them.

// JobsAfter returns, by id, up to n of the jobs f selects whose id sorts
// after after ("" is before every id): of those the table holds and, in
// RetireKeep mode, those it retired. n must be positive.
func (t *Table) JobsAfter(f JobFilter, after string, n int) []Job {
	var b smallest[Job]
	b.n, b.cmp = n, func(x, y Job) int { return cmp.Compare(x.ID, y.ID) }
	// jobList holds what jobs holds, in a slice: a faster walk than the map's.
	for _, j := range t.jobList.items {
		// id and filter first: the view is built only for a candidate.
		if j != nil && j.id > after && (f.State == 0 || j.state == f.State) && (f.Kind == 0 || j.kind == f.Kind) && (f.Outcome == 0 || j.outcome == f.Outcome) && strings.HasPrefix(j.id, f.Prefix) && f.Labels.Within(j.labels) {
			b.add(j.view())
		}
	}
	for id, j := range t.retired.jobs {
		if id > after && f.Selects(j) {
			b.add(j)
		}
	}
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
