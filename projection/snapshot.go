package projection

import (
	"cmp"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/leaselog/leaselog/event"
	"github.com/leaselog/leaselog/fsm"
	"github.com/leaselog/leaselog/timing"
)

// snapshotVersion is the version of the snapshot encoding. A snapshot of
// another version is not restored: replay falls back to an older snapshot or
// to the full log, which always works.
const snapshotVersion = SnapshotVersion

// SnapshotVersion is the snapshot format this build writes and reads.
//
// Version 3: jobs that ended are retired, not snapshotted, and the counts of
// jobs by state are stored, since the jobs listed no longer make them. A job
// that has not ended has no report: no attempts, outcome, ref or result.
// Version 4: an evaluation's cap on requeues and its requeues so far, and
// the counts of reports by outcome.
// Version 5: a job's scheduling (labels, priority, not_before) and its place
// in the queue (its first queueing's seq, where version 4 had its last); the
// queue is no longer listed, but built from the jobs queued. A version 4
// snapshot cannot tell an evaluation queued again its first queueing's seq,
// and so is not restored: replay folds the log instead.
// Version 5 also holds a job's and a lease's own timing, a live lease's
// latest details, and the live leases listed by toleration.
const SnapshotVersion = 5

// ErrSnapshot is returned by Restore for bytes it cannot restore.
var ErrSnapshot = errors.New("projection: bad snapshot")

// ErrSnapshotVersion is returned by Restore, beside ErrSnapshot, for a
// snapshot of an older version: not damaged, but not this build's to read.
var ErrSnapshotVersion = errors.New("projection: snapshot of an older version")

// Snapshot serialises what the table holds in memory: jobs that have not
// ended, their leases, the workers, and the counters; not what it retired.
// The encoding is deterministic: two tables that fold the same log give the
// same bytes, so comparing snapshots compares tables (what they retired is
// compared by Verify, against the archive). Everything is written in an order the table already keeps — jobs
// in the order the fold made them, leases by token, and the recency lists as
// they stand — so that neither Snapshot (which runs under the service's
// lock) nor Restore (which a restart waits for) sorts anything but the
// workers, and the restored table is the same structure, orders included.
// The queue is not listed: its order is the queued jobs' priorities, places
// and times, and Restore builds it from them (queue.go).
//
//	version seq lastTime absence counts[NumTypes] jobsIn[NumStates]
//	outcomes[numOutcomes]
//	nworkers { id seen seenAt unreachable }                              by id
//	njobs    { id kind state spec leases reason submitted updated
//	           place current maxRequeues requeues
//	           labels priority notBefore timing }                        fold order
//	nleases  { id job# worker# state mode acquired heard heardAt reportSeq
//	           timing details }                                          by id
//	live     n { lease# }                                                the daemon's toleration's
//	                                                                     recency order, then each
//	                                                                     other's, ascending
//	watched  n { worker# }                                               recency order
//
// (…At: present time; job#, lease#, worker#: positions in the lists above;
// timing: renew grace toleration in ns, 0 0 0 for the daemon's.)
func (t *Table) Snapshot() []byte { return t.AppendSnapshot(nil) }

