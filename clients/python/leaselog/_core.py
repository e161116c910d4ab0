"""What a worker decides, without threads, timers, I/O or a clock of its own.

A port of the Go worker's ``Core`` (worker/core.go): the leases held, which
leases a heartbeat names, what each directive does, when the fence falls,
which deadline each run's runner is to hold, what to report. Every decision
that depends on time takes the worker's reading of its fence clock (seconds,
a float). Not safe for concurrent use: :class:`leaselog.Worker` guards it
with its lock.

The fence: each lease has a base, the send time of the last call whose answer
proves the daemon heard of the lease after it was sent — the acquire that
granted it (plus the daemon's ``held_seconds``), then every acknowledged
heartbeat naming it. The daemon expires no sooner than toleration after it
*received* that call, so the lease's job stops once its base is
toleration − 2×renew old: two heartbeats before the daemon may expire it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Protocol, Tuple

from .types import Grant, Timing

LOST = "lost"


@dataclass
class Outcome:
    """What a worker reports about a run."""

    outcome: str  # succeeded, failed, cancelled, killed, or lost
    reason: str = ""
    ref: str = ""
    result: Any = None


def fenced() -> Outcome:
    """The outcome of a job the worker stopped itself at its fence."""
    return Outcome(LOST, "self-fenced: no heartbeat acknowledged for toleration − 2×renew")


def too_late() -> Outcome:
    """The outcome of a grant that came past its fence: never started."""
    return Outcome(LOST, "self-fenced: the grant arrived past its fence; not started")


def lost(reason: str) -> Outcome:
    """The outcome of a job the worker lost (at re-attach, mostly)."""
    return Outcome(LOST, reason)


def not_started(err: BaseException) -> Outcome:
    """The outcome of a job that could not start."""
    return Outcome("failed", f"could not start: {err}")


class Run(Protocol):
    """One job being run (a command under its runner, or a callable)."""

    @property
    def done(self) -> Any:  # a threading.Event, set once the run has ended
        ...

    def outcome(self) -> Outcome:
        """What to report once done is set."""

    def stop(self, kill: bool, why: str) -> None:
        """Ask the job to end: gracefully (cancel) or at once. Returns at once."""

    def fence(self, at: float) -> None:
        """Move the run's fence deadline (a reading of the fence clock) to at."""


@dataclass
class Held:
    """One lease the worker holds."""

    grant: Grant
    base: float  # the fence counts from here
    renewed: bool = True  # base is a grant's or a heartbeat's (see Core.reattached)
    run: Optional[Run] = None
    dropped: bool = False  # the daemon said gone (or refused the start): stop, no report
    pending: bool = False  # adopted: its job starts once a heartbeat renews it
    fenced: bool = False  # stopped by self-fencing

    @property
    def lease(self) -> int:
        return self.grant.lease


@dataclass
class Stop:
    """A run to stop: gracefully (cancel) or at once (kill, gone, refused, fence)."""

    lease: int
    run: Run
    kill: bool
    why: str


@dataclass
class Acts:
    """What a heartbeat's answer makes the worker do."""

    stop: List[Stop] = field(default_factory=list)
    forget: List[Held] = field(default_factory=list)  # gone before their job started
    fence: List[Tuple[Run, float]] = field(default_factory=list)  # new deadlines for runners
    start: List[Held] = field(default_factory=list)  # adopted leases renewed: start their jobs
    report: List[Tuple[Held, Outcome]] = field(default_factory=list)  # adopted leases revoked before they started
    unfenced: bool = False  # the answer lifted the fence: take work again


#: How many of the last leases let go of the Core remembers (Take, Orphans):
#: an answer in flight is at most a call's timeout old.
LET_GO_KEEP = 4096


