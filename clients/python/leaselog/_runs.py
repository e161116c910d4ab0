"""What a Python worker runs: commands under a runner, and callables.

A run directory per lease, ``STATE_DIR/<job>-<lease>/``, holds what a
restarted worker needs to find the job again:

- ``meta.json``: the lease, the job, and whether it runs a command or a
  callable;
- for a command: ``pid`` (the runner's: its session and process group),
  ``stdout``, ``stderr``, ``result.json`` ($LEASELOG_RESULT: JSON the job may
  leave as the report's result), ``stop`` (``cancel`` or ``kill`` and why,
  once the worker stopped it; the runner's grace holds a cancel's SIGKILL), ``fence``, ``fenced`` and ``exit`` (see _runner.py);
- ``reported`` once the outcome was reported.

Run directories are kept (for whoever wants the job's output); the worker
never reads one of a lease the daemon does not list as its own.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

from . import _runner
from ._clock import Clock
from ._core import LOST, Outcome
from .types import Grant, Job

log = logging.getLogger("leaselog.worker")

#: A handler: a callable taking a Task, or a command (a shell string or an
#: argv list) run for every job, or None: the job's own ``spec.run``.
Handler = Union[Callable[["Task"], Any], str, Sequence[str], None]

_FENCED_REASON = "fence deadline passed; job stopped by its runner"
_MAX_RESULT = 256 << 10


def _write_atomic(path: str, text: str) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def _read(path: str, limit: int = 4096) -> Optional[str]:
    try:
        with open(path) as f:
            return f.read(limit)
    except OSError:
        return None


@dataclass
class Task:
    """What a callable handler gets: the job, and a way to know it must stop.

    The worker cannot stop a Python function by force: a handler that runs
    for long checks :attr:`stopping` (or waits on :meth:`wait`) and returns
    soon after it is set — on a ``cancel`` or ``kill``, when the lease is
    ``gone``, when the worker fences itself, and when the worker stops.
    :attr:`stop_reason` says which. What it returns (JSON) is the report's
    result; an exception fails the job with its message as the reason.
    """

    job: Job
    lease: int
    worker: str
    workdir: str
    #: Why the job is asked to stop: cancel, kill, gone, fence or shutdown.
    stop_reason: Optional[str] = field(default=None, init=False)
    _event: threading.Event = field(default_factory=threading.Event, init=False, repr=False)
    # The latest progress told (compact JSON), and the last the daemon
    # acknowledged; guarded by _plock.
    _progress: Optional[str] = field(default=None, init=False, repr=False)
    _acked: Optional[str] = field(default=None, init=False, repr=False)
    _plock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @property
    def spec(self) -> Dict[str, Any]:
        return self.job.spec

    @property
    def stopping(self) -> bool:
        """Whether the job is asked to stop."""
        return self._event.is_set()

    def wait(self, timeout: Optional[float] = None) -> bool:
        """Wait up to timeout seconds for a stop request; True if one came."""
        return self._event.wait(timeout)

    def progress(self, obj: Dict[str, Any]) -> None:
        """Tell how far the job got: ``obj``, a JSON object, goes to the
        daemon with the worker's next heartbeat as the lease's details, which
        the job's view shows (the latest; its history keeps each). Over
        4 KiB, the daemon keeps ``{"cut": N}`` instead. The same progress
        again is not sent again."""
        if not isinstance(obj, dict):
            raise TypeError(f"progress must be a dict (a JSON object), not {type(obj).__name__}")
        doc = json.dumps(obj, separators=(",", ":"), ensure_ascii=False)
        with self._plock:
            self._progress = doc

    def _unsent(self) -> Optional[str]:
        """The progress the daemon has not acknowledged, if any."""
        with self._plock:
            return self._progress if self._progress != self._acked else None

    def _acknowledged(self, doc: str) -> None:
        with self._plock:
            self._acked = doc


class CallableRun:
    """A callable handler running in a thread of the worker's process."""

    def __init__(self, fn: Callable[[Task], Any], task: Task) -> None:
        self.task = task
        self.done = threading.Event()
        self._mode: Optional[str] = None  # cancel or kill, once asked
        self._lock = threading.Lock()
        self._outcome = Outcome("failed", "not ended")
        self._fn = fn
        self._thread = threading.Thread(target=self._main, name=f"leaselog-job-{task.lease}", daemon=True)
        self._thread.start()

    def _main(self) -> None:
        try:
            result = self._fn(self.task)
            o = Outcome("succeeded", result=result)
            if result is not None:
                try:
                    if len(json.dumps(result)) > _MAX_RESULT:
                        o = Outcome("succeeded", f"result dropped: over {_MAX_RESULT} bytes")
                except (TypeError, ValueError) as e:
                    o = Outcome("succeeded", f"result dropped: not JSON ({e})")
        except Exception as e:  # the job's failure, reported as such
            o = Outcome("failed", f"{type(e).__name__}: {e}")
        with self._lock:
            if self._mode == "kill":
                o = Outcome("killed", "killed by the worker", result=o.result)
            elif self._mode == "cancel":
                o = Outcome("cancelled", "cancelled by the worker", result=o.result)
            self._outcome = o
        self.done.set()

    def outcome(self) -> Outcome:
        return self._outcome

    def stop(self, kill: bool, why: str) -> None:
        with self._lock:
            if self.done.is_set():
                return
            if why in ("cancel", "kill") and self._mode != "kill":
                self._mode = "kill" if kill else "cancel"
            if self.task.stop_reason is None:
                self.task.stop_reason = why
        self.task._event.set()

    def fence(self, at: float) -> None:
        """A callable has no runner: the worker's own fence check stops it."""


