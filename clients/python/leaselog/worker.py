"""The worker: takes leases, runs their jobs, heartbeats, fences, reports.

:class:`Worker` drives the decisions of ``_core.Core`` (a port of the Go
worker's Core) with threads, as the Go worker drives its Core with
goroutines: one heartbeat loop (one heartbeat every renew for all leases, at
most one in flight, the fence checked every renew/4), one acquire loop
(long-polling while there is room), and per lease a thread that tells the
daemon the job started and one that waits for the job and reports it.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from . import _clock
from ._core import Acts, Core, Held, Outcome, Stop, lost, not_started, refused, too_late
from ._http import Call
from ._runs import CallableRun, Executor, Handler, Task
from .client import WorkerClient
from .errors import Forbidden, LeaselogError, Stopping, TokenRefused, Unauthorized
from .types import Grant, Timing, grants

__all__ = ["Worker", "Task"]

log = logging.getLogger("leaselog.worker")

#: What the worker assumes until the daemon says otherwise: the defaults.
DEFAULT_TIMING = Timing(renew=10.0, grace=50.0, toleration=300.0)


def default_state_dir(worker_id: str) -> str:
    """``$XDG_STATE_HOME/leaselog/worker-<id>`` (``~/.local/state`` by default)."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(base, "leaselog", f"worker-{worker_id}")


class _Backoff:
    """From 50 ms, doubling, up to a maximum (as the Go worker's Backoff)."""

    def __init__(self, maximum: float) -> None:
        self.max = maximum
        self.next = 0.05

    def __call__(self) -> float:
        d = self.next
        self.next = min(2 * self.next, self.max)
        return d

    def reset(self) -> None:
        self.next = 0.05


