"""Tokens against a daemon with an [auth] section: the bearer token from the
argument or $LEASELOG_TOKEN, 401 and 403 as exceptions, a worker with its
own token."""

from __future__ import annotations

import os
import tempfile
import unittest
from unittest import mock

import leaselog

from .support import uid

SERVER = os.environ.get("LEASELOG_AUTH_SERVER")
ADMIN = os.environ.get("LEASELOG_AUTH_ADMIN", "")
AUDITOR = os.environ.get("LEASELOG_AUTH_AUDITOR", "")
WORKER_ID, _, WORKER_TOKEN = os.environ.get("LEASELOG_AUTH_WORKER", "").partition(":")


@unittest.skipUnless(SERVER, "LEASELOG_AUTH_SERVER is not set: no daemon with tokens to test against "
                             "(go test ./clients/python starts one)")
class AuthTest(unittest.TestCase):

    def test_roles(self) -> None:
        admin = leaselog.Client(SERVER, ADMIN)
        j = admin.submit(uid("auth"), run="true")
        self.addCleanup(admin.cancel, j.id)
        cases = [
            ("no token", lambda: leaselog.Client(SERVER, None).job(j.id), leaselog.Unauthorized, 401),
            ("unknown token", lambda: leaselog.Client(SERVER, "not-a-token-of-this-daemon").job(j.id),
             leaselog.Unauthorized, 401),
            ("auditor submits", lambda: leaselog.Client(SERVER, AUDITOR).submit(uid("x"), run="true"),
             leaselog.Forbidden, 403),
            ("worker reads jobs", lambda: leaselog.Client(SERVER, WORKER_TOKEN).job(j.id), leaselog.Forbidden, 403),
            ("admin acts as a worker", lambda: leaselog.WorkerClient(SERVER, WORKER_ID, ADMIN).heartbeat([]),
             leaselog.Forbidden, 403),
        ]
        with mock.patch.dict(os.environ, {}, clear=False):
            os.environ.pop("LEASELOG_TOKEN", None)
            for name, call, cls, status in cases:
                with self.subTest(name), self.assertRaises(cls) as cm:
                    call()
                self.assertEqual(cm.exception.status, status)
        self.assertEqual(leaselog.Client(SERVER, AUDITOR).job(j.id).id, j.id)
        with mock.patch.dict(os.environ, {"LEASELOG_TOKEN": ADMIN}):
            self.assertEqual(leaselog.Client(SERVER).job(j.id).id, j.id, "the token from $LEASELOG_TOKEN")

    def test_worker_with_its_token(self) -> None:
        admin = leaselog.Client(SERVER, ADMIN)
        j = admin.submit(uid("auth-work"), run='test -z "$LEASELOG_TOKEN"')
        # The worker takes its token from $LEASELOG_TOKEN, and its jobs never see it.
        with mock.patch.dict(os.environ, {"LEASELOG_TOKEN": WORKER_TOKEN}), \
                leaselog.Worker(SERVER, WORKER_ID, state_dir=tempfile.mkdtemp(), wait_seconds=0.5):
            done = admin.wait(j.id, timeout=20)
        self.assertEqual((done.outcome, done.reason), ("succeeded", None))

    def test_refused_token_stops_the_worker(self) -> None:
        # The admin token may not act as a worker (403), an unknown token is
        # nobody (401): the worker stops at once, naming token and daemon.
        for name, token, status in (("the admin token", ADMIN, 403), ("an unknown token", "not-a-token-of-this-daemon", 401)):
            with self.subTest(name), mock.patch.dict(os.environ, {"LEASELOG_TOKEN": token}):
                w = leaselog.Worker(SERVER, WORKER_ID, state_dir=tempfile.mkdtemp(), wait_seconds=0.5)
                with self.assertRaises(leaselog.TokenRefused) as cm:
                    w.run()  # returns only on a stop: a worker that retried would hang here
                self.assertEqual(cm.exception.status, status)
                self.assertIn(f"the daemon at {SERVER} refuses $LEASELOG_TOKEN", str(cm.exception))


if __name__ == "__main__":
    unittest.main()