class CommandRun:
    """A command under its runner (_runner.py), in a session of its own."""

    def __init__(self, state: str, pid: int, proc: Optional[subprocess.Popen], clock: Clock) -> None:
        self.state = state
        self.pid = pid
        self.done = threading.Event()
        self._proc = proc
        self._clock = clock
        self._lock = threading.Lock()
        self._gone = False
        # What the worker asked: the stop file's mode and why ("kill fence").
        # The outcome is cancelled or killed only for a directive's stop.
        words = (_read(self._path("stop")) or "").split()
        self._asked = words[0] if words else None
        self._mode = words[0] if words and (len(words) == 1 or words[1] in ("cancel", "kill")) else None
        self._outcome = Outcome(LOST, "not ended")
        threading.Thread(target=self._wait, name=f"leaselog-run-{pid}", daemon=True).start()

    def _path(self, name: str) -> str:
        return os.path.join(self.state, name)

    @classmethod
    def start(cls, state: str, argv: List[str], cwd: str, env: Dict[str, str], clock: Clock,
              deadline: float, grace: float) -> "CommandRun":
        """Start argv under a runner, with the fence deadline set first."""
        _write_atomic(os.path.join(state, "fence"), f"{clock.name} {deadline!r}\n")
        with open(os.path.join(state, "stdout"), "ab") as out, open(os.path.join(state, "stderr"), "ab") as err:
            proc = subprocess.Popen([sys.executable, "-I", os.path.abspath(_runner.__file__), state, repr(grace),
                                     "--", *argv],
                                    cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    start_new_session=True)
        _write_atomic(os.path.join(state, "pid"), f"{proc.pid}\n")
        return cls(state, proc.pid, proc, clock)

    @classmethod
    def reattach(cls, state: str, clock: Clock) -> Tuple[Optional["CommandRun"], str]:
        """The run of a worker before this one: alive (re-attached), ended while
        no worker watched (its exit status is there), or nothing (a reason)."""
        pid_text = _read(os.path.join(state, "pid"))
        if pid_text is None:
            return None, "run directory has no pid: the job never started"
        try:
            pid = int(pid_text.strip())
        except ValueError:
            return None, f"unreadable pid {pid_text!r}"
        return cls(state, pid, None, clock), ""

    def _alive(self) -> bool:
        """Whether our runner still runs (not a zombie, not a recycled pid)."""
        if self._proc is not None:
            return self._proc.poll() is None
        try:  # our own child, when a Worker in this process started it
            if os.waitpid(self.pid, os.WNOHANG)[0] == self.pid:
                return False
        except ChildProcessError:
            pass
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return False
            with open(f"/proc/{self.pid}/cmdline", "rb") as f:
                cmdline = f.read().split(b"\0")
        except (OSError, IndexError):
            return False
        return os.fsencode(self.state) in cmdline

    def _wait(self) -> None:
        if self._proc is not None:
            self._proc.wait()
        else:
            while self._alive():
                self.done.wait(0.05)
        with self._lock:
            self._gone = True
            self._outcome = self._collect()
        self.done.set()

    def _collect(self) -> Outcome:
        exit_text = _read(self._path("exit"))
        status: Optional[int] = None
        if exit_text is not None:
            try:
                status = int(exit_text.strip())
            except ValueError:
                pass
        if os.path.exists(self._path("fenced")):
            o = Outcome(LOST, _FENCED_REASON)
        elif self._mode == "kill":
            o = Outcome("killed", "killed by the worker")
        elif self._mode == "cancel":
            o = Outcome("cancelled", "cancelled by the worker")
        elif status == 0:
            o = Outcome("succeeded")
        elif status is not None:
            o = Outcome("failed", f"exit status {status}")
        else:
            return Outcome(LOST, "agent vanished: its runner ended without an exit status")
        raw = _read(self._path("result.json"), _MAX_RESULT + 1)
        if raw:
            try:
                o.result = json.loads(raw) if len(raw) <= _MAX_RESULT else None
                if o.result is None:
                    o.reason = "; ".join(filter(None, [o.reason, f"result dropped: over {_MAX_RESULT} bytes"]))
            except ValueError:
                o.reason = "; ".join(filter(None, [o.reason, "result.json is not JSON"]))
        return o

    def outcome(self) -> Outcome:
        return self._outcome

    def stop(self, kill: bool, why: str) -> None:
        """Ask the runner to stop the job: kill its whole tree now (kill), or
        SIGTERM the command's group and kill the tree after the grace
        (cancel). The mode goes to the stop file, then the runner gets a
        SIGTERM and reads it. Stopping a run that ended, or again with the
        same or a weaker mode, does nothing."""
        want = "kill" if kill else "cancel"
        with self._lock:
            if self._gone or self._asked == "kill" or self._asked == want:
                return
            if self._asked is None and os.path.exists(self._path("exit")):
                return  # it ended on its own first: its status is what happened
            self._asked = want
            if why in ("cancel", "kill"):
                self._mode = want
            try:
                _write_atomic(self._path("stop"), f"{want} {why}\n")
            except OSError as e:  # the runner takes a SIGTERM without it for a cancel
                log.warning("cannot record the stop of %s: %s", self.state, e)
            if self._alive():  # never signal a recycled pid
                try:
                    os.kill(self.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass

    def fence(self, at: float) -> None:
        """Hand the runner a new deadline (it reads the file every 25 ms)."""
        try:
            _write_atomic(self._path("fence"), f"{self._clock.name} {at!r}\n")
        except OSError as e:
            log.warning("cannot write the fence deadline of %s: %s", self.state, e)


class Executor:
    """Starts and re-attaches the runs of a worker's leases."""

    def __init__(self, handler: Handler, state_dir: str, worker: str, workdir: Optional[str],
                 clock: Clock, grace: float) -> None:
        self.handler = handler
        self.state_dir = state_dir
        self.worker = worker
        self.workdir = workdir
        self.clock = clock
        self.grace = grace

    def rundir(self, g: Grant) -> str:
        return os.path.join(self.state_dir, f"{g.job.id}-{g.lease}")

    def _argv(self, g: Grant) -> List[str]:
        h = self.handler
        if isinstance(h, str):
            return ["/bin/sh", "-c", h]
        if h is not None:
            return [str(a) for a in h]  # type: ignore[union-attr]
        run = g.job.spec.get("run")
        if not isinstance(run, str) or not run:
            raise ValueError("the job's spec has no run")
        return ["/bin/sh", "-c", run]

    def start(self, g: Grant, deadline: float) -> Any:
        """Start the job of g (fence deadline: a reading of the fence clock)."""
        state = self.rundir(g)
        os.makedirs(state, exist_ok=True)
        kind = "callable" if callable(self.handler) else "command"
        _write_atomic(os.path.join(state, "meta.json"),
                      json.dumps({"lease": g.lease, "job": g.job.id, "worker": self.worker, "run": kind}) + "\n")
        cwd = self.workdir or state
        if callable(self.handler):
            return CallableRun(self.handler, Task(job=g.job, lease=g.lease, worker=self.worker, workdir=cwd))
        env = {k: v for k, v in os.environ.items() if k != "LEASELOG_TOKEN"}  # the token never reaches a job
        env.update(LEASELOG_JOB=g.job.id, LEASELOG_LEASE=str(g.lease), LEASELOG_WORKDIR=cwd,
                   LEASELOG_RESULT=os.path.join(state, "result.json"), LEASELOG_SPEC=json.dumps(g.job.spec))
        return CommandRun.start(state, self._argv(g), cwd, env, self.clock, deadline, self.grace)

    def reattach(self, g: Grant) -> Tuple[Optional[Any], str]:
        """The run of a lease held before a restart, or None and why it is lost."""
        state = self.rundir(g)
        meta = _read(os.path.join(state, "meta.json"))
        if meta is None:
            return None, "run directory gone: the job was lost while the worker was down"
        try:
            kind = json.loads(meta).get("run")
        except ValueError:
            kind = None
        if kind == "callable":
            return None, "the worker restarted: a callable's job cannot outlive its process"
        return CommandRun.reattach(state, self.clock)

    def mark_reported(self, g: Grant, outcome: str) -> None:
        try:
            _write_atomic(os.path.join(self.rundir(g), "reported"), outcome + "\n")
        except OSError:
            pass  # a job that never got a run directory
