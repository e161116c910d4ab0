"""The Client against a real daemon: submit, read, page, cancel, kill, errors."""

from __future__ import annotations

import datetime as dt
import os
import tempfile
import threading
import unittest
from typing import List
from unittest import mock

import leaselog
from leaselog import _http, errors
from leaselog.types import parse_time

from .support import SERVER, Proxy, ServerTest, poll, uid


class AddressTest(unittest.TestCase):
    """What a server and a token may be; no daemon needed."""

    def test_server_forms(self) -> None:
        for given, want in [("127.0.0.1:7420", "http://127.0.0.1:7420"),
                            ("localhost:1/", "http://localhost:1"),
                            ("http://h:2", "http://h:2"),
                            ("https://h/base/", "https://h/base"),
                            ("unix:///run/leaselog.sock", "unix:///run/leaselog.sock")]:
            with self.subTest(given=given):
                self.assertEqual(_http.normalize_server(given), want)
        for bad in ("ftp://h:1", "http://", "unix://"):
            with self.subTest(bad=bad), self.assertRaises(ValueError):
                _http.normalize_server(bad)

    def test_environment(self) -> None:
        old = {k: os.environ.get(k) for k in ("LEASELOG_SERVER", "LEASELOG_TOKEN")}
        self.addCleanup(lambda: [os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)
                                 for k, v in old.items()])
        os.environ["LEASELOG_SERVER"] = "example:9"
        os.environ["LEASELOG_TOKEN"] = "a-token-of-sixteen-chars\n"
        t = _http.Transport()
        self.assertEqual((t.server, t.token), ("http://example:9", "a-token-of-sixteen-chars"))
        os.environ.pop("LEASELOG_SERVER")
        self.assertEqual(_http.Transport().server, _http.DEFAULT_SERVER)
        with self.assertRaises(ValueError):
            _http.Transport(token="  ")

    def test_token_found_as_the_cli_finds_it(self) -> None:
        data = tempfile.mkdtemp()
        for name, token in (("token", "admin-token-0123456789"), ("worker-token", "worker-token-0123456789")):
            path = os.path.join(data, name)
            with open(os.open(path, os.O_WRONLY | os.O_CREAT, 0o600), "w") as f:
                f.write(token + "\n")
        with mock.patch.dict(os.environ, {"LEASELOG_DATA": data}):
            os.environ.pop("LEASELOG_TOKEN", None)
            cases = [
                ("a local daemon: DATA/token", "127.0.0.1:7420", {}, "admin-token-0123456789"),
                ("localhost", "http://localhost:9", {}, "admin-token-0123456789"),
                ("a socket", "unix:///run/l.sock", {}, "admin-token-0123456789"),
                ("a worker: DATA/worker-token", "127.0.0.1:7420", {"token_file": "worker-token"},
                 "worker-token-0123456789"),
                ("another host: never a token file", "example:7420", {}, None),
                ("data given, none there", "127.0.0.1:7420", {"data": tempfile.mkdtemp()}, None),
            ]
            for name, server, kw, want in cases:
                with self.subTest(name):
                    self.assertEqual(_http.Transport(server, **kw).token, want)
            with mock.patch.dict(os.environ, {"LEASELOG_TOKEN": "env-token-0123456789"}):
                self.assertEqual(_http.Transport("127.0.0.1:7420").token, "env-token-0123456789")
            with mock.patch.dict(os.environ, {"LEASELOG_TOKEN": " "}), self.assertRaises(ValueError):
                _http.Transport("127.0.0.1:7420")
            os.chmod(os.path.join(data, "token"), 0o644)
            with self.assertRaisesRegex(ValueError, "lets other users read it"):
                _http.Transport("127.0.0.1:7420")

    def test_times(self) -> None:
        t = parse_time("2026-12-03T11:51:52.700455123Z")
        self.assertEqual(t, dt.datetime(2026, 12, 3, 11, 51, 52, 700455, tzinfo=dt.timezone.utc))
        self.assertEqual(parse_time("2026-12-03T11:51:52+01:00").utcoffset(), dt.timedelta(hours=1))
        with self.assertRaises(ValueError):
            parse_time("yesterday")

    def test_errors_by_code_then_status(self) -> None:
        cases = [
            (404, {"error": {"code": "not_found", "message": "m"}}, errors.NotFound),
            (409, {"error": {"code": "job_exists", "message": "m"}}, errors.JobExists),
            (409, {"error": {"code": "stale_lease", "message": "m"}, "stale_report_seq": 7}, errors.StaleLease),
            (503, {"error": {"code": "stopping", "message": "m"}}, errors.Stopping),
            (400, {"error": {"code": "body_too_large", "message": "m"}}, errors.BodyTooLarge),
            (403, None, errors.Forbidden),
            (502, None, errors.InternalError),
        ]
        for status, body, cls in cases:
            with self.subTest(cls=cls.__name__):
                e = errors.from_answer(status, body, "plain text")
                self.assertIs(type(e), cls)
                self.assertEqual(e.status, status)
                self.assertIsInstance(e, leaselog.LeaselogError)
        stale = errors.from_answer(409, cases[2][1])
        self.assertEqual((stale.code, stale.stale_report_seq), ("stale_lease", 7))
        self.assertIsInstance(stale, errors.Conflict)
        self.assertIs(errors.Fenced, errors.StaleLease)
        self.assertTrue(errors.from_answer(503, None).retryable)
        self.assertFalse(errors.from_answer(404, None).retryable)

    def test_unix_socket(self) -> None:
        """unix:///path speaks HTTP over the socket (the daemon listens on one
        with server.listen = "unix:///…")."""
        import http.server
        import socketserver
        import tempfile
        import threading

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body = b'{"error":{"code":"not_found","message":"no job"}}'
                self.send_response(404 if self.path.startswith("/v1/jobs/") else 200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def address_string(self) -> str:
                return "unix"

            def log_message(self, *args: object) -> None:
                pass

        path = os.path.join(tempfile.mkdtemp(), "leaselog.sock")
        srv = socketserver.UnixStreamServer(path, Handler)
        self.addCleanup(srv.server_close)
        threading.Thread(target=srv.serve_forever, daemon=True).start()
        self.addCleanup(srv.shutdown)
        with self.assertRaises(leaselog.NotFound) as cm:
            leaselog.Client("unix://" + path).job("x")
        self.assertEqual((cm.exception.status, cm.exception.message), (404, "no job"))

    def test_unreachable(self) -> None:
        c = leaselog.Client("127.0.0.1:1", timeout=2)
        with self.assertRaises(leaselog.Unreachable) as cm:
            c.job("x")
        self.assertIsNone(cm.exception.status)
        self.assertTrue(cm.exception.retryable)


class ClientTest(ServerTest):

    def test_submit_is_idempotent_and_job_reads_it(self) -> None:
        j = self.submit("a", run="true", spec={"model": "m1"})
        self.assertEqual((j.state, j.kind, j.created), ("queued", "run", True))
        self.assertEqual(j.spec, {"run": "true", "model": "m1"})
        again = self.client.submit(j.id, run="true", spec={"model": "m1"})
        self.assertEqual((again.id, again.created), (j.id, False))
        got = self.client.job(j.id)
        self.assertEqual((got.id, got.state, got.created), (j.id, "queued", None))
        self.assertIsNotNone(got.submitted)

    def test_errors_carry_code_and_status(self) -> None:
        j = self.submit("taken", run="true")
        cases = [
            (lambda: self.client.submit(j.id, run="other"), errors.JobExists, 409, "job_exists"),
            (lambda: self.client.job(uid("no-such-job")), errors.NotFound, 404, "not_found"),
            (lambda: self.client.cancel(uid("no-such-job")), errors.NotFound, 404, "not_found"),
            (lambda: self.client.submit(uid("bad-kind"), kind="batch"), errors.BadRequest, 400, "bad_request"),
            (lambda: list(self.client.jobs(state="sleeping")), errors.BadRequest, 400, "bad_request"),
            (lambda: leaselog.WorkerClient(self.client.server, uid("w")).report(10 ** 12, "succeeded"),
             errors.NotFound, 404, "not_found"),
        ]
        for call, cls, status, code in cases:
            with self.subTest(code=code, cls=cls.__name__), self.assertRaises(cls) as cm:
                call()
            self.assertEqual((cm.exception.status, cm.exception.code), (status, code))
            self.assertTrue(cm.exception.message)
        with self.assertRaises(ValueError):
            list(self.client.jobs(limit=0))

    def test_jobs_pages(self) -> None:
        ids = sorted(self.submit(f"p{i}", run="true").id for i in range(7))
        # Pages of 2: the iterator follows next until it is absent.
        got = [j.id for j in self.client.jobs(state="queued", kind="run", limit=2) if j.id in ids]
        self.assertEqual(got, ids)  # every job, once, by id
        _, first = self.client._t.request("GET", "/v1/jobs", query={"state": "queued", "limit": 2})
        self.assertEqual(len(first["jobs"]), 2)
        self.assertIn("next", first, "a page of 2 of 7 or more queued jobs says where the next begins")
        _, last = self.client._t.request("GET", "/v1/jobs", query={"state": "queued", "limit": 1000})
        self.assertNotIn("next", last, "the last page has no next")

    def test_events_page_and_filter(self) -> None:
        j = self.submit("ev", run="true")
        self.client.cancel(j.id)
        evs = list(self.client.events(job=j.id, limit=1))
        self.assertEqual([e.type for e in evs], ["lease.queued", "lease.cancelled"])
        self.assertEqual([e.seq for e in evs], sorted(e.seq for e in evs))
        self.assertTrue(all(e.job == j.id and e.time is not None for e in evs))
        after = list(self.client.events(job=j.id, after=evs[0].seq))
        self.assertEqual([e.seq for e in after], [evs[1].seq])
        since = list(self.client.events(job=j.id, since=evs[0].time - dt.timedelta(seconds=1)))
        self.assertEqual(len(since), 2)
        self.assertEqual([e.type for e in self.client.history(j.id, limit=1)], ["lease.queued", "lease.cancelled"])

    def test_follow_resumes_after_a_cut(self) -> None:
        """follow() waits for new events, and a stream cut in the middle is
        made again from the last event seen: nothing lost, nothing twice."""
        proxy = Proxy(SERVER)
        self.addCleanup(proxy.close)
        j = self.submit("follow", run="true")
        seen: List[leaselog.Event] = []

        def follow() -> None:
            for e in leaselog.Client(proxy.address).follow(job=j.id, idle_timeout=5):
                seen.append(e)
                if e.type == "lease.cancelled":
                    return

        t = threading.Thread(target=follow, daemon=True)
        t.start()
        poll(lambda: seen, 10, "the queued event")
        proxy.cut()
        self.client.cancel(j.id)
        proxy.restore()
        t.join(20)
        self.assertFalse(t.is_alive(), "follow() did not resume")
        self.assertEqual([e.type for e in seen], ["lease.queued", "lease.cancelled"])
        self.assertEqual(proxy.connections, 2, "one stream, cut, then one more")

    def test_submit_many(self) -> None:
        a, b = uid("batch-a"), uid("batch-b")
        self.jobs += [a, b]
        out = self.client.submit_many([{"id": a, "run": "true"}, {"id": b, "kind": "evaluation", "run": "true"},
                                       {"id": a, "run": "other"}, {"id": uid("batch-bad"), "kind": "batch"}])
        self.assertEqual([s.status for s in out], [201, 201, 409, 400])
        self.assertEqual((out[0].job.id, out[0].job.created, out[1].job.kind), (a, True, "evaluation"))
        self.assertIsInstance(out[2].error, errors.JobExists)
        self.assertIsInstance(out[3].error, errors.BadRequest)
        self.assertFalse(out[3].ok)
        self.assertEqual(self.client.job(b).state, "queued")

    def test_routing_priority_and_delay(self) -> None:
        """Jobs that require a label go only to a worker that offers it, the
        highest priority first; a delayed one waits; a queued job no worker
        present can take says so."""
        lane = {"lane": uid("lane")}
        low = self.submit("low", kind="evaluation", run="true", labels=lane, priority=1)
        high = self.submit("high", kind="evaluation", run="true", labels=lane, priority=5)
        later = self.submit("later", kind="evaluation", run="true", labels=lane, priority=9,
                            not_before=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1))
        self.assertEqual((high.labels, high.priority), (lane, 5))
        self.assertIsNotNone(later.not_before)
        self.assertEqual(self.client.job(later.id).waiting_for, "not_before")
        got = self.client.job(high.id)
        self.assertEqual((got.waiting_for, got.unroutable), ("worker", True))
        self.assertEqual(sorted(j.id for j in self.client.jobs(labels=lane)), sorted([low.id, high.id, later.id]))
        with self.assertRaises(errors.JobExists):
            self.client.submit(high.id, kind="evaluation", run="true", labels=lane, priority=4)

        runs = leaselog.WorkerClient(self.client.server, uid("runs-only"), kinds=["run"], labels=lane)
        self.assertFalse([g for g in runs.acquire(10) if g.job.id in (low.id, high.id, later.id)])
        w = leaselog.WorkerClient(self.client.server, uid("lane-worker"), kinds=["evaluation"], labels=lane)
        gs = w.acquire(2)
        self.assertEqual([g.job.id for g in gs], [high.id, low.id])  # above every job of priority 0
        for g in gs:
            w.report(g.lease, "succeeded")
        with self.assertRaises(errors.BadRequest) as cm:
            leaselog.WorkerClient(self.client.server, uid("w"), kinds=["gpu"]).acquire(1)
        self.assertIn("kinds", cm.exception.message)

    def test_jobs_by_outcome(self) -> None:
        """A job reported failed is in state reported, outcome failed: the
        outcome filter finds it, state failed does not."""
        w = leaselog.WorkerClient(self.client.server, uid("ow"))
        bad, good = self.submit("bad", run="false"), self.submit("good", run="true")
        outcomes = {bad.id: "failed", good.id: "succeeded"}
        while outcomes:
            for g in w.acquire(1, wait_seconds=1):  # older jobs of this run may be queued before these
                if g.job.id in outcomes:
                    w.report(g.lease, outcomes.pop(g.job.id))
                else:
                    w.report(g.lease, "lost", reason="not this test's job")
        mine = {bad.id, good.id}
        self.assertEqual([j.id for j in self.client.jobs(outcome="failed") if j.id in mine], [bad.id])
        self.assertEqual([j.id for j in self.client.jobs(outcome="succeeded", limit=1) if j.id in mine], [good.id])
        self.assertEqual([j.id for j in self.client.jobs(state="failed") if j.id in mine], [])
        j = self.client.job(bad.id)
        self.assertEqual((j.state, j.outcome), ("reported", "failed"))
        with self.assertRaises(errors.BadRequest) as cm:
            list(self.client.jobs(outcome="lost"))
        self.assertIn('outcome "lost"', cm.exception.message)

    def test_max_requeues(self) -> None:
        """An evaluation lost once more than its cap fails, "lost N times"."""
        e = self.submit("poison", kind="evaluation", run="true", max_requeues=1)
        self.assertEqual(e.max_requeues, 1)
        self.assertEqual(self.client.submit(e.id, kind="evaluation", run="true").max_requeues, 1,
                         "the same job again, naming no cap")
        with self.assertRaises(errors.JobExists):
            self.client.submit(e.id, kind="evaluation", run="true", max_requeues=2)
        with self.assertRaises(errors.BadRequest) as cm:
            self.submit("bad-cap", kind="evaluation", max_requeues=-1)
        self.assertIn("max_requeues -1", cm.exception.message)
        w = leaselog.WorkerClient(self.client.server, uid("pw"))
        lost = 0
        while lost < 2:
            for g in w.acquire(1, wait_seconds=1):
                w.report(g.lease, "lost", reason="agent vanished")
                lost += g.job.id == e.id
        j = self.client.job(e.id)
        self.assertEqual((j.state, j.reason, j.attempts, j.max_requeues), ("failed", "lost 2 times", 0, 1))
        out = self.client.submit_many([{"id": uid("capped-batch"), "kind": "evaluation", "max_requeues": 3}])
        self.jobs.append(out[0].id)
        self.assertEqual((out[0].status, out[0].job.max_requeues), (201, 3))

    def test_own_timing(self) -> None:
        """A job's own timing: the fields named over the daemon's, answered
        with the job and its grant; one that does not hold together is a
        BadRequest naming the field."""
        j = self.submit("timed", run="true", toleration_seconds=2.5)
        want = {"renew_seconds": 0.2, "grace_seconds": 1.0, "toleration_seconds": 2.5}
        self.assertEqual(j.timing, want)
        self.assertEqual(self.client.job(j.id).timing, want)
        with self.assertRaises(errors.BadRequest) as cm:
            self.submit("too-short", run="true", toleration_seconds=0.5)
        self.assertIn("toleration_seconds: must exceed grace_seconds", cm.exception.message)
        out = self.client.submit_many([{"id": uid("timed-batch"), "renew_seconds": 1, "grace_seconds": 3,
                                        "toleration_seconds": 7}])
        self.jobs.append(out[0].id)
        self.assertEqual((out[0].status, out[0].job.timing),
                         (201, {"renew_seconds": 1, "grace_seconds": 3, "toleration_seconds": 7}))

    def test_cancel_and_kill_queued(self) -> None:
        j = self.submit("c", run="true")
        self.assertEqual(self.client.cancel(j.id).state, "cancelled")
        self.assertEqual(self.client.cancel(j.id).state, "cancelled", "an ended job is answered unchanged")
        k = self.submit("k", run="true")
        self.assertEqual(self.client.kill(k.id).state, "cancelled")

    def test_leases_and_health(self) -> None:
        w = leaselog.WorkerClient(self.client.server, uid("lw"))
        j = self.submit("l", run="true")
        grants = []
        while not any(g.job.id == j.id for g in grants):  # older jobs of this run may be queued before it
            got = w.acquire(1, wait_seconds=1)
            self.assertTrue(got, "a queued job was not granted")
            grants += got
            for g in got:
                if g.job.id != j.id:
                    w.report(g.lease, "lost", reason="not this test's job")
        g = next(g for g in grants if g.job.id == j.id)
        self.assertEqual(g.timing, self.timing)
        live = {x.lease: x for x in self.client.leases(worker=w.worker_id)}
        self.assertEqual((live[g.lease].job, live[g.lease].state), (j.id, "acquired"))
        self.assertEqual([x.lease for x in w.leases()], [g.lease])
        self.assertEqual(w.start(g.lease).state, "running")
        w.report(g.lease, "succeeded", result={"ok": True})
        self.assertEqual(self.client.job(j.id).result, {"ok": True})
        self.assertEqual(self.client.health()["status"], "ok")


if __name__ == "__main__":
    unittest.main()
