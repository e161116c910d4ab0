"""The worker's decisions (leaselog._core) on a clock the test holds: when
the fence falls, what each directive does, what is reported. No daemon."""

from __future__ import annotations

import threading
import unittest
from typing import Any, Dict, List, Optional

from leaselog import errors
from leaselog._core import LOST, Core, Outcome, refused
from leaselog.types import Grant, Job, Timing

T = Timing(renew=1.0, grace=5.0, toleration=30.0)  # the fence: 28 s after the base


class FakeRun:
    def __init__(self) -> None:
        self.done = threading.Event()
        self.stops: List[Any] = []

    def outcome(self) -> Outcome:
        return Outcome("succeeded")

    def stop(self, kill: bool, why: str) -> None:
        self.stops.append((kill, why))

    def fence(self, at: float) -> None:
        pass


def grant(lease: int, held: float = 0) -> Grant:
    job = Job(id=f"j{lease}", kind="run", state="acquired", attempts=0, leases=1, spec={}, lease=None,
              submitted=None, updated=None)
    return Grant(lease=lease, job=job, timing=T, held_seconds=held)


def reply(**directives: str) -> Dict[str, Any]:
    return {"leases": [{"lease": int(k[1:]), "directive": v} for k, v in directives.items()],
            "renew_seconds": T.renew, "grace_seconds": T.grace, "toleration_seconds": T.toleration}


