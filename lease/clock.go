package lease

import (
	"time"

	"github.com/leaselog/leaselog/hostclock"
)

// Clock tells the time. The service reads it once per decision.
type Clock interface{ Now() time.Time }

type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

// SystemClock is the wall clock, as it reads: it steps when the wall clock is
// set. The service's default (Options.Clock nil) is lifeClock instead.
func SystemClock() Clock { return systemClock{} }

// BoottimeClock is the host's CLOCK_BOOTTIME: it never steps and counts a
// suspend.
func BoottimeClock() Clock { return hostclock.Boottime }

// MonotonicClock is the host's CLOCK_MONOTONIC: it never steps and stops
// while the host sleeps.
func MonotonicClock() Clock { return hostclock.Monotonic }

// sleeper is a Clock that knows how long its host has slept since it
// started: CLOCK_BOOTTIME's count less CLOCK_MONOTONIC's. The service takes
// every sleep of its host as its own absence, however short (awakeLocked):
// the local worker fences on CLOCK_MONOTONIC, which a sleep stops, so a
// sleep the daemon counted against workers would move its expiries closer
// to that worker's fence by the whole sleep.
type sleeper interface{ Slept() time.Duration }

// lifeClock is the daemon's clock for one life (docs/design.md §4): the wall clock
// read once, when the service opens, plus the time CLOCK_BOOTTIME has counted
// since. Within a life it never steps — setting the wall clock, by hand or by
// NTP, moves nothing, so it cannot expire a lease — and it counts a suspend of
// the host, which the service then sees as a gap and records as absence. The
// wall clock only bridges restarts: it dates the life's start, and so the
// downtime daemon.started records.
//
// Its start is never before the last moment the previous life knew itself
// alive (its last event, or its alive mark: Service.markAlive), so that
// event times stay monotone even across a restart after the wall clock
// stepped back, and the time between stays what it was on the clock of the
// life that counted it: the downtime then reads as none, which delays
// expiries and never causes one, and the up-time of the life before still
// counts against a silent worker.
type lifeClock struct {
	start   time.Time     // the wall clock at Open (or the last moment alive before)
	boot    Clock         // CLOCK_BOOTTIME, or a test's stand-in
	boot0   time.Time     // boot's reading at Open
	mono    Clock         // CLOCK_MONOTONIC, or a test's stand-in; nil: sleeps unseen
	offset0 time.Duration // boot less mono at Open (offset)
}

func newLifeClock(wall, boot, mono Clock, floor int64) *lifeClock {
	start := wall.Now()
	if f := time.Unix(0, floor); start.Before(f) {
		start = f
	}
	c := &lifeClock{start: start.Round(0), boot: boot, boot0: boot.Now(), mono: mono}
	if mono != nil {
		c.offset0 = c.offset()
	}
	return c
}

// Slept is how long the host has slept since Open: what CLOCK_BOOTTIME
// counted and CLOCK_MONOTONIC did not.
func (c *lifeClock) Slept() time.Duration {
	if c.mono == nil {
		return 0
	}
	return max(0, c.offset()-c.offset0)
}

// offset is CLOCK_BOOTTIME's reading less CLOCK_MONOTONIC's at one instant.
// The clocks are read one after the other, and the thread may be
// descheduled between the reads — on a loaded host for milliseconds, which
// read as a sleep of the host (a daemon.resumed of nothing) or hide one. So
// boot is read between two reads of mono, and of a few tries the one whose
// mono reads lie closest is kept, boot taken against their middle: its
// error is half that window, microseconds unless every try was
// descheduled.
func (c *lifeClock) offset() time.Duration {
	best, window := time.Duration(0), time.Duration(-1)
	for range offsetTries {
		m1 := c.mono.Now()
		b := c.boot.Now()
		w := c.mono.Now().Sub(m1)
		if window < 0 || w < window {
			best, window = b.Sub(m1.Add(w/2)), w
		}
		if window <= offsetWindow {
			break
		}
	}
	return best
}

// An offset read within offsetWindow is taken at once; else the best of
// offsetTries.
const (
	offsetTries  = 8
	offsetWindow = 20 * time.Microsecond
)

func (c *lifeClock) Now() time.Time {
	return c.start.Add(max(0, c.boot.Now().Sub(c.boot0)))
}
