package projection

import (
	"bytes"
	"strings"

	"github.com/google/btree"

	"github.com/leaselog/leaselog/event"
)

// A job that has ended (reported, cancelled, failed) can change no more, but
// callers still ask about it: a repeated submit of its id, GET of the job, a
// duplicate report, a late stale report on one of its leases. Keeping every
// such job in memory would make the table, its snapshots and a restart grow
// with the whole history. So the table retires a job the moment it ends: the
// job and its leases leave the table, and what becomes of them is the
// table's RetireMode. Stale report fingerprints are retired as soon as they
// are recorded, for the same reason.
//
// Retiring is part of the fold, not a decision taken beside it: every table
// at the same seq holds the same records in memory, whichever way it was
// built (from nothing, or from a snapshot and a tail), and Snapshot, which
// covers only what is in memory, gives the same bytes.

// RetireMode says what a table does with what it retires.
type RetireMode uint8

const (
	// RetireKeep keeps retired jobs, leases and stale reports in memory, where
	// the table's queries still find them: a table with no store behind it
	// (replay --verify, golden files, tests). The default.
	RetireKeep RetireMode = iota
	// RetireRecord encodes them as archive records (see ArchiveJobKey) for
	// the caller to take with TakeRetired and write with the events that
	// retired them: the lease service.
	RetireRecord
	// RetireDrop forgets them: their records are in the store already (a
	// restart folding the tail of a log of the current format).
	RetireDrop
)

// SetRetire sets what the table does with what it retires from now on.
// Switching away from RetireKeep forgets what was kept.
func (t *Table) SetRetire(m RetireMode) {
	t.retireMode = m
	if m != RetireKeep {
		t.retired = retired{}
		t.stale = nil
	}
	t.outbox.reset()
}

// TakeRetired returns the archive records of what was retired since the last
// call, in RetireRecord mode. They are valid until the next Apply.
func (t *Table) TakeRetired() []Record {
	recs := t.outbox.recs
	t.outbox.reset()
	return recs
}

// retired is what a RetireKeep table has retired: views, which own their memory.
type retired struct {
	jobs   map[string]Job
	ids    *btree.BTreeG[string] // jobs' ids, in order: for a page (JobsAfter)
	leases map[uint64]Lease
}

// retire takes j, which has just ended, and its leases out of the table.
// If e, the event that ended it, is a report, it gives the job's ref and
// result, which the table does not hold.
func (t *Table) retire(j *job, e *event.Event) {
	v := j.view()
	if e != nil && e.Type == event.TypeReported {
		v.Ref, v.Result = e.Ref, e.Result
	}
	switch t.retireMode {
	case RetireKeep:
		if t.retired.jobs == nil {
			t.retired = retired{jobs: make(map[string]Job), leases: make(map[uint64]Lease),
				ids: btree.NewOrderedG[string](degree)}
		}
		// ref, result and a report's reason still alias the event's memory.
		v.Ref, v.Result, v.Reason = strings.Clone(v.Ref), bytes.Clone(v.Result), strings.Clone(v.Reason)
		t.retired.jobs[v.ID] = v
		t.retired.ids.ReplaceOrInsert(v.ID)
		for l := j.current; l != nil; l = l.prev {
			t.retired.leases[l.id] = l.view()
		}
	case RetireRecord:
		t.outbox.job(v)
		for l := j.current; l != nil; l = l.prev {
			t.outbox.lease(l.view())
		}
	}
	for l := j.current; l != nil; {
		prev := l.prev
		delete(t.leases, l.id)
		t.leaseList.remove(l)
		t.mem.freeLease(l)
		l = prev
	}
	delete(t.jobs, j.id)
	t.byID.remove(j)
	t.jobList.remove(j)
	t.mem.freeJob(j)
}

// retireStale records the fingerprint of a stale report.
func (t *Table) retireStale(k StaleKey, seq uint64) {
	switch t.retireMode {
	case RetireKeep:
		if t.stale == nil {
			t.stale = make(map[StaleKey]uint64)
		}
		t.stale[k] = seq
	case RetireRecord:
		t.outbox.stale(k, seq)
	}
}

// roster keeps records in the order the fold made them, so that a snapshot
// lists them without sorting. Removing one leaves a hole; holes are squeezed
// out once they are most of the list, so removal is O(1) amortised and the
// list stays proportional to what is in it.
type roster[T any, P interface {
	*T
	slot() *int
}] struct {
	items []P
	holes int
}

func (r *roster[T, P]) add(p P) {
	*p.slot() = len(r.items)
	r.items = append(r.items, p)
}

func (r *roster[T, P]) remove(p P) {
	r.items[*p.slot()] = nil
	r.holes++
	if r.holes > 256 && r.holes > len(r.items)/2 {
		r.compact()
	}
}

// compact squeezes the holes out: each record's slot is then its place
// among the records.
func (r *roster[T, P]) compact() {
	if r.holes == 0 {
		return
	}
	n := 0
	for _, q := range r.items {
		if q != nil {
			*q.slot() = n
			r.items[n] = q
			n++
		}
	}
	clear(r.items[n:])
	r.items, r.holes = r.items[:n], 0
}

// len is how many records the roster holds.
func (r *roster[T, P]) len() int { return len(r.items) - r.holes }

// each calls fn on every record, in order.
func (r *roster[T, P]) each(fn func(P)) {
	for _, p := range r.items {
		if p != nil {
			fn(p)
		}
	}
}

func (j *job) slot() *int   { return &j.at }
func (l *lease) slot() *int { return &l.at }

// RetiredRecords returns, in RetireKeep mode, the archive records of all the
// table retired: what a RetireRecord table folding the same log handed over.
// Verify compares them with the archive.
func (t *Table) RetiredRecords() []Record {
	var o outbox
	for _, j := range t.retired.jobs {
		o.job(j)
	}
	for _, l := range t.retired.leases {
		o.lease(l)
	}
	for k, seq := range t.stale {
		o.stale(k, seq)
	}
	return o.recs
}
