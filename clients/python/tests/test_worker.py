"""The Worker against a real daemon: callables and commands to success,
cancel and kill, self-fencing, stale reports, and re-attach after a restart."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Any, List, Optional

import leaselog

from .support import SERVER, Proxy, ServerTest, poll, uid

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_ROOT = os.path.dirname(HERE)


def alive(pid: int) -> bool:
    """Whether pid runs (a zombie does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class WorkerTest(ServerTest):

    def worker(self, name: str, handler: Any = None, server: Optional[str] = None, **kw: Any) -> leaselog.Worker:
        """A started worker with its own id and state directory, stopped at the end."""
        state = kw.pop("state_dir", None) or tempfile.mkdtemp(prefix="leaselog-py-")
        kw.setdefault("wait_seconds", 0.5)
        w = leaselog.Worker(server or SERVER, uid(f"{self._testMethodName}-{name}"), handler=handler,
                            state_dir=state, **kw)
        w.start()
        self.addCleanup(w.stop)
        return w

    def pid_of(self, w: leaselog.Worker, job: leaselog.Job) -> int:
        """The runner's pid of the job's command (its process group)."""
        def read() -> Optional[int]:
            j = self.client.job(job.id)
            if j.lease is None:
                return None
            try:
                with open(os.path.join(w.state_dir, f"{job.id}-{j.lease.lease}", "pid")) as f:
                    return int(f.read())
            except (OSError, ValueError):
                return None
        return poll(read, 10, f"the pid of {job.id}")

    def test_callable_and_command_succeed(self) -> None:
        seen: List[str] = []

        def handler(task: leaselog.Task) -> Any:
            seen.append(task.job.id)
            return {"echo": task.spec["model"], "lease": task.lease}

        cw = self.worker("callable", handler)
        j = self.submit("call", spec={"model": "m7"})
        done = self.client.wait(j.id, timeout=20)
        self.assertEqual((done.state, done.outcome, done.attempts), ("reported", "succeeded", 1))
        self.assertEqual(done.result["echo"], "m7")
        self.assertEqual(seen, [j.id])
        # The next jobs are the command worker's, by a label cw does not
        # offer: the long poll cw's stop cut may still wait at the daemon
        # until it hears the cut, and would take a job it may take.
        cw.stop()

        only = {"pool": "command"}
        cmd = self.submit("cmd", run='echo "{\\"job\\": \\"$LEASELOG_JOB\\"}" > "$LEASELOG_RESULT"; '
                                     'test -z "$LEASELOG_TOKEN"', labels=only)
        bad = self.submit("bad", run="exit 3", labels=only)
        w = self.worker("command", labels=only)
        done = self.client.wait(cmd.id, timeout=20)
        self.assertEqual((done.outcome, done.result), ("succeeded", {"job": cmd.id}))
        failed = self.client.wait(bad.id, timeout=20)
        self.assertEqual((failed.state, failed.outcome, failed.reason), ("reported", "failed", "exit status 3"))
        lease = self.events_of(cmd.id, "lease.reported")[0].lease
        with open(os.path.join(w.state_dir, f"{cmd.id}-{lease}", "reported")) as f:
            self.assertEqual(f.read(), "succeeded\n")

    def test_stop_starts_a_lease_granted_as_it_cut_the_acquire(self) -> None:
        """A long poll granted just before the daemon heard the stop cut it
        leaves a lease the worker never heard of (here its answer is lost on
        the way, the call still waiting when the stop cuts it). Left alone it
        would expire toleration later, its job never run; the stop finds it
        in the worker's lease list, renews it and starts its job like any
        grant, and leaves the command running as it leaves every job."""
        gate = tempfile.mkdtemp()
        self.addCleanup(lambda: open(os.path.join(gate, "go"), "w").close())
        for session in (True, False):
            with self.subTest(session=session):
                proxy = Proxy(SERVER)
                self.addCleanup(proxy.close)
                proxy.lose_answer("/acquire", reset=False)  # the worker's first acquire
                w = self.worker(f"cut-{session}", server=proxy.address, session=session, wait_seconds=30)
                poll(lambda: any("/acquire" in r for r in proxy.requests), 10, "the long poll")
                j = self.submit(f"j-{session}", run=f"while [ ! -e {gate}/go ]; do sleep 0.05; done")
                poll(proxy.lost.is_set, 10, "the grant's answer, lost")
                w.stop()
                job = self.client.job(j.id)
                self.assertEqual((job.state, job.lease and job.lease.worker), ("running", w.id),
                                 "the lease granted as the stop cut the acquire was not started")
                self.assertTrue(alive(self.pid_of(w, job)), "the job does not run on after the stop")

    def test_next_job_in_the_report(self) -> None:
        """A busy worker takes its next job in the report of the last: one
        call, whose acquire is written in the report's batch."""
        gate = tempfile.mkdtemp()
        proxy = Proxy(SERVER)
        self.addCleanup(proxy.close)
        w = self.worker("next", capacity=1, server=proxy.address)
        a = self.submit("a", run=f"while [ ! -e {gate}/a ]; do sleep 0.05; done")
        self.wait_state(a.id, ("running",))
        acquires = sum("/acquire" in r for r in proxy.requests)  # the worker is full: its acquire loop waits
        b = self.submit("b", run=f"while [ ! -e {gate}/b ]; do sleep 0.05; done")
        open(os.path.join(gate, "a"), "w").close()
        self.wait_state(b.id, ("running",))
        self.assertEqual(sum("/acquire" in r for r in proxy.requests), acquires, "b came from an acquire call")
        reported = self.events_of(a.id, "lease.reported")[0]
        acquired = self.events_of(b.id, "lease.acquired")[0]
        self.assertEqual((acquired.seq, acquired.worker), (reported.seq + 1, w.id), "not in the report's batch")
        open(os.path.join(gate, "b"), "w").close()
        self.assertEqual(self.client.wait(b.id, timeout=20).outcome, "succeeded")

    def test_progress_shows_in_the_job(self) -> None:
        """What a callable tells with task.progress goes with the next
        heartbeat: the job's view shows the latest, its history each."""
        step, done = threading.Event(), threading.Event()

        def handler(task: leaselog.Task) -> Any:
            task.progress({"step": 1, "of": 2})
            step.wait(20)
            task.progress({"step": 2, "of": 2})
            done.wait(20)
            return None

        self.worker("progress", handler)
        j = self.submit("p")
        poll(lambda: self.client.job(j.id).details == {"step": 1, "of": 2}, 20, "the first progress")
        step.set()
        poll(lambda: self.client.job(j.id).details == {"step": 2, "of": 2}, 20, "the second progress")
        done.set()
        self.assertEqual(self.client.wait(j.id, timeout=20).outcome, "succeeded")
        told = [e.details for e in self.events_of(j.id, "lease.heartbeat") if e.details]
        self.assertEqual(told, [{"step": 1, "of": 2}, {"step": 2, "of": 2}])
        with self.assertRaises(TypeError):
            leaselog.Task(j, 1, "w", "/tmp").progress([1, 2])  # type: ignore[arg-type]

    def test_failing_callable(self) -> None:
        def handler(task: leaselog.Task) -> Any:
            raise RuntimeError("the model refused")

        self.worker("fails", handler)
        j = self.client.wait(self.submit("f").id, timeout=20)
        self.assertEqual((j.state, j.outcome, j.reason), ("reported", "failed", "RuntimeError: the model refused"))

    def test_cancel_and_kill_a_command(self) -> None:
        # The command traps SIGTERM and leaves a mark: a cancel is a SIGTERM first.
        w = self.worker("cmd", capacity=3, stop_grace=0.5)
        marks = tempfile.mkdtemp()
        c = self.submit("cancel", run=f"trap 'touch {marks}/term; exit 0' TERM; touch {marks}/c; "
                                      "while :; do sleep 0.05; done")
        # The killed one leaves a process in a session of its own behind: the
        # runner, a subreaper, kills it too.
        k = self.submit("kill", run=f"trap '' TERM; setsid sleep 300 & echo $! > {marks}/escapee; "
                                    f"touch {marks}/k; while :; do sleep 0.05; done")
        # One that ignores the SIGTERM of its cancel is killed after the grace.
        d = self.submit("deaf", run=f"trap '' TERM; touch {marks}/d; while :; do sleep 0.05; done")
        pc, pk, pd = self.pid_of(w, c), self.pid_of(w, k), self.pid_of(w, d)
        # The shells have set their traps.
        poll(lambda: all(os.path.exists(f"{marks}/{x}") for x in "ckd"), 10, "the commands to start")
        with open(f"{marks}/escapee") as f:
            escapee = int(f.read())
        self.assertTrue(alive(escapee))
        self.client.cancel(c.id)
        self.client.kill(k.id)
        self.client.cancel(d.id)
        cancelled, killed = self.client.wait(c.id, timeout=20), self.client.wait(k.id, timeout=20)
        deaf = self.client.wait(d.id, timeout=20)
        self.assertEqual((deaf.outcome, alive(pd)), ("cancelled", False))
        self.assertEqual((cancelled.state, cancelled.outcome), ("reported", "cancelled"))
        self.assertEqual((killed.state, killed.outcome), ("reported", "killed"))
        self.assertTrue(os.path.exists(os.path.join(marks, "term")), "the cancelled command got no SIGTERM")
        self.assertFalse(alive(pc) or alive(pk))
        poll(lambda: not alive(escapee), 5, "the process in its own session to be killed")

    def test_cancel_a_callable(self) -> None:
        started = threading.Event()
        reasons: List[Optional[str]] = []

        def handler(task: leaselog.Task) -> Any:
            started.set()
            task.wait(30)
            reasons.append(task.stop_reason)
            return {"partial": True}

        self.worker("callable", handler)
        j = self.submit("c")
        self.assertTrue(started.wait(20))
        self.client.cancel(j.id)
        done = self.client.wait(j.id, timeout=20)
        self.assertEqual((done.outcome, reasons), ("cancelled", ["cancel"]))

    def test_fenced_worker_stops_its_job_before_the_lease_expires(self) -> None:
        """Heartbeats fail (the network to the daemon is cut): the worker stops
        the job toleration − 2×renew after the last acknowledged heartbeat,
        before the daemon expires the lease; it then reports the loss, which
        comes after the expiry and is kept as a stale report."""
        proxy = Proxy(SERVER)
        self.addCleanup(proxy.close)
        w = self.worker("fenced", server=proxy.address)
        j = self.submit("j", run="while :; do sleep 0.05; done")
        pid = self.pid_of(w, j)
        lease = self.wait_state(j.id, ("running",)).lease.lease
        # Let a heartbeat renew the lease, so that the fence counts from one.
        poll(lambda: len([e for e in self.events_of(j.id, "lease.heartbeat")]) >= 1, 10, "a heartbeat")

        cut = time.time()
        proxy.cut()
        # The runner writes the exit status once the job's tree is dead: its
        # time is when the job stopped, as the runner saw it, whatever this
        # test's own polling lags on a loaded machine.
        exit_file = os.path.join(w.state_dir, f"{j.id}-{lease}", "exit")
        poll(lambda: os.path.exists(exit_file), 3 * self.timing.toleration, "the fenced job to be stopped")
        stopped = os.stat(exit_file).st_mtime
        poll(lambda: not alive(pid), 5, "the runner to exit")
        fence = self.timing.self_fence
        # The last acknowledged heartbeat was sent at most renew (plus its
        # round trip) before the cut; the fence is checked every renew/4 by
        # the worker and every 25 ms by the runner, well within the 2×renew
        # between the fence and the expiry.
        self.assertGreaterEqual(stopped - cut, fence - self.timing.renew - 0.25)
        self.assertLessEqual(stopped - cut, fence + 2 * self.timing.renew)
        poll(lambda: w.fenced, self.timing.toleration, "the worker to be fenced")

        expired = self.wait_state(j.id, ("failed",), timeout=3 * self.timing.toleration)
        self.assertEqual(expired.reason, "worker lost")
        exp = self.events_of(j.id, "lease.expired")
        self.assertEqual(len(exp), 1)
        self.assertLess(stopped, exp[0].time.timestamp(), "the job outlived its lease")

        proxy.restore()  # the lost report now arrives after the expiry: stale
        stale = poll(lambda: list(self.client.stale_reports(job=j.id)), 20, "the stale report")
        self.assertEqual((stale[0].lease, stale[0].worker, stale[0].outcome), (lease, w.id, "lost"))
        self.assertIn("fence", stale[0].reason)  # the worker's ("self-fenced…") or its runner's
        poll(lambda: not w.fenced, 10, "the fence to lift once heartbeats are answered")

    def test_fenced_callable_is_told_to_stop(self) -> None:
        proxy = Proxy(SERVER)
        self.addCleanup(proxy.close)
        started, reasons = threading.Event(), []

        def handler(task: leaselog.Task) -> Any:
            started.set()
            task.wait(60)
            reasons.append(task.stop_reason)

        self.worker("fenced", handler, server=proxy.address)
        j = self.submit("j")
        self.assertTrue(started.wait(20))
        poll(lambda: self.events_of(j.id, "lease.heartbeat"), 10, "a heartbeat")
        proxy.cut()
        poll(lambda: reasons, 3 * self.timing.toleration, "the callable to be told to stop")
        self.assertEqual(reasons, ["fence"])
        self.wait_state(j.id, ("failed",), timeout=3 * self.timing.toleration)
        proxy.restore()
        stale = poll(lambda: list(self.client.stale_reports(job=j.id)), 20, "the stale report")
        self.assertEqual(stale[0].outcome, "lost")

    def test_a_lost_grant_is_adopted(self) -> None:
        """An acquire whose answer is lost on the way still granted its lease:
        the worker finds it in its lease list, and runs the job once a
        heartbeat renews it, rather than leave it to expire."""
        proxy = Proxy(SERVER)
        self.addCleanup(proxy.close)
        proxy.lose_answer("/acquire")
        w = self.worker("adopts", server=proxy.address)
        j = self.submit("j", run="true")
        self.assertTrue(proxy.lost.wait(20), "no acquire went through the proxy")
        done = self.client.wait(j.id, timeout=20)
        self.assertEqual((done.outcome, done.leases), ("succeeded", 1))
        self.assertFalse(self.events_of(j.id, "lease.expired"))
        # The daemon records the report before the worker reads its answer.
        poll(lambda: w.leases() == [], 10, "the worker to let go of the reported lease")

    def test_stale_report_is_recorded(self) -> None:
        """A report on a lease that expired is refused (409 stale_lease) and
        kept as lease.stale_report, which stale_reports() finds."""
        w = leaselog.WorkerClient(SERVER, uid("stale"))
        j = self.submit("s", run="true")
        grants = poll(lambda: [g for g in w.acquire(1, wait_seconds=0.5)], 10, "a grant")
        self.assertEqual(grants[0].job.id, j.id)
        lease = grants[0].lease
        self.wait_state(j.id, ("failed",), timeout=3 * self.timing.toleration)  # silent past toleration
        with self.assertRaises(leaselog.StaleLease) as cm:
            w.report(lease, "succeeded", ref="refs/late", result={"late": True})
        e = cm.exception
        self.assertEqual((e.status, e.code), (409, "stale_lease"))
        self.assertIsInstance(e, leaselog.Conflict)
        stale = list(self.client.stale_reports(job=j.id))
        self.assertEqual([s.seq for s in stale], [e.stale_report_seq])
        self.assertEqual((stale[0].lease, stale[0].worker, stale[0].ref, stale[0].result),
                         (lease, w.worker_id, "refs/late", {"late": True}))
        self.assertEqual([s.seq for s in self.client.stale_reports(worker=w.worker_id)], [e.stale_report_seq])
        with self.assertRaises(leaselog.StaleLease) as again:
            w.report(lease, "succeeded", ref="refs/late", result={"late": True})
        self.assertEqual(again.exception.stale_report_seq, e.stale_report_seq, "the same stale report is kept once")


class RestartTest(ServerTest):
    """A worker process SIGKILLed and started again with the same id and
    state directory."""

    def start_process(self, worker_id: str, state: str, handler: str) -> subprocess.Popen:
        code = (f"import leaselog, logging\n"
                f"logging.basicConfig(level=logging.INFO)\n"
                f"{handler}\n"
                f"leaselog.Worker({SERVER!r}, {worker_id!r}, handler=handler, state_dir={state!r},"
                f" wait_seconds=0.5).run()\n")
        env = dict(os.environ, PYTHONPATH=PACKAGE_ROOT)
        p = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        self.addCleanup(lambda: (p.poll() is None and p.kill(), p.wait()))
        return p

    def test_reattaches_a_running_command(self) -> None:
        state, gate = tempfile.mkdtemp(), tempfile.mkdtemp()
        wid = uid("restart-cmd")
        p = self.start_process(wid, state, "handler = None")
        j = self.submit("r", run=f"while [ ! -e {gate}/go ]; do sleep 0.05; done; echo '[1]' > $LEASELOG_RESULT")
        lease = self.wait_state(j.id, ("running",)).lease.lease
        with open(os.path.join(state, f"{j.id}-{lease}", "pid")) as f:
            runner = int(f.read())
        p.send_signal(signal.SIGKILL)
        p.wait()
        self.assertTrue(alive(runner), "the command died with its worker")

        w = leaselog.Worker(SERVER, wid, state_dir=state, wait_seconds=0.5).start()
        self.addCleanup(w.stop)
        self.assertEqual(w.leases(), [lease])
        open(os.path.join(gate, "go"), "w").close()
        done = self.client.wait(j.id, timeout=20)
        self.assertEqual((done.outcome, done.result, done.leases), ("succeeded", [1], 1))
        self.assertFalse([e for e in self.events_of(j.id) if e.type in ("lease.expired", "lease.lost")])

    def test_a_callable_is_lost_on_restart(self) -> None:
        state, wid = tempfile.mkdtemp(), uid("restart-callable")
        p = self.start_process(wid, state, "def handler(task):\n    task.wait(600)")
        j = self.submit("r")
        self.wait_state(j.id, ("running",))
        p.send_signal(signal.SIGKILL)
        p.wait()
        w = leaselog.Worker(SERVER, wid, state_dir=state, wait_seconds=0.5).start()
        self.addCleanup(w.stop)
        done = self.client.wait(j.id, timeout=20)
        self.assertEqual((done.state, done.reason), ("failed", "worker lost"))
        lost = self.events_of(j.id, "lease.lost")
        self.assertEqual(len(lost), 1)
        self.assertIn("callable", lost[0].reason)

    def test_a_command_that_ended_while_the_worker_was_down_is_reported(self) -> None:
        state, gate, wid = tempfile.mkdtemp(), tempfile.mkdtemp(), uid("restart-ended")
        p = self.start_process(wid, state, "handler = None")
        j = self.submit("r", run=f"while [ ! -e {gate}/go ]; do sleep 0.05; done; exit 4")
        lease = self.wait_state(j.id, ("running",)).lease.lease
        p.send_signal(signal.SIGKILL)
        p.wait()
        open(os.path.join(gate, "go"), "w").close()
        poll(lambda: os.path.exists(os.path.join(state, f"{j.id}-{lease}", "exit")), 10, "the exit status")
        w = leaselog.Worker(SERVER, wid, state_dir=state, wait_seconds=0.5).start()
        self.addCleanup(w.stop)
        done = self.client.wait(j.id, timeout=20)
        self.assertEqual((done.outcome, done.reason), ("failed", "exit status 4"))


if __name__ == "__main__":
    unittest.main()
