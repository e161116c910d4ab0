"""What the tests share: the daemon under test, unique ids, polling with a
deadline, and a TCP proxy that can cut a worker off from the daemon.

The daemon is the one $LEASELOG_SERVER names (clients/python/python_test.go
starts one with short timing and sets it); tests that need one are skipped
without it, saying so. It must serve one run of the tests at a time: the
queue is shared, and one run's workers would take the other's jobs.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import struct
import threading
import time
import unittest
from typing import Any, Callable, List, Optional, Tuple

import leaselog

# The workers' warnings (heartbeats refused while a test cuts the network)
# are expected; LEASELOG_TEST_LOG=debug shows them.
logging.basicConfig(level=os.environ.get("LEASELOG_TEST_LOG", "critical").upper(),
                    format="%(relativeCreated)d %(threadName)s %(levelname)s %(message)s")

SERVER = os.environ.get("LEASELOG_SERVER")
RUN = secrets.token_hex(3)  # ids unique to this run: the same daemon may serve several


def uid(name: str) -> str:
    return f"py-{RUN}-{name}"


def poll(cond: Callable[[], Any], timeout: float, what: str, every: float = 0.02) -> Any:
    """Call cond until it returns something true, at most timeout seconds."""
    deadline = time.monotonic() + timeout
    while True:
        v = cond()
        if v:
            return v
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(every)


class ServerTest(unittest.TestCase):
    """A test against the daemon of $LEASELOG_SERVER."""

    client: leaselog.Client
    timing: leaselog.Timing

    @classmethod
    def setUpClass(cls) -> None:
        if not SERVER:
            raise unittest.SkipTest("LEASELOG_SERVER is not set: no daemon to test against "
                                    "(go test ./clients/python starts one)")
        cls.client = leaselog.Client(SERVER)
        reply = leaselog.WorkerClient(SERVER, uid("probe")).heartbeat([])
        cls.timing = leaselog.Timing.from_json(reply)

    def setUp(self) -> None:
        self.jobs: List[str] = []
        self.addCleanup(self._cancel_jobs)

    def submit(self, name: str, **kw: Any) -> leaselog.Job:
        """Submit a job with a unique id; it is cancelled when the test ends."""
        j = self.client.submit(uid(f"{self._testMethodName}-{name}"), **kw)
        self.jobs.append(j.id)
        return j

    def _cancel_jobs(self) -> None:
        # A job left queued would be taken by the next test's worker.
        for id in self.jobs:
            try:
                self.client.cancel(id)
            except leaselog.LeaselogError:
                pass

    def wait_state(self, job: str, states: Tuple[str, ...], timeout: float = 20) -> leaselog.Job:
        return poll(lambda: (lambda j: j if j.state in states else None)(self.client.job(job)),
                    timeout, f"job {job} in {states}")

    def events_of(self, job: str, type: Optional[str] = None) -> List[leaselog.Event]:
        return list(self.client.events(type=type, job=job))


class Proxy:
    """A TCP proxy to the daemon that can be cut (every connection refused
    at once and those open closed) and restored, or lose the answer to the
    next call whose request line has a given text (:meth:`lose_answer`)."""

    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.split("://")[-1].rstrip("/").rpartition(":")
        self.upstream = (host, int(port))
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self._cut = threading.Event()
        self._lose: Optional[str] = None
        self.lost = threading.Event()  # set once an answer was lost
        self.connections = 0  # connections passed to the daemon
        self.requests: List[str] = []  # their request lines ("POST /v1/… HTTP/1.1")
        self._closed = False
        self._open: List[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut(self) -> None:
        self._cut.set()
        with self._lock:
            for s in self._open:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            self._open.clear()

    def restore(self) -> None:
        self._cut.clear()

    def lose_answer(self, text: str) -> None:
        """The next call whose first line has text reaches the daemon, but its
        answer does not reach the caller: its connection is reset."""
        self.lost.clear()
        self._lose = text

    def close(self) -> None:
        self._closed = True
        self.cut()
        self.sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                c, _ = self.sock.accept()
            except OSError:
                return
            if self._cut.is_set():
                c.close()
                continue
            try:
                u = socket.create_connection(self.upstream)
            except OSError:
                c.close()
                continue
            with self._lock:
                self._open += [c, u]
                self.connections += 1
            threading.Thread(target=self._start, args=(c, u), daemon=True).start()

    def _start(self, c: socket.socket, u: socket.socket) -> None:
        try:
            first = c.recv(65536)
            u.sendall(first)
        except OSError:
            first = b""
        with self._lock:
            self.requests.append(first.split(b"\r\n", 1)[0].decode("latin-1"))
        lose = self._lose
        if lose is not None and lose.encode() in first.split(b"\r\n", 1)[0]:
            self._lose = None
            threading.Thread(target=self._pump, args=(c, u), daemon=True).start()
            try:
                u.recv(65536)  # the daemon answered: the answer goes nowhere
            except OSError:
                pass
            c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset
            for s in (c, u):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            with self._lock:
                if u in self._open:
                    self._open.remove(u)
            u.close()
            self.lost.set()
            return
        threading.Thread(target=self._pump, args=(c, u), daemon=True).start()
        self._pump(u, c)

    def _pump(self, a: socket.socket, b: socket.socket) -> None:
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        finally:
            for s in (a, b):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
            with self._lock:
                if a in self._open:
                    self._open.remove(a)
            a.close()
