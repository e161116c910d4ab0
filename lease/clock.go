package lease

import (
	"time"

	"github.com/leaselog/leaselog/internal/hostclock"
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

// lifeClock is the daemon's clock for one life (DESIGN §4): the wall clock
// read once, when the service opens, plus the time CLOCK_BOOTTIME has counted
// since. Within a life it never steps — setting the wall clock, by hand or by
// NTP, moves nothing, so it cannot expire a lease — and it counts a suspend of
// the host, which the service then sees as a gap and records as absence. The
// wall clock only bridges restarts: it dates the life's start, and so the
// downtime daemon.started records.
//
// Its start is never before the last event of the log, so that event times
// stay monotone even across a restart after the wall clock stepped back: the
// downtime then reads as none, which delays expiries and never causes one.
type lifeClock struct {
	start time.Time // the wall clock at Open (or the last event's time)
	boot  Clock     // CLOCK_BOOTTIME, or a test's stand-in
	boot0 time.Time // boot's reading at Open
}

func newLifeClock(wall, boot Clock, floor int64) *lifeClock {
	start := wall.Now()
	if f := time.Unix(0, floor); start.Before(f) {
		start = f
	}
	return &lifeClock{start: start.Round(0), boot: boot, boot0: boot.Now()}
}

func (c *lifeClock) Now() time.Time {
	return c.start.Add(max(0, c.boot.Now().Sub(c.boot0)))
}