class Core:
    """The decisions of a worker that runs up to ``capacity`` jobs at once."""

    def __init__(self, capacity: int, timing: Timing, now: float) -> None:
        self.capacity = capacity
        self.timing = timing
        self.held: Dict[int, Held] = {}
        self.born = now
        self.last_ack = now
        self.last_sent: Optional[float] = None
        self.beating = False
        self.fenced = False
        self.last_turn: Optional[float] = None
        self.woke = False
        self.wake_beat = False
        # The last leases let go of, each with the count of let-gos when it
        # went (list_mark, orphans, take).
        self.let_go: Dict[int, int] = {}
        self.let_gos = 0

    @property
    def span(self) -> float:
        """toleration − 2×renew: how long after its base a lease's job stops."""
        return self.timing.self_fence

    def span_of(self, h: Held) -> float:
        """How long after its base h's job stops: its job's own timing's
        toleration − 2×renew, or the daemon's (Core.fenceOf in Go)."""
        own = own_timing(h.grant)
        return own.self_fence if own is not None else self.span

    @property
    def renew(self) -> float:
        """How often the worker heartbeats: the daemon's renew, or the
        shortest of its leases' own if shorter (every heartbeat names every
        lease, so each is renewed as often as its timing asks)."""
        r = self.timing.renew
        for h in self.held.values():
            own = own_timing(h.grant)
            if own is not None and own.renew < r:
                r = own.renew
        return r

    @property
    def fence_every(self) -> float:
        """How often the heartbeat loop checks the fence: renew/4."""
        return self.renew / 4

    @property
    def beat_timeout(self) -> float:
        return self.renew

    @property
    def call_timeout(self) -> float:
        return 2 * self.renew

    def leases(self) -> List[int]:
        """The leases held, sorted: what a heartbeat names."""
        return sorted(self.held)

    def room(self) -> int:
        """How many leases to ask for: none while fenced."""
        return 0 if self.fenced else max(0, self.capacity - len(self.held))

    def beat_due(self, now: float) -> Tuple[List[int], bool]:
        """Whether a heartbeat is due (one per renew, one at a time); if so it
        is recorded as sent at now."""
        if self.beating or (self.last_sent is not None and now - self.last_sent < self.renew):
            return [], False
        self.last_sent, self.beating = now, True
        return self.leases(), True

    def turn(self, now: float) -> Tuple[List[int], bool, bool]:
        """One turn of the heartbeat loop: (ids, beat due, check the fence).

        A turn more than 2×renew after the last means this process was paused
        longer than the fence's whole slack; the fence then waits for the
        answer (or timeout) of the first heartbeat sent after the wake, which
        says whether the daemon counted the gap (as Core.Turn in Go).
        """
        if self.last_turn is not None and now - self.last_turn > 2 * self.renew:
            self.woke = True
        self.last_turn = now
        ids, beat = self.beat_due(now)
        if beat and self.woke:
            self.woke, self.wake_beat = False, True
        return ids, beat, not self.woke and not self.wake_beat

    def unacked(self) -> None:
        """The heartbeat in flight got no answer."""
        self.beating = self.wake_beat = False

    def acked(self, sent: float, now: float, reply: Mapping[str, Any]) -> Acts:
        """Take the answer, received at now, to the heartbeat sent at sent.

        Its send time becomes the fence base of every lease it renewed. An
        answer that arrives past the fence is old news: it still stops what
        it revokes, but neither lifts the fence nor moves a deadline.
        """
        a = Acts()
        self.beating = self.wake_beat = False
        if sent > self.last_ack:
            self.last_ack = sent
        t = Timing.from_json(reply)
        if t is not None:
            self.timing = t
        late = now - sent > self.span
        if self.fenced and not late:
            self.fenced, a.unfenced = False, True
        for d in reply.get("leases") or []:
            lease, directive = d.get("lease"), d.get("directive")
            if directive == "gone":
                stop, forget = self.drop(lease, "gone")
                if stop is not None:
                    a.stop.append(stop)
                if forget is not None:
                    a.forget.append(forget)
                continue
            h = self.held.get(lease)
            if h is None:
                continue
            if sent >= h.base:
                h.base, h.renewed = sent, True
            at = self.deadline(h)
            if at is not None and not late and now - sent <= self.span_of(h):  # else old news for this lease
                a.fence.append((h.run, at))  # type: ignore[arg-type]
            if h.pending and directive == "continue":
                if not late:  # else it stays pending: the next heartbeat says whether it is still ours
                    h.pending = False
                    a.start.append(h)
            elif h.pending:
                h.pending = False
                word = "killed" if directive == "kill" else "cancelled"
                a.report.append((h, Outcome(word, "revoked before it started")))
            elif h.run is not None and directive == "cancel":
                a.stop.append(Stop(lease, h.run, kill=False, why="cancel"))
            elif h.run is not None and directive == "kill":
                a.stop.append(Stop(lease, h.run, kill=True, why="kill"))
        return a

    def fence(self, now: float) -> Tuple[List[Stop], bool, float]:
        """Check the fence at now: the runs to stop at once, whether the worker
        became fenced now, and how long it has been silent."""
        silent = now - self.last_ack
        fell = False
        if silent > self.span and not self.fenced:
            self.fenced = fell = True
        stops = []
        for lease in self.leases():
            h = self.held[lease]
            if h.run is None or h.fenced or now - h.base <= self.span_of(h) or h.run.done.is_set():
                continue  # a job that ended on its own keeps its own outcome
            h.fenced = True
            stops.append(Stop(lease, h.run, kill=True, why="fence"))
        return stops, fell, silent

    def take(self, g: Grant, sent: float, now: float) -> Tuple[Optional[Held], bool]:
        """Hold the lease of a grant answered to an acquire sent at sent; and
        whether its job may start: not if the grant came past its fence
        (report it too_late). A grant that reaches a fenced worker (a call
        sent before the fence fell) starts like any other: its own lease's
        fence is what its runner holds, as the Go worker's Core.Take."""
        if g.lease in self.held or g.lease in self.let_go:
            return None, False  # an answer a lease list overtook: not a new lease
        if g.timing is not None:
            self.timing = g.timing
        base = min(sent + g.held_seconds, now)
        h = Held(grant=g, base=base)
        self.held[g.lease] = h
        if now - base > self.span_of(h):
            h.fenced = True
            return h, False
        return h, True

    def next_after(self, h: Held) -> int:
        """How many leases h's report may ask for in the same call (``next``):
        the slot its end frees, if the worker holds h and may take work."""
        return 0 if self.fenced or self.held.get(h.lease) is not h else 1

    def started(self, h: Held, run: Run, now: float) -> bool:
        """Record h's run; whether it must be stopped at once (gone, or its
        lease's fence fell, while it started). The worker's own fence is no
        reason: a run stopped at once gets no deadline for its runner (the Go
        worker's Core.Started, sim seed 2934)."""
        h.run = run
        if not h.dropped and now - h.base > self.span_of(h):
            h.fenced = True
        return h.dropped or h.fenced

    def reattached(self, g: Grant, run: Optional[Run]) -> Held:
        """Hold a lease the daemon still holds for this worker after a restart.

        The worker's own fence counts from its start; the run's runner keeps
        the deadline the dead worker gave it until the first heartbeat renews
        the lease (renewed is False until then).
        """
        h = Held(grant=g, base=self.born, renewed=False, run=run)
        self.held[g.lease] = h
        return h

    def deadline(self, h: Held) -> Optional[float]:
        """The fence deadline of h's run for its runner, if there is one to give."""
        if h.run is None or h.dropped or h.fenced or not h.renewed:
            return None
        return h.base + self.span_of(h)

    def drop(self, lease: int, why: str) -> Tuple[Optional[Stop], Optional[Held]]:
        """Mark a lease as not the worker's: its run is to be stopped at once
        and never reported. Returns the run to stop, or the lease to forget."""
        h = self.held.get(lease)
        if h is None:
            return None, None
        h.dropped = True
        if h.run is not None:
            return Stop(lease, h.run, kill=True, why=why), None
        return None, h

    def ended(self, h: Held) -> Optional[Outcome]:
        """What to report now that h's run is over: None for a dropped lease,
        lost for a fenced one, else the run's own outcome."""
        if h.dropped:
            return None
        if h.fenced:
            return fenced()
        assert h.run is not None
        return h.run.outcome()

    def forget(self, h: Held) -> bool:
        """Let go of h once reported (or dropped): its slot is free."""
        if self.held.get(h.lease) is not h:
            return False
        del self.held[h.lease]
        self.let_gos += 1
        self.let_go[h.lease] = self.let_gos
        if len(self.let_go) >= 2 * LET_GO_KEEP:
            self.let_go = {k: v for k, v in self.let_go.items() if v + LET_GO_KEEP > self.let_gos}
        return True

    def list_mark(self) -> int:
        """To take when asking for the lease list, and hand to orphans."""
        return self.let_gos

    def orphans(self, grants: List[Grant], mark: int) -> List[Grant]:
        """The live leases the daemon holds for this worker that it does not
        know: an acquire whose answer was lost on the way. A lease let go of
        since the list was asked for (mark) is no orphan: the list may predate
        the report that ended it."""
        return [g for g in grants
                if g.lease not in self.held and not (g.lease in self.let_go and self.let_go[g.lease] > mark)]

    def adopt(self, g: Grant) -> Held:
        """Hold an orphan. Its job starts once a heartbeat renews it (acked):
        nothing says when the daemon last heard of it. The list's grant
        carries the daemon's timing, as an acquire's does: a worker whose
        every call failed so far has heard it nowhere else."""
        if g.timing is not None:
            self.timing = g.timing
        h = Held(grant=g, base=float("-inf"), renewed=False, pending=True)
        self.held[g.lease] = h
        return h


