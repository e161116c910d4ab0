// Package hostclock reads the host's clocks that never step: CLOCK_MONOTONIC
// (stops while the host sleeps) and CLOCK_BOOTTIME (counts the sleep). Both
// are system-wide: two processes on one host read the same value, so a
// deadline one of them computes is one the other can check. It also reads
// the host's boot id, which tells whether two processes share a host (and
// so a CLOCK_MONOTONIC).
//
// A reading is a time.Time without a monotonic part: Unix nanoseconds of the
// clock, not of the wall. Compare readings of one clock only.
package hostclock

import (
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Clock is one of the host's clocks that never step.
type Clock uint8

const (
	// Monotonic is CLOCK_MONOTONIC: it stops while the host sleeps. A worker
	// on the daemon's own host fences on it: the host's sleep is the daemon's
	// absence too, and never counts against the worker.
	Monotonic Clock = iota + 1
	// Boottime is CLOCK_BOOTTIME: it counts the host's sleep. A worker on
	// another host fences on it, and so does the daemon for its deadlines:
	// a host that slept was absent for that long.
	Boottime
)

func (c Clock) id() int32 {
	if c == Boottime {
		return unix.CLOCK_BOOTTIME
	}
	return unix.CLOCK_MONOTONIC
}

// Now reads the clock.
func (c Clock) Now() time.Time {
	var ts unix.Timespec
	if err := unix.ClockGettime(c.id(), &ts); err != nil {
		// Both clocks exist on every Linux since 2.6.39; a failure here is a
		// broken kernel, not an input.
		panic(fmt.Sprintf("hostclock: clock_gettime(%s): %v", c, err))
	}
	return time.Unix(ts.Sec, ts.Nsec)
}

func (c Clock) String() string {
	switch c {
	case Monotonic:
		return "monotonic"
	case Boottime:
		return "boottime"
	}
	return fmt.Sprintf("clock(%d)", uint8(c))
}

// Parse is the inverse of String.
func Parse(s string) (Clock, error) {
	switch s {
	case "monotonic":
		return Monotonic, nil
	case "boottime":
		return Boottime, nil
	}
	return 0, fmt.Errorf("hostclock: unknown clock %q (want monotonic or boottime)", s)
}

// bootIDPath is where Linux says which boot this is: a random UUID per boot.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// BootID returns the host's boot id. Two processes with the same boot id
// run on one host, in one boot, and share its CLOCK_MONOTONIC.
func BootID() (string, error) {
	b, err := os.ReadFile(bootIDPath)
	if err != nil {
		return "", fmt.Errorf("hostclock: boot id: %w", err)
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("hostclock: boot id: %s is empty", bootIDPath)
	}
	return id, nil
}

// For is the clock a worker fences on, given the daemon's boot id (as the
// daemon announces it; "" if it did not): CLOCK_MONOTONIC on the daemon's
// own host, CLOCK_BOOTTIME anywhere else or when in doubt — the host's sleep
// then counts, which can only make the fence fall sooner.
func For(daemonBootID string) Clock {
	if daemonBootID == "" {
		return Boottime
	}
	if id, err := BootID(); err == nil && id == daemonBootID {
		return Monotonic
	}
	return Boottime
}
