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
    next call whose request line has a given text (:meth:`lose_answer`):
    its connection reset, or kept open with its caller waiting.

    It reads a worker session's frames (GET /v1/session upgraded): each is
    a call, recorded as ``FRAME op path`` with the path of its HTTP call,
    whose answer :meth:`lose_answer` can lose as an HTTP call's. With
    ``refuse_upgrades`` it passes no upgrade, as a proxy that does not
    know them: it forwards the GET without its Upgrade and Connection
    headers (the daemon answers 400), counting them in ``refused``."""

    def __init__(self, upstream: str, refuse_upgrades: bool = False) -> None:
        host, _, port = upstream.split("://")[-1].rstrip("/").rpartition(":")
        self.upstream = (host, int(port))
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.address = "127.0.0.1:%d" % self.sock.getsockname()[1]
        self._cut = threading.Event()
        self._lose: Optional[str] = None
        self._reset = True  # lose_answer's: reset the connection, or keep it
        self.lost = threading.Event()  # set once an answer was lost
        self.connections = 0  # connections passed to the daemon
        self.refuse_upgrades = refuse_upgrades
        self.refused = 0  # upgrades passed without their headers
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

    def lose_answer(self, text: str, reset: bool = True) -> None:
        """The next call whose first line has text reaches the daemon, but its
        answer does not reach the caller: its connection is reset, or, not
        reset, kept open with the caller waiting for an answer that never
        comes (until it gives up, or is aborted)."""
        self.lost.clear()
        self._reset = reset
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
            upgrade = first.startswith(b"GET /v1/session ")
            if upgrade and self.refuse_upgrades:
                head, _, rest = first.partition(b"\r\n\r\n")
                first = b"\r\n".join(h for h in head.split(b"\r\n")
                                      if not h.lower().startswith((b"upgrade:", b"connection:"))) + b"\r\n\r\n" + rest
                with self._lock:
                    self.refused += 1
                upgrade = False
            u.sendall(first)
        except OSError:
            first, upgrade = b"", False
        with self._lock:
            self.requests.append(first.split(b"\r\n", 1)[0].decode("latin-1"))
        if upgrade:
            state = _SessionState()
            threading.Thread(target=self._frames_up, args=(c, u, state), daemon=True).start()
            self._frames_down(u, c, state)
            return
        lose = self._lose
        if lose is not None and lose.encode() in first.split(b"\r\n", 1)[0]:
            self._lose = None
            threading.Thread(target=self._pump, args=(c, u), daemon=True).start()
            try:
                u.recv(65536)  # the daemon answered: the answer goes nowhere
            except OSError:
                pass
            if not self._reset:
                self.lost.set()  # the caller waits on: the rest of the answer goes nowhere too
                try:
                    while u.recv(65536):  # until the caller's close ends the pump, which shuts u
                        pass
                except OSError:
                    pass
                u.close()
                return
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

    def _frames_up(self, c: socket.socket, u: socket.socket, state: "_SessionState") -> None:
        """A session's frames from the worker to the daemon, recorded."""
        buf = b""
        try:
            while True:
                data = c.recv(65536)
                if not data:
                    break
                buf += data
                while True:
                    frame, buf = _split_frame(buf)
                    if frame is None:
                        break
                    id, op, worker, lease = frame[0].split()[:4]
                    path = (f"/v1/workers/{worker}/{op}" if op in ("acquire", "heartbeat")
                            else f"/v1/leases/{lease}/{op}")
                    line = f"FRAME {op} {path}"
                    with self._lock:
                        self.requests.append(line)
                    lose = self._lose
                    if lose is not None and lose in line:
                        self._lose = None
                        state.lose = id
                    u.sendall(frame[2])
        except OSError:
            pass
        finally:
            self._close(c, u)

    def _frames_down(self, u: socket.socket, c: socket.socket, state: "_SessionState") -> None:
        """A session's answers from the daemon to the worker; the answer of
        the frame to lose resets the worker's connection instead."""
        buf = b""
        head = True  # the upgrade's answer comes first
        try:
            while True:
                data = u.recv(65536)
                if not data:
                    break
                buf += data
                if head:
                    end = buf.find(b"\r\n\r\n")
                    if end < 0:
                        continue
                    c.sendall(buf[:end + 4])
                    buf, head = buf[end + 4:], False
                while True:
                    frame, buf = _split_frame(buf)
                    if frame is None:
                        break
                    if frame[0].split()[0] == state.lose and not self._reset:
                        state.lose = None
                        self.lost.set()  # dropped: the call waits on, the session goes on
                        continue
                    if frame[0].split()[0] == state.lose:
                        c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                        self._close(c, u)
                        self.lost.set()
                        return
                    c.sendall(frame[2])
        except OSError:
            pass
        finally:
            self._close(u, c)

    def _close(self, *socks: socket.socket) -> None:
        for s in socks:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        with self._lock:
            for s in socks:
                if s in self._open:
                    self._open.remove(s)
        for s in socks:
            s.close()

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


class _SessionState:
    """What the two directions of a proxied session share."""

    def __init__(self) -> None:
        self.lose: Optional[str] = None  # the id of the frame whose answer is lost


def _split_frame(buf: bytes) -> Tuple[Optional[Tuple[str, bytes, bytes]], bytes]:
    """The first whole frame of buf — (its header line, its body, its bytes) —
    and what follows it; (None, buf) if buf holds none whole."""
    nl = buf.find(b"\n")
    if nl < 0:
        return None, buf
    head = buf[:nl].decode("ascii")
    end = nl + 1 + int(head.split()[-1])
    if len(buf) < end:
        return None, buf
    return (head, buf[nl + 1:end], buf[:end]), buf[end:]