def refused(o: Outcome, err: Any) -> Tuple[Optional[Outcome], str]:
    """What to do about a report the daemon refused with err (as Refused in Go).

    Returns (the outcome to send next, what): ``final`` (stale, or not this
    worker's lease: forget it), ``later`` (401 or 5xx or no answer: send the
    same again after a backoff), ``resend`` (send the outcome returned: first
    without result and ref, then as lost), ``expire`` (a lost report refused
    even so: leave the lease to expire, which the daemon folds the same way).
    """
    status, code = getattr(err, "status", None), getattr(err, "code", None)
    if status is None:
        return o, "later"
    if code == "stale_lease" or status in (403, 404):
        return None, "final"
    if status == 401 or status >= 500:
        return o, "later"
    why = f"report refused ({status} {code}: {str(getattr(err, 'message', err))[:120]})"
    if o.result is not None or o.ref or len(o.reason.encode()) > 512:
        reason = why + "; sent again without result and ref"
        if o.reason:
            reason += "; reason: " + o.reason
        return Outcome(o.outcome, reason[:512]), "resend"
    if o.outcome != LOST:
        return Outcome(LOST, f"{why}; sent again as lost, was {o.outcome}"[:512]), "resend"
    return None, "expire"


def own_timing(g: Grant) -> Optional[Timing]:
    """The timing of its own a grant's lease has: its job's, or None."""
    t = g.job.timing
    if not t or not t.get("renew_seconds"):
        return None
    return Timing(renew=t["renew_seconds"], grace=t["grace_seconds"], toleration=t["toleration_seconds"])
