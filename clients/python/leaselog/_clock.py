"""The fence clock: a clock that never steps, shared by the worker and the
runners of its commands (which read the deadline the worker writes).

As the Go worker (hostclock): CLOCK_MONOTONIC when the daemon runs
on this host (its ``/healthz`` boot id is this host's) — the host's sleep
stops it, and is the daemon's absence too — else CLOCK_BOOTTIME, which
counts a sleep the daemon does not see. Where CLOCK_BOOTTIME is missing
(not Linux) it is the monotonic clock.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

BOOT_ID_FILE = "/proc/sys/kernel/random/boot_id"


@dataclass(frozen=True)
class Clock:
    """A named clock: its name goes into fence files, so that a reader reads
    the same clock."""

    name: str
    now: Callable[[], float]


MONOTONIC = Clock("monotonic", time.monotonic)
if hasattr(time, "CLOCK_BOOTTIME"):
    BOOTTIME = Clock("boottime", lambda: time.clock_gettime(time.CLOCK_BOOTTIME))
else:  # pragma: no cover - not Linux
    BOOTTIME = Clock("boottime", time.monotonic)

BY_NAME = {c.name: c for c in (MONOTONIC, BOOTTIME)}


def boot_id() -> Optional[str]:
    """This host's boot id, or None where there is none."""
    try:
        with open(BOOT_ID_FILE) as f:
            return f.read().strip() or None
    except OSError:
        return None


def for_daemon(daemon_boot_id: Optional[str]) -> Clock:
    """The fence clock for a worker of a daemon with that boot id."""
    mine = boot_id()
    if mine and daemon_boot_id and mine == daemon_boot_id:
        return MONOTONIC
    return BOOTTIME
