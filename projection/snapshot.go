package projection

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"

	"github.com/leaselog/leaselog/eventlog"
	"github.com/leaselog/leaselog/fsm"
)

// snapshotVersion is the version of the snapshot encoding. A snapshot of
// another version is not restored: replay falls back to an older snapshot or
// to the full log, which always works.
const snapshotVersion = 1

// ErrSnapshot is returned by Restore for bytes it cannot restore.
var ErrSnapshot = errors.New("projection: bad snapshot")

// Snapshot serialises the table. The encoding is deterministic: two tables
// that fold the same log give the same bytes, so comparing snapshots compares
// tables. Derived orderings (the queue, the heaps) are not stored; Restore
// rebuilds them.
//
//	version seq lastTime absence counts[NumTypes]
//	nworkers { id seen seenAt unreachable }         by id    (…At: present time)
//	njobs    { id kind state spec result attempts leases outcome reason ref
//	           submitted updated queuedSeq current } by id
//	nleases  { id job worker state mode acquired heard heardAt reportSeq } by id
//	nstale   { key(16) seq }                        by key
func (t *Table) Snapshot() []byte {
	var w enc
	w.uvarint(snapshotVersion)
	w.uvarint(t.seq)
	w.varint(t.lastTime)
	w.varint(t.absence)
	w.uvarint(uint64(len(t.counts)))
	for _, c := range t.counts {
		w.uvarint(c)
	}

	workers := sortedValues(t.workers, func(a, b *worker) int { return cmp.Compare(a.id, b.id) })
	w.uvarint(uint64(len(workers)))
	for _, x := range workers {
		w.str(x.id)
		w.varint(x.seen)
		w.varint(x.order.at)
		w.bool(x.unreachable)
	}

	jobs := sortedValues(t.jobs, func(a, b *job) int { return cmp.Compare(a.id, b.id) })
	w.uvarint(uint64(len(jobs)))
	for _, j := range jobs {
		w.str(j.id)
		w.uvarint(uint64(j.kind))
		w.uvarint(uint64(j.state))
		w.bytes(j.spec)
		w.bytes(j.result)
		w.uvarint(uint64(j.attempts))
		w.uvarint(uint64(j.leases))
		w.uvarint(uint64(j.outcome))
		w.str(j.reason)
		w.str(j.ref)
		w.varint(j.submitted)
		w.varint(j.updated)
		w.uvarint(j.queuedSeq)
		var cur uint64
		if j.current != nil {
			cur = j.current.id
		}
		w.uvarint(cur)
	}

	leases := sortedValues(t.leases, func(a, b *lease) int { return cmp.Compare(a.id, b.id) })
	w.uvarint(uint64(len(leases)))
	for _, l := range leases {
		w.uvarint(l.id)
		w.str(l.job.id)
		w.str(l.worker.id)
		w.uvarint(uint64(l.state))
		w.uvarint(uint64(l.mode))
		w.varint(l.acquired)
		w.varint(l.heard)
		w.varint(l.order.at)
		w.uvarint(l.reportSeq)
	}

	keys := make([]StaleKey, 0, len(t.stale))
	for k := range t.stale {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b StaleKey) int { return slices.Compare(a[:], b[:]) })
	w.uvarint(uint64(len(keys)))
	for _, k := range keys {
		w.b = append(w.b, k[:]...)
		w.uvarint(t.stale[k])
	}
	return w.b
}

func sortedValues[K comparable, V any](m map[K]V, less func(a, b V) int) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	slices.SortFunc(out, less)
	return out
}