// AppendSnapshot appends the table's Snapshot to dst and returns the result.
// A caller that gives dst room for it (the last snapshot's length and some)
// saves the snapshot's growth: appended to from nothing, a buffer of tens of
// megabytes is copied into a larger one again and again on its way.
func (t *Table) AppendSnapshot(dst []byte) []byte {
	w := enc{b: dst}
	w.uvarint(snapshotVersion)
	w.uvarint(t.seq)
	w.varint(t.lastTime)
	w.varint(t.absence)
	w.uvarint(uint64(len(t.counts)))
	for _, c := range t.counts {
		w.uvarint(c)
	}
	w.uvarint(uint64(len(t.jobsIn)))
	for _, c := range t.jobsIn {
		w.uvarint(uint64(c))
	}
	w.uvarint(uint64(len(t.outcomes)))
	for _, c := range t.outcomes {
		w.uvarint(c)
	}

	workers := sortedValues(t.workers, func(a, b *worker) int { return cmp.Compare(a.id, b.id) })
	workerPos := make(map[*worker]int, len(workers))
	w.uvarint(uint64(len(workers)))
	for i, x := range workers {
		workerPos[x] = i
		w.str(x.id)
		w.varint(x.seen)
		w.varint(x.order.at)
		w.bool(x.unreachable)
	}

	// With the holes squeezed out, a record's place in its roster is its
	// position in the snapshot.
	t.jobList.compact()
	t.leaseList.compact()
	w.uvarint(uint64(t.jobList.len()))
	t.jobList.each(func(j *job) {
		w.str(j.id)
		w.uvarint(uint64(j.kind))
		w.uvarint(uint64(j.state))
		w.bytes(j.spec)
		w.uvarint(uint64(j.leases))
		w.str(j.reason)
		w.varint(j.submitted)
		w.varint(j.updated)
		w.uvarint(j.place)
		var cur uint64
		if j.current != nil {
			cur = j.current.id
		}
		w.uvarint(cur)
		w.uvarint(uint64(j.maxRequeues))
		w.uvarint(uint64(j.requeues))
		w.str(string(j.labels))
		w.varint(int64(j.priority))
		w.varint(j.notBefore)
		w.ownTiming(j.timing)
	})

	w.uvarint(uint64(t.leaseList.len()))
	t.leaseList.each(func(l *lease) {
		w.uvarint(l.id)
		w.uvarint(uint64(l.job.at))
		w.uvarint(uint64(workerPos[l.worker]))
		w.uvarint(uint64(l.state))
		w.uvarint(uint64(l.mode))
		w.varint(l.acquired)
		w.varint(l.heard)
		w.varint(l.order.at)
		w.uvarint(l.reportSeq)
		w.ownTiming(l.timing)
		w.bytes(l.details)
	})

	var live []int
	t.live.each(func(l *lease) { live = append(live, l.at) })
	w.positions(live)
	var watched []int
	t.watched.each(func(x *worker) { watched = append(watched, workerPos[x]) })
	w.positions(watched)
	return w.b
}

// ownTiming writes a job's or a lease's own timing, or zeros for none.
func (w *enc) ownTiming(c *timing.Config) {
	if c == nil {
		c = &timing.Config{}
	}
	w.timing(*c)
}

// ownTiming reads what enc.ownTiming wrote: nil for zeros.
func (d *dec) ownTiming() *timing.Config {
	c := timing.Config{Renew: time.Duration(d.uvarint()), Grace: time.Duration(d.uvarint()), Toleration: time.Duration(d.uvarint())}
	if c == (timing.Config{}) {
		return nil
	}
	if err := c.Validate(); err != nil && d.err == nil {
		d.fail("timing %s: %v", event.TimingString(c), err)
	}
	return &c
}

func sortedValues[K comparable, V any](m map[K]V, less func(a, b V) int) []V {
	out := make([]V, 0, len(m))
	for _, v := range m {
		out = append(out, v)
	}
	slices.SortFunc(out, less)
	return out
}

