package sim

import (
	"maps"
	"slices"
	"time"

	"github.com/leaselog/leaselog/internal/testkit/clocktest"
)

// The local worker (params.local: w0, on the daemon's host) is a part of
// the daemon's process, as `leaselog serve`'s is: it dies with the daemon
// and is booted again when the daemon restarts, and it stops when the
// daemon's process stops (a sleep). Its jobs live on, each under its
// supervisor, which watches the daemon's store (supervise.Absence): while
// no process holds the store — the daemon crashed, and is not yet open
// again — nothing can grant a lease, and the restart takes the downtime
// out of every deadline, so the supervisor moves its deadline by the time
// between its first and its last poll that found the store free. A
// stopped daemon (a sleep) still holds the store: its supervisors fence as
// any worker's, for a sleep shorter than grace is no absence at all.

// inDaemon: the worker is the daemon's own, in its process.
func (w *simWorker) inDaemon() bool { return w.mach.monotonic }

// localWorker is the daemon's own worker, or nil.
func (s *Sim) localWorker() *simWorker {
	if len(s.workers) > 0 && s.workers[0].inDaemon() {
		return s.workers[0]
	}
	return nil
}

// diesWithDaemon ends the incarnation of the daemon's own worker, with the
// daemon's process; the daemon's restart boots it again.
func (w *simWorker) diesWithDaemon() {
	if !w.alive {
		return
	}
	w.alive, w.paused, w.deferred = false, false, nil
	w.inc++
	w.s.tracef("%s dies with the daemon; its jobs run on under their supervisors", w.id)
}

// stopsWithDaemon pauses the daemon's own worker for d, with the daemon's
// process. A worker paused already stays as it was.
func (w *simWorker) stopsWithDaemon(d time.Duration) {
	if !w.alive || w.frozen() {
		return
	}
	w.paused = true
	w.s.tracef("%s stops with the daemon for %v", w.id, d)
	w.s.after(d, w.resume)
}

// storeFreed: no process holds the daemon's store from now on. Every
// supervisor on the host starts counting.
func (m *machine) storeFreed() {
	for _, id := range slices.Sorted(maps.Keys(m.runs)) {
		m.runs[id].storeFreed()
	}
}

// storeTaken: the daemon holds its store again. Every supervisor that
// counted moves its deadline by what it counted.
func (m *machine) storeTaken() {
	for _, id := range slices.Sorted(maps.Keys(m.runs)) {
		m.runs[id].storeTaken()
	}
}

// storeFreed starts the supervisor's count at its next poll: a deadline due
// by then is not moved (the check armed for it kills the job, as before);
// a later one is not checked while the store stays free.
func (r *simRun) storeFreed() {
	if r.ended || r.stopped || r.free || r.deadline.IsZero() {
		return
	}
	from := r.pollAfter(r.m.clock())
	if !r.deadline.After(from) {
		return
	}
	r.free, r.freeFrom = true, from
	r.checkGen++ // no check while the deadline moves with the time
	r.checkAt = -1
}

// storeTaken ends the count at the supervisor's last poll before now, and
// moves the deadline by it.
func (r *simRun) storeTaken() {
	if !r.free || r.m.w.s.brk.name == "return-unseen" {
		return
	}
	r.free = false
	if r.ended {
		return
	}
	moved := r.pollBefore(r.m.clock()).Sub(r.freeFrom)
	if r.m.w.s.brk.name == "held-too-long" {
		moved += 2 * renew
	}
	if moved > 0 {
		r.deadline = r.deadline.Add(moved)
		r.m.w.s.stats.Held++
		r.m.w.s.tracef("%s: lease %d's supervisor moved its deadline by %v, the store's absence: %.4fs on the host's clock",
			r.m.w.id, r.lease, moved, r.deadline.Sub(clocktest.Epoch).Seconds())
	}
	r.arm()
}

// pollAfter is the supervisor's first poll after t (its host's clock).
func (r *simRun) pollAfter(t time.Time) time.Time {
	k := time.Duration(0)
	if d := t.Sub(clocktest.Epoch) - r.phase; d >= 0 {
		k = d/superEvery + 1
	}
	return clocktest.Epoch.Add(k*superEvery + r.phase)
}

// pollBefore is the supervisor's last poll before t (its host's clock), or
// the zero time if none.
func (r *simRun) pollBefore(t time.Time) time.Time {
	d := t.Sub(clocktest.Epoch) - r.phase
	if d <= 0 {
		return time.Time{}
	}
	return clocktest.Epoch.Add((d-1)/superEvery*superEvery + r.phase)
}