// Restore replaces t's contents with the table serialised in b. On error t is
// left empty-handed: use a fresh table.
func Restore(b []byte) (*Table, error) {
	r := dec{b: b}
	if v := r.uvarint(); v != snapshotVersion {
		if r.err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSnapshot, r.err)
		}
		return nil, fmt.Errorf("%w: version %d, this build reads %d", ErrSnapshot, v, snapshotVersion)
	}
	t := New()
	t.seq = r.uvarint()
	t.lastTime = r.varint()
	t.absence = r.varint()
	n := r.count(1)
	for i := 0; i < n; i++ {
		c := r.uvarint()
		if i < len(t.counts) {
			t.counts[i] = c
		}
	}

	for i, n := 0, r.count(4); i < n && r.err == nil; i++ {
		w := t.mem.newWorker()
		*w = worker{id: t.mem.str(r.str()), seen: r.varint()}
		w.order.at, w.unreachable = r.varint(), r.bool()
		t.workers[w.id] = w
	}
	current := make(map[*job]uint64)
	for i, n := 0, r.count(16); i < n && r.err == nil; i++ {
		j := t.mem.newJob()
		j.id = t.mem.str(r.str())
		j.kind = eventlog.Kind(r.uvarint())
		j.state = fsm.State(r.uvarint())
		j.spec = t.mem.bytes(r.bytes())
		j.result = t.mem.bytes(r.bytes())
		j.attempts = int(r.uvarint())
		j.leases = int(r.uvarint())
		j.outcome = eventlog.Outcome(r.uvarint())
		j.reason = t.mem.reason(r.str())
		j.ref = t.mem.str(r.str())
		j.submitted = r.varint()
		j.updated = r.varint()
		j.queuedSeq = r.uvarint()
		if cur := r.uvarint(); cur != 0 {
			current[j] = cur
		}
		if _, ok := fsm.Next(j.kind, fsm.None, eventlog.TypeQueued); !ok || !validState(j.state) {
			return nil, fmt.Errorf("%w: job %q has kind %d, state %d", ErrSnapshot, j.id, j.kind, j.state)
		}
		t.jobs[j.id] = j
	}
	for i, n := 0, r.count(10); i < n && r.err == nil; i++ {
		l := t.mem.newLease()
		l.id = r.uvarint()
		jobID, workerID := r.str(), r.str()
		l.state = fsm.State(r.uvarint())
		l.mode = eventlog.RevokeMode(r.uvarint())
		l.acquired = r.varint()
		l.heard = r.varint()
		l.order.at = r.varint()
		l.reportSeq = r.uvarint()
		if r.err != nil {
			break
		}
		if !validState(l.state) {
			return nil, fmt.Errorf("%w: lease %d has state %d", ErrSnapshot, l.id, l.state)
		}
		l.job, l.worker = t.jobs[jobID], t.workers[workerID]
		if l.job == nil || l.worker == nil {
			return nil, fmt.Errorf("%w: lease %d names unknown job %q or worker %q", ErrSnapshot, l.id, jobID, workerID)
		}
		t.leases[l.id] = l
	}
	for i, n := 0, r.count(17); i < n && r.err == nil; i++ {
		var k StaleKey
		copy(k[:], r.take(len(k)))
		t.stale[k] = r.uvarint()
	}
	if r.err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshot, r.err)
	}
	if len(r.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", ErrSnapshot, len(r.b))
	}

	// Rebuild what Snapshot leaves out, in a deterministic order.
	jobs := sortedValues(t.jobs, func(a, b *job) int { return cmp.Compare(a.queuedSeq, b.queuedSeq) })
	for _, j := range jobs {
		if id, ok := current[j]; ok {
			if j.current = t.leases[id]; j.current == nil || j.current.job != j {
				return nil, fmt.Errorf("%w: job %q names lease %d, not its own", ErrSnapshot, j.id, id)
			}
		}
		if j.state == fsm.Queued {
			t.queue.push(j)
		}
		t.jobsIn[j.state]++
	}
	// Oldest heard first, so that every insertion is at the back.
	byHeard := func(a, b *lease) int { return cmp.Or(cmp.Compare(a.order.at, b.order.at), cmp.Compare(a.id, b.id)) }
	for _, l := range sortedValues(t.leases, byHeard) {
		if l.state.Live() {
			if l.job.current != l {
				return nil, fmt.Errorf("%w: live lease %d is not its job's current lease", ErrSnapshot, l.id)
			}
			t.live.touch(l, l.order.at)
			t.nlive++
			l.worker.live++
		}
	}
	bySeen := func(a, b *worker) int { return cmp.Or(cmp.Compare(a.order.at, b.order.at), cmp.Compare(a.id, b.id)) }
	for _, w := range sortedValues(t.workers, bySeen) {
		if !w.unreachable && w.live > 0 {
			t.watched.touch(w, w.order.at)
		}
	}
	return t, nil
}

func validState(s fsm.State) bool {
	_, err := fsm.ParseState(s.String())
	return err == nil
}

type enc struct{ b []byte }

func (e *enc) uvarint(v uint64) { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) varint(v int64)   { e.b = binary.AppendVarint(e.b, v) }
func (e *enc) str(s string)     { e.uvarint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *enc) bytes(b []byte)   { e.uvarint(uint64(len(b))); e.b = append(e.b, b...) }
func (e *enc) bool(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

// dec reads what enc wrote. The first error sticks and zero values follow, so
// callers check once at the end; nothing it reads can make it panic.
type dec struct {
	b   []byte
	err error
}

func (d *dec) fail(format string, args ...any) {
	if d.err == nil {
		d.err = fmt.Errorf(format, args...)
	}
	d.b = nil
}

func (d *dec) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) take(n int) []byte {
	if n < 0 || n > len(d.b) {
		d.fail("want %d bytes, have %d", n, len(d.b))
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *dec) bytes() []byte { return d.take(d.count(1)) }
func (d *dec) bool() bool    { b := d.take(1); return len(b) == 1 && b[0] == 1 }

// str aliases the input: callers copy what they keep (into the arena).
func (d *dec) str() string { return unsafeString(d.bytes()) }

// count reads a length and checks it against what is left, given that each
// item takes at least minItem bytes, so a corrupt length cannot make Restore
// allocate without bound.
func (d *dec) count(minItem int) int {
	n := d.uvarint()
	if n > uint64(len(d.b)/minItem) {
		d.fail("count %d exceeds the %d bytes left", n, len(d.b))
		return 0
	}
	return int(n)
}