// Restore returns the table serialised in b. It keeps nothing of b, which
// may be reused once it returns: a restart restores from the store's own
// buffer (eventlog.Log.EachSnapshot), without a copy.
func Restore(b []byte) (*Table, error) {
	r := dec{b: b}
	if v := r.uvarint(); v != snapshotVersion {
		if r.err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSnapshot, r.err)
		}
		if v > 0 && v < snapshotVersion {
			return nil, fmt.Errorf("%w: %w: version %d, this build reads %d", ErrSnapshot, ErrSnapshotVersion, v, snapshotVersion)
		}
		return nil, fmt.Errorf("%w: version %d, this build reads %d", ErrSnapshot, v, snapshotVersion)
	}
	t := New()
	t.seq = r.uvarint()
	t.lastTime = r.varint()
	t.absence = r.varint()
	for i, n := 0, r.count(1); i < n; i++ {
		c := r.uvarint()
		if i < len(t.counts) {
			t.counts[i] = c
		}
	}
	for i, n := 0, r.count(1); i < n; i++ {
		c := r.uvarint()
		if i < len(t.jobsIn) {
			t.jobsIn[i] = int(c)
		}
	}
	for i, n := 0, r.count(1); i < n; i++ {
		c := r.uvarint()
		if i < len(t.outcomes) {
			t.outcomes[i] = c
		}
	}
	var listed [fsm.NumStates]int

	workers := make([]*worker, r.count(4))
	for i := range workers {
		w := t.mem.newWorker()
		*w = worker{id: t.mem.str(r.str()), seen: r.varint()}
		w.order.at, w.unreachable = r.varint(), r.bool()
		if r.err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSnapshot, r.err)
		}
		workers[i] = w
		t.workers[w.id] = w
	}

	jobs := make([]*job, r.count(16)) // fifteen fields, the id two bytes at the least
	t.jobs = make(map[string]*job, len(jobs))
	current := make([]uint64, len(jobs))
	for i := range jobs {
		j := t.mem.newJob()
		id := r.str()
		j.kind = event.Kind(r.uvarint())
		j.state = fsm.State(r.uvarint())
		j.id, j.spec = t.mem.idAndBytes(id, r.bytes())
		leases := r.uvarint()
		j.leases = uint32(leases)
		j.reason = t.mem.reason(r.str())
		j.submitted = r.varint()
		j.updated = r.varint()
		j.place = r.uvarint()
		current[i] = r.uvarint()
		maxRequeues, requeues := r.uvarint(), r.uvarint()
		labels, priority, notBefore := event.Labels(r.str()), r.varint(), r.varint()
		if r.err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSnapshot, r.err)
		}
		if leases > math.MaxUint32 {
			return nil, fmt.Errorf("%w: job %q: %d leases", ErrSnapshot, id, leases)
		}
		if err := labels.Check(); err != nil || priority < math.MinInt32 || priority > math.MaxInt32 || j.place == 0 || j.place > t.seq {
			return nil, fmt.Errorf("%w: job %q: labels %q (%v), priority %d, place %d", ErrSnapshot, id, string(labels), err, priority, j.place)
		}
		j.labels = t.queue.labels(j.kind, labels)
		j.priority, j.notBefore = int32(priority), notBefore
		if maxRequeues > math.MaxUint32 || requeues > math.MaxUint32 || (j.kind != event.KindEvaluation && maxRequeues+requeues != 0) || (maxRequeues != 0 && requeues > maxRequeues) {
			return nil, fmt.Errorf("%w: job %q (%s) queued again %d times, max_requeues %d", ErrSnapshot, j.id, j.kind, requeues, maxRequeues)
		}
		j.maxRequeues, j.requeues = uint32(maxRequeues), uint32(requeues)
		j.timing = r.ownTiming()
		if _, ok := fsm.Next(j.kind, fsm.None, event.TypeQueued); !ok || !validState(j.state) || j.state == fsm.None || j.state.Terminal() {
			return nil, fmt.Errorf("%w: job %q has kind %d, state %d", ErrSnapshot, j.id, j.kind, j.state)
		}
		// Jobs are listed in the order the fold made them, each placed at
		// the seq that made it: places grow down the list, so that no two
		// jobs share one.
		if i > 0 && j.place <= jobs[i-1].place {
			return nil, fmt.Errorf("%w: job %q placed at %d, not after the job listed before it (%d)", ErrSnapshot, j.id, j.place, jobs[i-1].place)
		}
		// One write to the map, not a read and a write: a restart does this
		// a million times.
		if t.jobs[j.id] = j; len(t.jobs) != i+1 {
			return nil, fmt.Errorf("%w: job %q listed twice", ErrSnapshot, j.id)
		}
		jobs[i] = j
		t.jobList.add(j)
		t.byID.add(j)
		listed[j.state]++
	}
	for s, n := range listed {
		if fsm.State(s).Terminal() {
			continue
		}
		if t.jobsIn[s] != n {
			return nil, fmt.Errorf("%w: %d jobs %s counted, %d listed", ErrSnapshot, t.jobsIn[s], fsm.State(s), n)
		}
	}

	leases := make([]*lease, r.count(9)) // nine fields, a byte each at the least
	t.leases = make(map[uint64]*lease, len(leases))
	for i := range leases {
		l := t.mem.newLease()
		l.id = r.uvarint()
		jp, wp := r.uvarint(), r.uvarint()
		l.state = fsm.State(r.uvarint())
		l.mode = event.RevokeMode(r.uvarint())
		l.acquired = r.varint()
		l.heard = r.varint()
		l.order.at = r.varint()
		l.reportSeq = r.uvarint()
		l.timing = r.ownTiming()
		if d := r.bytes(); len(d) != 0 {
			l.details = append([]byte(nil), d...)
		}
		if r.err != nil {
			return nil, fmt.Errorf("%w: %v", ErrSnapshot, r.err)
		}
		if jp >= uint64(len(jobs)) || wp >= uint64(len(workers)) || !validState(l.state) {
			return nil, fmt.Errorf("%w: lease %d: job #%d, worker #%d, state %d out of range", ErrSnapshot, l.id, jp, wp, l.state)
		}
		if i > 0 && l.id <= leases[i-1].id {
			return nil, fmt.Errorf("%w: lease %d listed after lease %d", ErrSnapshot, l.id, leases[i-1].id)
		}
		l.job, l.worker = jobs[jp], workers[wp]
		if l.timing != nil && l.job.timing != nil && *l.timing == *l.job.timing {
			l.timing = l.job.timing // shared, as the fold shares it
		}
		if len(l.details) > event.MaxDetailsLen || (l.details != nil && !l.state.Live()) {
			return nil, fmt.Errorf("%w: lease %d (%s) has %d bytes of details", ErrSnapshot, l.id, l.state, len(l.details))
		}
		// Listed by token: a job's leases come in order, and its current
		// lease, for now, is the last one seen (checked below).
		l.prev, l.job.current = l.job.current, l
		leases[i] = l
		t.leaseList.add(l)
		t.leases[l.id] = l
	}
	for i, j := range jobs {
		var id uint64
		if j.current != nil {
			id = j.current.id
		}
		if id != current[i] {
			return nil, fmt.Errorf("%w: job %q names lease %d, its latest is %d", ErrSnapshot, j.id, current[i], id)
		}
	}

	for _, j := range jobs {
		if j.state == fsm.Queued {
			t.queue.push(j, t.lastTime)
		}
	}
	for _, p := range r.positions(len(leases)) {
		l := leases[p]
		if !l.state.Live() || l.job.current != l || l.order.in {
			return nil, fmt.Errorf("%w: lease %d is listed live but is %s", ErrSnapshot, l.id, l.state)
		}
		t.live.touch(l, l.order.at)
		t.nlive++
		l.worker.live++
	}
	for _, p := range r.positions(len(workers)) {
		w := workers[p]
		if w.order.in {
			return nil, fmt.Errorf("%w: worker %q listed twice", ErrSnapshot, w.id)
		}
		t.watched.touch(w, w.order.at)
	}
	if err := r.done(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSnapshot, err)
	}
	// Every live lease must have been listed in its order.
	live := 0
	for _, l := range leases {
		if l.state.Live() {
			live++
		}
	}
	if live != t.nlive {
		return nil, fmt.Errorf("%w: %d live leases, %d listed", ErrSnapshot, live, t.nlive)
	}
	return t, nil
}

func validState(s fsm.State) bool {
	_, err := fsm.ParseState(s.String())
	return err == nil
}

type enc struct{ b []byte }

// positions writes a list of positions, each as a uvarint.
func (e *enc) positions(ps []int) {
	e.uvarint(uint64(len(ps)))
	for _, p := range ps {
		e.uvarint(uint64(p))
	}
}

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

// positions reads a list that positions wrote, each below n.
func (d *dec) positions(n int) []int {
	ps := make([]int, d.count(1))
	for i := range ps {
		p := d.uvarint()
		if p >= uint64(n) {
			d.fail("position %d out of %d", p, n)
			return nil
		}
		ps[i] = int(p)
	}
	return ps
}
func (d *dec) bool() bool { b := d.take(1); return len(b) == 1 && b[0] == 1 }

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