class CoreTest(unittest.TestCase):

    def started(self, c: Core, lease: int, sent: float, now: float, held: float = 0) -> FakeRun:
        h, ok = c.take(grant(lease, held), sent, now)
        self.assertTrue(ok)
        run = FakeRun()
        self.assertFalse(c.started(h, run, now))
        return run

    def test_fence_falls_toleration_minus_two_renew_after_the_last_acknowledged_send(self) -> None:
        c = Core(1, T, now=0)
        run = self.started(c, 7, sent=0, now=0.1)
        ids, due = c.beat_due(10)
        self.assertEqual((ids, due), ([7], True))
        acts = c.acked(10, 10.2, reply(l7="continue"))
        self.assertEqual(acts.fence, [(run, 10 + 28)])
        self.assertEqual(c.fence(38)[0], [], "at the fence exactly, nothing falls")
        self.assertFalse(c.fenced)
        stops, fell, silent = c.fence(38.01)
        self.assertEqual([(s.lease, s.kill, s.why) for s in stops], [(7, True, "fence")])
        self.assertTrue(fell and c.fenced)
        self.assertAlmostEqual(silent, 28.01)
        self.assertEqual(c.room(), 0, "a fenced worker takes no work")
        self.assertEqual(c.ended(c.held[7]).outcome, LOST)
        # A grant answered to a call sent before the fence fell is fresh: it
        # starts, its runner holding its own lease's deadline.
        h, ok = c.take(grant(8), 38.5, 38.6)
        self.assertTrue(ok, "a fresh grant reaching a fenced worker starts")
        self.assertFalse(c.started(h, FakeRun(), 38.6))
        self.assertEqual(c.deadline(h), 38.5 + 28)
        # A late answer (sent before the fence fell) lifts nothing; a fresh one does.
        self.assertFalse(c.acked(9, 38.7, reply()).unfenced)
        self.assertTrue(c.acked(39, 39.1, reply()).unfenced)

    def test_a_lease_of_its_own_timing_is_fenced_by_it(self) -> None:
        """A job's own timing (renew 0.5, toleration 6: a fence 5 s after the
        base) fences its lease beside one of the daemon's (28 s), and the
        worker heartbeats as often as the shortest renew asks."""
        c = Core(2, T, now=0)
        self.started(c, 1, 0, 0)
        g = grant(2)
        g.job.timing = {"renew_seconds": 0.5, "grace_seconds": 2.0, "toleration_seconds": 6.0}
        h, ok = c.take(g, 0, 0)
        self.assertTrue(ok)
        self.assertFalse(c.started(h, FakeRun(), 0))
        self.assertEqual(c.renew, 0.5)
        self.assertEqual(c.deadline(h), 5)
        stops, fell, _ = c.fence(5.01)
        self.assertEqual([(s.lease, s.why) for s in stops], [(2, "fence")])
        self.assertFalse(fell, "the worker's own fence is the daemon's timing's")
        self.assertEqual(c.fence(28.01)[0][0].lease, 1)

    def test_a_grant_counts_from_the_send_plus_the_hold(self) -> None:
        c = Core(2, T, now=0)
        h, ok = c.take(grant(1, held=20), sent=0, now=21)
        self.assertTrue(ok)
        self.assertEqual(h.base, 20)
        h, ok = c.take(grant(2, held=50), sent=0, now=10)
        self.assertEqual(h.base, 10, "never later than the answer's arrival")
        h, ok = c.take(grant(3), sent=0, now=28.5)
        self.assertFalse(ok, "a grant that came past its fence does not start")
        self.assertTrue(h.fenced)

    def test_directives(self) -> None:
        c = Core(3, T, now=0)
        runs = {i: self.started(c, i, 0, 0) for i in (1, 2, 3)}
        c.beat_due(1)
        acts = c.acked(1, 1.1, reply(l1="cancel", l2="kill", l3="gone"))
        self.assertEqual([(s.lease, s.kill, s.why) for s in acts.stop],
                         [(1, False, "cancel"), (2, True, "kill"), (3, True, "gone")])
        self.assertIsNone(c.ended(c.held[3]), "a gone lease is not reported")
        self.assertEqual(c.ended(c.held[1]).outcome, "succeeded", "the run says how a cancel ended")
        self.assertEqual(runs[1].stops, [])

    def test_a_wake_waits_for_a_heartbeat_before_fencing(self) -> None:
        c = Core(1, T, now=0)
        self.started(c, 1, 0, 0)
        _, beat, check = c.turn(0)
        c.acked(0, 0.1, reply(l1="continue"))
        _, beat, check = c.turn(40)  # the process was paused for 40 s
        self.assertTrue(beat)
        self.assertFalse(check, "no fence before the heartbeat after the wake is answered")
        c.acked(40, 40.1, reply(l1="continue"))
        self.assertTrue(c.turn(40.2)[2])
        self.assertEqual(c.fence(40.2)[0], [])

    def test_orphans_and_leases_let_go(self) -> None:
        c = Core(2, T, now=0)
        h, _ = c.take(grant(1), 0, 0)
        mark = c.list_mark()
        c.forget(h)  # reported while the list was on its way
        self.assertEqual([g.lease for g in c.orphans([grant(1), grant(2)], mark)], [2])
        a = c.adopt(grant(2))
        self.assertEqual(c.take(grant(2), 0, 0), (None, False), "a grant of a held lease is no new lease")
        self.assertEqual(c.take(grant(1), 0, 0), (None, False), "nor one of a lease let go")
        c.beat_due(5)
        acts = c.acked(5, 5.1, reply(l2="continue"))
        self.assertEqual(acts.start, [a])
        self.assertEqual(a.base, 5)
        b = c.adopt(grant(3))
        acts = c.acked(6, 6.1, reply(l3="kill"))
        self.assertEqual([(h.lease, o.outcome) for h, o in acts.report], [(3, "killed")])
        self.assertIs(acts.report[0][0], b)

    def test_an_adopted_lease_brings_the_daemons_timing(self) -> None:
        """A worker whose every call failed has heard the daemon's timing
        only in the lease list: it heartbeats by it, not by the timing it
        assumed at start (renew 10 s against a toleration of 3 s)."""
        c = Core(1, Timing(renew=10.0, grace=50.0, toleration=300.0), now=0)
        c.adopt(grant(7))
        self.assertEqual((c.timing, c.renew), (T, T.renew))
        self.assertEqual(c.beat_due(0), ([7], True))
        c.unacked()
        self.assertEqual(c.beat_due(T.renew), ([7], True), "the next heartbeat one renew later")


class RefusedTest(unittest.TestCase):

    def test_a_refusal_sends_less_each_time(self) -> None:
        bad = errors.BadRequest("result: not JSON", status=400)
        o = Outcome("succeeded", "", "refs/x", {"big": 1})
        nxt, what = refused(o, bad)
        self.assertEqual((what, nxt.outcome, nxt.result, nxt.ref), ("resend", "succeeded", None, ""))
        nxt, what = refused(nxt, bad)
        self.assertEqual((what, nxt.outcome), ("resend", LOST))
        self.assertEqual(refused(nxt, bad), (None, "expire"))

    def test_final_and_later(self) -> None:
        o = Outcome("failed", "exit status 1")
        cases: List[Any] = [
            (errors.StaleLease("stale", status=409), "final"),
            (errors.Forbidden("not yours", status=403), "final"),
            (errors.NotFound("no lease", status=404), "final"),
            (errors.Unauthorized("who", status=401), "later"),
            (errors.Unavailable("down", status=503), "later"),
            (errors.Unreachable("no answer"), "later"),
        ]
        for err, want in cases:
            with self.subTest(err=type(err).__name__):
                self.assertEqual(refused(o, err)[1], want)


if __name__ == "__main__":
    unittest.main()
