"""The worker calls over a worker session, by default, and over HTTP where the
upgrade is refused: against the daemon of $LEASELOG_SERVER, through a proxy
that records what each connection carried."""

from __future__ import annotations

import tempfile
import threading
import time
import unittest
import urllib.request
from typing import List

import leaselog
from leaselog import _session
from leaselog._http import Call

from .support import SERVER, Proxy, ServerTest, poll, uid


class SessionTest(ServerTest):

    def proxy(self, **kw) -> Proxy:
        p = Proxy(SERVER, **kw)
        self.addCleanup(p.close)
        return p

    def lifecycle(self, w: leaselog.WorkerClient, name: str) -> leaselog.Job:
        """Take this test's job through acquire, start, heartbeat and a
        report that carries the next acquire; the job as it ends."""
        j = self.submit(name, run="true")
        while True:  # older jobs of this run may be queued before it
            for g in w.acquire(1, wait_seconds=1):
                if g.job.id != j.id:
                    w.report(g.lease, "lost", reason="not this test's job")
                    continue
                self.assertEqual(w.start(g.lease).state, "running")
                hb = w.heartbeat([g.lease])
                self.assertEqual([x["directive"] for x in hb["leases"]], ["continue"])
                w.report(g.lease, "succeeded", result={"n": 1}, next_max=1)
                return self.client.job(j.id)

    def worker_calls(self, p: Proxy) -> List[str]:
        return [r for r in p.requests if "/v1/workers/" in r or "/v1/leases/" in r]

    def test_worker_calls_go_over_a_session_by_default(self) -> None:
        p = self.proxy()
        w = leaselog.WorkerClient(p.address, uid("sw"))
        self.addCleanup(w.close)
        done = self.lifecycle(w, "s")
        self.assertEqual((done.state, done.outcome, done.result), ("reported", "succeeded", {"n": 1}))
        self.assertTrue(w.session)
        calls = self.worker_calls(p)
        self.assertEqual(p.requests.count("GET /v1/session HTTP/1.1"), 1, p.requests)
        self.assertTrue(calls and all(c.startswith("FRAME ") for c in calls), calls)
        for op in ("acquire", "start", "heartbeat", "report"):
            self.assertTrue(any(c.startswith(f"FRAME {op} ") for c in calls), f"no {op} frame in {calls}")
        # An error answer over a frame is the HTTP call's error.
        with self.assertRaises(leaselog.NotFound):
            w.report(10 ** 12, "succeeded")
        with self.assertRaises(leaselog.BadRequest):
            w.acquire(1, wait_seconds=-1)
        # A worker id no frame can carry goes as a plain call, refused as
        # over HTTP, and the session goes on.
        bad = leaselog.WorkerClient(p.address, "a b")
        with self.assertRaises(leaselog.BadRequest):
            bad.heartbeat([])
        self.assertTrue(bad.session)
        w.heartbeat([])

    def test_plain_calls_when_asked(self) -> None:
        p = self.proxy()
        w = leaselog.WorkerClient(p.address, uid("pw"), session=False)
        self.assertEqual(self.lifecycle(w, "p").outcome, "succeeded")
        self.assertFalse(w.session)
        calls = self.worker_calls(p)
        self.assertNotIn("GET /v1/session HTTP/1.1", p.requests)
        self.assertTrue(calls and all(c.startswith("POST /v1/") for c in calls), calls)

    def test_a_refused_upgrade_falls_back_to_plain_calls(self) -> None:
        """A proxy that does not pass upgrades forwards the GET without its
        Upgrade header, the daemon answers 400, and the client asks once and
        makes plain calls from then on — the call that asked included."""
        p = self.proxy(refuse_upgrades=True)
        w = leaselog.WorkerClient(p.address, uid("fw"))
        self.assertTrue(w.session)
        self.assertEqual(self.lifecycle(w, "f").outcome, "succeeded")
        self.assertFalse(w.session)
        self.assertEqual(p.refused, 1)
        calls = self.worker_calls(p)
        self.assertTrue(calls and all(c.startswith("POST /v1/") for c in calls), calls)

    def test_the_worker_falls_back_too(self) -> None:
        p = self.proxy(refuse_upgrades=True)
        w = leaselog.Worker(p.address, uid("fworker"), state_dir=tempfile.mkdtemp(prefix="leaselog-py-"),
                            wait_seconds=0.5).start()
        self.addCleanup(w.stop)
        j = self.submit("fj", run="true")
        self.assertEqual(self.client.wait(j.id, timeout=20).outcome, "succeeded")
        self.assertFalse(w.api.session)
        self.assertEqual(p.refused, 1)

    def test_refusal_rules(self) -> None:
        """The answers to the upgrade that mean plain calls for good, as the
        Go client's: not the token's (401, 403) nor the passing ones."""
        for status in (200, 204, 301, 400, 404, 405, 426, 501, 505):
            self.assertTrue(_session.refused(status), status)
        for status in (401, 403, 408, 429, 500, 502, 503, 504):
            self.assertFalse(_session.refused(status), status)

    def test_a_broken_session_is_opened_again(self) -> None:
        """A cut ends the session: the call in flight raises Unreachable
        (retryable), and the next call opens another."""
        p = self.proxy()
        w = leaselog.WorkerClient(p.address, uid("bw"))
        self.addCleanup(w.close)
        w.heartbeat([])
        errs: List[leaselog.LeaselogError] = []

        def poll_long() -> None:
            try:
                w.acquire(1, wait_seconds=30)
            except leaselog.LeaselogError as e:
                errs.append(e)
        t = threading.Thread(target=poll_long)
        t.start()
        poll(lambda: any(r.startswith("FRAME acquire") for r in p.requests), 10, "the acquire frame")
        p.cut()
        t.join(10)
        self.assertFalse(t.is_alive(), "the acquire did not end with its session")
        self.assertTrue(errs and isinstance(errs[0], leaselog.Unreachable) and errs[0].retryable, errs)
        p.restore()
        w.heartbeat([])
        self.assertEqual(p.requests.count("GET /v1/session HTTP/1.1"), 2, p.requests)
        self.assertTrue(w.session)

    def test_an_aborted_long_poll_ends_its_session(self) -> None:
        """Aborting a long poll over a session raises at once and ends the
        session, as an HTTP call's abort closes its connection, so that the
        daemon ends the wait rather than grant a lease nobody reads (the
        worker aborts its acquire when it stops): a job submitted after it
        goes to the next worker that asks."""
        p = self.proxy()
        w = leaselog.WorkerClient(p.address, uid("aw"))
        self.addCleanup(w.close)
        base = sessions_open()
        call = Call()
        errs: List[leaselog.LeaselogError] = []

        def poll_long() -> None:
            try:
                w.acquire(1, wait_seconds=30, call=call)
            except leaselog.LeaselogError as e:
                errs.append(e)
        t = threading.Thread(target=poll_long)
        t.start()
        poll(lambda: any(r.startswith("FRAME acquire") for r in p.requests), 10, "the acquire frame")
        self.assertEqual(sessions_open(), base + 1)
        st = time.monotonic()
        call.abort()
        t.join(10)
        self.assertLess(time.monotonic() - st, 5)
        self.assertTrue(errs and isinstance(errs[0], leaselog.Unreachable), errs)
        poll(lambda: sessions_open() == base, 10, "the daemon to end the session")
        other = leaselog.WorkerClient(SERVER, uid("aw2"), session=False)
        self.assertEqual(self.lifecycle(other, "after").outcome, "succeeded")
        w.heartbeat([])  # a new session
        self.assertEqual(p.requests.count("GET /v1/session HTTP/1.1"), 2, p.requests)


def sessions_open() -> int:
    """The daemon's leaselog_sessions gauge."""
    with urllib.request.urlopen(SERVER + "/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("leaselog_sessions "):
                return int(float(line.split()[1]))
    raise AssertionError("no leaselog_sessions in the daemon's metrics")

if __name__ == "__main__":
    unittest.main()
