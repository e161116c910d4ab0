package supervise

import "time"

// The supervisor of a job of the daemon's own worker, on the Pebble engine,
// holds its fence across the time no daemon runs. That worker lives in the
// daemon's process, and a daemon that is not running grants nothing: a
// restart records its downtime as its absence (daemon.started{gap}, counted
// from its alive mark, at most the moment it died) and moves every lease
// deadline past it. So the supervisor may move its deadline by the time
// during which no process held the store's lock, and by no more.
//
// It looks at the lock every FencePoll (ProbeStore: a test of the lock that
// never takes it) and counts as absence only the time between two
// consecutive looks that both found the lock free on the same file, unchanged
// (same device, inode and change time: every open of the store truncates
// the file, so a daemon that came and went between two looks, however
// briefly, is seen). The count runs from the end of the first look to the
// start of the second, so it never exceeds the time the lock was free, which
// the daemon counts as absence whole (and more: its absence runs from its
// last alive mark, before it died, to its restart, after it locked the
// store). A stopped (SIGSTOP) or hung daemon still holds the lock: no
// absence, the deadline falls as before.
//
// Only the file a look last found locked counts (by device and inode):
// nothing counts before a look found one (a path no daemon locks moves no
// deadline), and a file put in its place counts once a look has found it
// locked in turn (a store put back at its path, which its daemon's start
// locks; not a file nobody locks). A new deadline read from the
// fence file starts the count again from zero: the worker that wrote it
// counted from a heartbeat its daemon answered, with any absence before
// taken out already.

// StoreLook is what one look at the store's lock found.
type StoreLook struct {
	// Free: the file is there and no process holds the lock. A file that
	// cannot be looked at (missing, replaced by something else) is not
	// free: nobody can tell.
	Free bool
	// File is the file looked at, as it was: zero if none.
	File FileID
	// Holder is the pid of a process holding the lock, when it holds a
	// record lock (the daemon's kind); for the supervisor's log.
	Holder int
}

// FileID tells one state of a file from another: a file replaced, or
// truncated, or touched, between two looks has another.
type FileID struct {
	Dev, Ino uint64
	Ctime    int64 // ns
}

// sameFile: f and g are states of one file.
func (f FileID) sameFile(g FileID) bool { return f.Dev == g.Dev && f.Ino == g.Ino }

// Absence is the count of the time no process held the store since the
// fence deadline was last read: the decision of how far the deadline moves,
// without a clock or a file of its own (the supervisor feeds it). The zero
// value is ready; it is not safe for concurrent use.
type Absence struct {
	locked FileID // the file a look last found locked; zero: none yet
	last   StoreLook
	lastAt time.Time // the end of the last look; zero: none to count from
	credit time.Duration
}

// Look records a look at the lock that began at start and ended at end
// (readings of the fence's clock), and returns how much it adds to the
// credit. A look with zero times (one before any clock is known) counts
// nothing and is not counted from; it arms the count all the same.
func (a *Absence) Look(start, end time.Time, l StoreLook) time.Duration {
	var add time.Duration
	if l.Free && a.last.Free && l.File == a.last.File && l.File.sameFile(a.locked) &&
		!a.lastAt.IsZero() && !start.IsZero() && start.After(a.lastAt) {
		add = start.Sub(a.lastAt)
		a.credit += add
	}
	if !l.Free && l.File != (FileID{}) {
		a.locked = l.File
	}
	a.last, a.lastAt = l, end
	return add
}

// Credit is how far the fence deadline moves: the time counted free since
// the deadline was read.
func (a *Absence) Credit() time.Duration { return a.credit }

// Armed reports whether a look has found the file there and locked: only
// then does a free lock count.
func (a *Absence) Armed() bool { return a.locked != (FileID{}) }

// Free reports whether the last look found the lock free.
func (a *Absence) Free() bool { return a.last.Free }

// NewDeadline starts the count again: a new deadline was read, which the
// worker set knowing of any absence before it. The next interval counted
// starts at the next look.
func (a *Absence) NewDeadline() {
	a.credit = 0
	a.lastAt = time.Time{}
}