class Worker:
    """A worker of a leaselog daemon, in the name of ``worker_id``.

    ``handler`` is what a job runs:

    - None: the job's ``spec.run``, with ``/bin/sh -c`` (as leaselog's own
      workers);
    - a string (a shell command) or a list (an argv): that command, for
      every job;
    - a callable taking a :class:`Task`: called in a thread of this process.

    A command runs in a session of its own under a small runner (a child
    subreaper) that records its exit status in the worker's state directory
    and kills the command's whole process tree, descendants in new sessions
    too, on a kill, when the command ends, and when its fence deadline
    passes, whether or not the worker is still alive. It sees ``LEASELOG_JOB``, ``LEASELOG_LEASE``,
    ``LEASELOG_WORKDIR``, ``LEASELOG_SPEC`` (JSON) and ``LEASELOG_RESULT``
    (write JSON there and it becomes the report's result); never the token.

    ``kinds`` (None: every kind) and ``labels`` say what the worker takes:
    it is granted only jobs of a kind it takes whose every label it offers
    with an equal value.

    Each report carries the next acquire for the slot it frees
    (``next_in_report``, on by default as in the Go worker): a busy worker
    takes its next job in the report of the last. The worker calls go over a
    worker session (``session``, on by default as in the Go worker: one
    connection, no HTTP per call), and over plain HTTP calls where the
    daemon or a proxy refuses its upgrade.

    The worker heartbeats every ``renew_seconds`` the daemon gives, acts on
    the directives (``cancel``: SIGTERM to the command's group, SIGKILL after
    ``stop_grace``; ``kill``: SIGKILL; ``gone``: SIGKILL, no report; a
    callable's Task is told to stop), and fences itself: once no heartbeat
    naming a lease was acknowledged for toleration − 2×renew after it was
    sent, it stops the lease's job and reports it ``lost``.

    On start it asks the daemon for the leases it still holds and picks each
    job up again from ``state_dir``: a command whose runner still runs is
    re-attached, one that ended meanwhile is reported with its exit status,
    anything else — a callable (it cannot outlive the worker's process), a
    run directory gone — is reported ``lost``.
    """

    def __init__(self, server: Optional[str], worker_id: str, token: Optional[str] = None, *,
                 handler: Handler = None, capacity: int = 1, state_dir: Optional[str] = None,
                 workdir: Optional[str] = None, wait_seconds: float = 10.0, stop_grace: float = 10.0,
                 next_in_report: bool = True, timing: Optional[Timing] = None,
                 data: Optional[str] = None, session: bool = True,
                 kinds: Optional[Sequence[str]] = None, labels: Optional[Mapping[str, str]] = None) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be at least 1, is {capacity}")
        self.id = worker_id
        self.api = WorkerClient(server, worker_id, token, data=data, session=session, kinds=kinds, labels=labels)
        self.handler = handler
        self.capacity = capacity
        self.state_dir = os.path.abspath(state_dir or default_state_dir(worker_id))
        self.workdir = workdir
        self.wait_seconds = wait_seconds
        self.stop_grace = stop_grace
        # Take the next job in the report of the last (as the Go worker
        # does by default); off once a daemon that predates it refused it.
        self.next_in_report = next_in_report
        self._timing = timing or DEFAULT_TIMING
        self._stopped = threading.Event()
        self._ready = threading.Event()
        self._lock = threading.Lock()  # guards the Core
        self._fence_lock = threading.Lock()  # orders the deadlines pushed to runners
        self._freed = threading.Event()
        self._acquiring: Optional[Call] = None
        # The stop cut a call that may have been granted leases (an acquire,
        # a report's next): _take_cut_grants takes them, and a report sent
        # from then on asks for no next.
        self._cut = False
        self._thread: Optional[threading.Thread] = None
        self._threads: List[threading.Thread] = []
        self._threads_lock = threading.Lock()
        self._error: Optional[BaseException] = None
        self.clock = _clock.BOOTTIME
        self.core: Optional[Core] = None
        self.executor: Optional[Executor] = None

    def __repr__(self) -> str:
        return f"Worker({self.api.server!r}, {self.id!r})"

    # Life.

    def run(self) -> None:
        """Re-attach, then take, run and report jobs until :meth:`stop`.

        Waits for the daemon to answer first. Jobs in flight when it returns
        are left running: a command's lease stays, and a worker started again
        with the same id and state directory re-attaches to it. A lease
        granted to a call the stop cut is started first, and left the same
        way (``_take_cut_grants``).

        A daemon that refuses the worker's token (401, 403) stops it at
        once: it raises :class:`leaselog.TokenRefused`, naming the token
        and the daemon.
        """
        try:
            health = self._retry("health", lambda t: self.api.health(timeout=t))
            if health is None:
                return
            self.clock = _clock.for_daemon(health.get("boot_id"))
            os.makedirs(self.state_dir, exist_ok=True)
            self.core = Core(self.capacity, self._timing, self.clock.now())
            self.executor = Executor(self.handler, self.state_dir, self.id, self.workdir, self.clock,
                                     self.stop_grace)
            try:
                self._reattach()
            except (Unauthorized, Forbidden) as e:
                self._refused("list its leases", e)
            loops = [threading.Thread(target=self._heartbeat_loop, name="leaselog-heartbeat", daemon=True),
                     threading.Thread(target=self._acquire_loop, name="leaselog-acquire", daemon=True)]
            for t in loops:
                t.start()
            self._ready.set()
            try:
                for t in loops:
                    while t.is_alive():
                        t.join(0.5)  # a timeout, so that ^C reaches this thread
            except KeyboardInterrupt:
                self._stopped.set()
                call = self._acquiring
                if call is not None:
                    call.abort()
                raise
            if isinstance(self._error, TokenRefused):
                raise self._error
            self._take_cut_grants()
        finally:
            self._ready.set()
            self._shutdown_callables()

    def _refused(self, call: str, e: LeaselogError) -> None:
        """Stop the worker: the daemon refuses its token."""
        with self._lock:
            first = not isinstance(self._error, TokenRefused)
            if first:
                self._error = TokenRefused(
                    f"worker {self.id}: the daemon at {self.api.server} refuses {self.api.token_source} "
                    f"({call}: {e}); give worker {self.id!r}'s token (token=, $LEASELOG_TOKEN) — "
                    "retrying cannot help, so the worker stops", status=e.status)
        if first:
            log.error("%s", self._error)
        self._stopped.set()
        self._freed.set()
        call_ = self._acquiring
        if call_ is not None:
            call_.abort()

    def start(self) -> "Worker":
        """Run in a background thread; returns once the worker has
        re-attached and its loops run (or it failed to)."""
        def main() -> None:
            try:
                self.run()
            except BaseException as e:  # kept for stop() to raise
                self._error = e
                log.exception("worker %s failed", self.id)
        self._thread = threading.Thread(target=main, name=f"leaselog-worker-{self.id}", daemon=True)
        self._thread.start()
        self._ready.wait()
        return self

    def stop(self, timeout: Optional[float] = 30.0) -> None:
        """Stop taking work and heartbeating; jobs in flight are left as they are."""
        self._stopped.set()
        call = self._acquiring
        if call is not None:
            call.abort()
        if self._thread is not None:
            self._thread.join(timeout)
        with self._threads_lock:
            threads = list(self._threads)
        for t in threads:
            t.join(timeout)
        self.api.close()  # the session, with nothing left in flight
        if self._error is not None:
            raise self._error

    def __enter__(self) -> "Worker":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    @property
    def fenced(self) -> bool:
        """Whether the fence has fallen (no acknowledged heartbeat for
        toleration − 2×renew) and not been lifted since."""
        with self._lock:
            return bool(self.core and self.core.fenced)

    def leases(self) -> List[int]:
        """The leases the worker holds now."""
        with self._lock:
            return self.core.leases() if self.core else []

    # The loops.

    def _go(self, target: Callable[..., None], *args: Any) -> None:
        t = threading.Thread(target=target, args=args, daemon=True)
        with self._threads_lock:
            self._threads = [x for x in self._threads if x.is_alive()] + [t]
        t.start()

    def _heartbeat_loop(self) -> None:
        answered = threading.Event()
        while not self._stopped.is_set():
            with self._lock:
                now = self.clock.now()
                ids, due, check = self.core.turn(now)
                timeout, every = self.core.beat_timeout, self.core.fence_every
            if due:
                details = self._details(ids)
                self._go(self._beat, ids, now, timeout, answered, details)
            if check:
                self._check_fence()
            answered.wait(every)
            answered.clear()

    def _details(self, ids: List[int]) -> Dict[int, Tuple[Task, str]]:
        """The progress the tasks of ids told (Task.progress) that the daemon
        has not acknowledged: what the heartbeat due carries. Called with
        self._lock held."""
        out: Dict[int, Tuple[Task, str]] = {}
        for id in ids:
            h = self.core.held.get(id)
            run = h.run if h is not None else None
            if isinstance(run, CallableRun):
                doc = run.task._unsent()
                if doc is not None:
                    out[id] = (run.task, doc)
        return out

    def _beat(self, ids: List[int], sent: float, timeout: float, answered: threading.Event,
              details: Optional[Dict[int, Tuple[Task, str]]] = None) -> None:
        acts = self._heartbeat(ids, sent, timeout, details)
        for h in acts.start if acts else []:
            log.info("worker %s: adopted lease %d renewed: starting job %s", self.id, h.lease, h.grant.job.id)
            self._go(self._run, h)
        for h, o in acts.report if acts else []:
            self._go(self._report, h, o)
        answered.set()

    def _heartbeat(self, ids: List[int], sent: float, timeout: float,
                   details: Optional[Dict[int, Tuple[Task, str]]] = None) -> Optional[Acts]:
        """Send the heartbeat naming ids, sent at sent, and act on its answer:
        push the deadlines, stop, forget. The adopted leases it renewed
        (acts.start) and those revoked before they started (acts.report) are
        the caller's to start and report; None when it got no answer."""
        try:
            reply = self.api.heartbeat(ids, details={id: json.loads(doc) for id, (_, doc) in (details or {}).items()},
                                       timeout=timeout)
        except (Unauthorized, Forbidden) as e:
            self._refused("heartbeat", e)
            return None
        except LeaselogError as e:
            with self._lock:
                self.core.unacked()
            if not self._stopped.is_set():
                log.warning("worker %s: heartbeat not acknowledged: %s", self.id, e)
            return None
        for task, doc in (details or {}).values():
            task._acknowledged(doc)
        with self._fence_lock:
            with self._lock:
                acts = self.core.acked(sent, self.clock.now(), reply)
            for run, at in acts.fence:
                run.fence(at)  # before anything else: the runner may be about to kill
        if acts.unfenced:
            log.info("worker %s: heartbeat acknowledged again: taking work again", self.id)
        for s in acts.stop:
            log.info("worker %s: lease %d: %s", self.id, s.lease, s.why)
        self._apply(acts.stop, acts.forget)
        return acts

    def _check_fence(self) -> None:
        with self._lock:
            stops, fell, silent = self.core.fence(self.clock.now())
            span = self.core.span
        if fell or stops:
            log.error("worker %s: self-fencing: no heartbeat acknowledged for %.3fs (fence %.3fs); stopping %d job(s)",
                      self.id, silent, span, len(stops))
        self._apply(stops, [])

    def _acquire_loop(self) -> None:
        backoff = _Backoff(self.core.renew)
        while not self._stopped.is_set():
            with self._lock:
                room = self.core.room()
                renew, call_timeout = self.core.renew, self.core.call_timeout
            if room <= 0:
                self._freed.wait(renew)
                self._freed.clear()
                continue
            call = Call()
            self._acquiring = call
            if self._stopped.is_set():
                break
            sent = self.clock.now()
            try:
                grants = self.api.acquire(min(room, 100), self.wait_seconds,  # 100: the API's maximum
                                          timeout=self.wait_seconds + call_timeout, call=call)
            except (Unauthorized, Forbidden) as e:
                self._refused("acquire", e)
                break
            except LeaselogError as e:
                if self._stopped.is_set():
                    self._cut = True  # what it may have been granted is _take_cut_grants's
                    break
                if not isinstance(e, Stopping):
                    log.warning("worker %s: acquire failed; retrying: %s", self.id, e)
                self._stopped.wait(backoff())
                if e.retryable and not self._stopped.is_set():
                    self._adopt_orphans(call_timeout)
                continue
            finally:
                self._acquiring = None
            backoff.reset()
            for g in grants:
                self._begin(g, sent)

    def _adopt_orphans(self, timeout: float) -> None:
        """Take the live leases the daemon holds for this worker that it does
        not know: an acquire whose answer was lost still granted them, and
        left alone they would expire without ever running. Their jobs start
        once the next heartbeat renews them."""
        with self._lock:
            mark = self.core.list_mark()
        try:
            grants = self.api.leases(timeout=timeout)
        except LeaselogError:
            return  # still out of reach; the next failure asks again
        with self._lock:
            orphans = self.core.orphans(grants, mark)
            for g in orphans:
                self.core.adopt(g)
        for g in orphans:
            log.warning("worker %s: adopting lease %d of job %s, whose grant was lost on the way",
                        self.id, g.lease, g.job.id)

    def _take_cut_grants(self) -> None:
        """Take, once the loops ended on a stop, the leases a call the stop
        cut may have been granted: a long poll (or a report's next) granted
        just before the daemon heard its caller go, an answer nobody reads.
        Left alone such a lease would expire toleration later, its job never
        run (an evaluation queued again only then, a run failed, "worker
        lost"). So the worker asks for its lease list; each lease it never
        learned of is adopted, renewed by one heartbeat as any adopted lease
        is, and started like any grant, then left as the stop leaves every
        job: a command runs on under its runner, for a worker started again
        to re-attach; a callable is told to stop with the others. One
        revoked before it started is reported. One try of each call, with
        the call timeout: a daemon out of reach holds the stop that long."""
        if not self._cut:
            return
        with self._lock:
            mark, timeout = self.core.list_mark(), self.core.call_timeout
        try:
            grants = self.api.leases(timeout=timeout)
        except LeaselogError as e:
            log.warning("worker %s: stopping: the lease list failed; a lease granted to a call the stop cut "
                        "expires: %s", self.id, e)
            return
        with self._lock:
            orphans = self.core.orphans(grants, mark)
            for g in orphans:
                self.core.adopt(g)
            ids = self.core.leases()
        for g in orphans:
            log.warning("worker %s: stopping: starting lease %d of job %s, granted to a call the stop cut",
                        self.id, g.lease, g.job.id)
        acts = self._heartbeat(ids, self.clock.now(), timeout) if orphans else None
        for h in acts.start if acts else []:
            if self._launch(h) and not h.grant.running:
                try:
                    self.api.start(h.lease, timeout=timeout)
                except LeaselogError as e:
                    if not e.retryable:
                        self._start_refused(h.grant, e)
        for h, o in acts.report if acts else []:
            self._report(h, o)

    # One lease.

    def _begin(self, g: Grant, sent: float) -> None:
        with self._lock:
            h, ok = self.core.take(g, sent, self.clock.now())
        self._begin_taken(h, ok)

    def _begin_taken(self, h: Optional[Held], ok: bool) -> None:
        """Run the job of a lease just taken, or report it too late (not ok).
        None is a grant of a lease held or let go of already: nothing to do."""
        if h is None:
            return
        if not ok:
            log.warning("worker %s: lease %d: the grant arrived past its fence; not starting",
                        self.id, h.lease)
            self._go(self._report, h, too_late())
            return
        self._run(h)

    def _run(self, h: Held) -> None:
        if not self._launch(h):
            return
        if not h.grant.running:
            self._go(self._say_started, h.grant)
        self._go(self._await, h)

    def _launch(self, h: Held) -> bool:
        """Start h's job and give its runner its deadline; whether it started
        (if not, it is reported failed)."""
        g = h.grant
        try:
            with self._lock:
                deadline = h.base + self.core.span
            run = self.executor.start(g, deadline)
        except Exception as e:
            log.warning("worker %s: job %s could not start: %s", self.id, g.job.id, e)
            self._go(self._report, h, not_started(e))
            return False
        with self._fence_lock:
            with self._lock:
                stop = self.core.started(h, run, self.clock.now())
                at = self.core.deadline(h)
            if at is not None:
                run.fence(at)
        if stop:
            run.stop(True, "fence")
        log.info("worker %s: job %s started, lease %d", self.id, g.job.id, g.lease)
        return True

    def _say_started(self, g: Grant) -> None:
        try:
            self._retry("start", lambda t: self.api.start(g.lease, timeout=t))
        except LeaselogError as e:
            self._start_refused(g, e)

    def _start_refused(self, g: Grant, e: LeaselogError) -> None:
        """The daemon refused g's start (stale, or not ours): the job must not run on."""
        log.warning("worker %s: lease %d: start refused; stopping the job: %s", self.id, g.lease, e)
        with self._lock:
            stop, forget = self.core.drop(g.lease, "refused")
        self._apply([stop] if stop else [], [forget] if forget else [])

    def _await(self, h: Held) -> None:
        while not h.run.done.wait(0.05):
            if self._stopped.is_set():
                return  # the job runs on; a restarted worker re-attaches
        with self._lock:
            o = self.core.ended(h)
        if o is None:
            self._forget(h)
            return
        self._report(h, o)

    def _report(self, h: Held, o: Outcome) -> None:
        """Send the outcome until the daemon answers for good (reports are
        idempotent); a refusal sends less, as the Go worker does. The report
        carries the next acquire for the slot it frees (next_in_report)."""
        later = _Backoff(self.core.renew)
        probe = False  # the one call sent without next after one with it was refused as bad input
        while True:
            ask = 0
            if self.next_in_report and not self._cut and not probe:
                with self._lock:
                    ask = self.core.next_after(h)
            sent = self.clock.now()
            try:
                reply = self.api.report(h.lease, o.outcome, reason=o.reason or None, ref=o.ref or None,
                                        result=o.result, next_max=ask, timeout=self.core.call_timeout)
                log.info("worker %s: job %s lease %d reported %s (seq %s)", self.id, h.grant.job.id, h.lease,
                         o.outcome, reply.get("seq"))
                if probe:
                    log.warning("worker %s: the daemon takes no next acquire in a report; "
                                "taking jobs with the acquire loop only", self.id)
                    self.next_in_report = False
                if ask:
                    self._reported_next(h, o, reply, sent)
                    return
                break
            except LeaselogError as e:
                if self._stopped.is_set():
                    self._cut = self._cut or bool(ask)  # its next may have been granted
                    return  # not reported: the lease stays, and a restarted worker reports it
                probe = False
                if ask and e.code == "bad_request":
                    # Bad input wrote nothing: either the report is bad, or the
                    # daemon predates next. The same report without it tells.
                    probe = True
                    continue
                nxt, what = refused(o, e)
                if what == "later":
                    self._stopped.wait(later())
                    continue
                if what == "resend" and nxt is not None:
                    log.warning("worker %s: lease %d: report refused; sending it again as %s: %s",
                                self.id, h.lease, nxt.outcome, e)
                    o = nxt
                    continue
                log.warning("worker %s: lease %d: report refused (%s): %s", self.id, h.lease, what, e)
                break
        if self.executor is not None:
            self.executor.mark_reported(h.grant, o.outcome)
        self._forget(h)

    def _reported_next(self, h: Held, o: Outcome, reply: Dict[str, Any], sent: float) -> None:
        """Let go of h, reported by a call sent at sent that carried the next
        acquire, and run what that acquire granted in the slot h freed. An
        answer without next repeats an earlier one, whose grants (if any)
        are looked for in the lease list, as after a lost acquire."""
        if self.executor is not None:
            self.executor.mark_reported(h.grant, o.outcome)
        nxt = reply.get("next")
        got = grants(nxt) if isinstance(nxt, dict) else []
        now = self.clock.now()
        with self._lock:
            self.core.forget(h)
            taken = [self.core.take(g, sent, now) for g in got]
        if nxt is None:
            self._adopt_orphans(self.core.call_timeout)
        self._freed.set()
        for held, ok in taken:
            self._begin_taken(held, ok)

    def _forget(self, h: Held) -> None:
        with self._lock:
            self.core.forget(h)
        self._freed.set()

    def _apply(self, stops: List[Stop], forget: List[Held]) -> None:
        for s in stops:
            s.run.stop(s.kill, s.why)
        for h in forget:
            self._forget(h)

    def _reattach(self) -> None:
        grants = self._retry("list leases", lambda t: self.api.leases(timeout=t))
        for g in grants or []:
            run, why = self.executor.reattach(g)
            with self._lock:
                h = self.core.reattached(g, run)
            if run is None:
                log.warning("worker %s: lease %d of job %s lost on restart: %s", self.id, g.lease, g.job.id, why)
                self._go(self._report, h, lost(why))
                continue
            log.info("worker %s: re-attached job %s lease %d (pid %d)", self.id, g.job.id, g.lease, run.pid)
            self._go(self._await, h)

    def _shutdown_callables(self) -> None:
        """A callable cannot outlive the worker: tell each to stop. Its lease is
        not reported now; a worker started again reports it lost."""
        if self.core is None:
            return
        with self._lock:
            runs = [h.run for h in self.core.held.values() if isinstance(getattr(h.run, "task", None), Task)]
        for r in runs:
            r.stop(False, "shutdown")

    def _retry(self, what: str, f: Callable[[float], Any]) -> Any:
        """Call f(timeout) until it succeeds, is refused for good (a 4xx,
        raised), or the worker stops (None)."""
        backoff = _Backoff(self.core.renew if self.core else DEFAULT_TIMING.renew)
        while not self._stopped.is_set():
            timeout = self.core.call_timeout if self.core else 2 * DEFAULT_TIMING.renew
            try:
                return f(timeout)
            except LeaselogError as e:
                if not e.retryable:
                    raise
                log.debug("worker %s: %s: retrying: %s", self.id, what, e)
                self._stopped.wait(backoff())
        return None
