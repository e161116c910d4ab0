"""A worker session: the worker calls as frames of one upgraded connection.

``GET /v1/session`` with ``Connection: Upgrade`` and ``Upgrade:
leaselog-session/1``, answered ``101``; then each call is a frame, and its
answer a frame, in the order the calls end (api/frame.go in the repository
has the format)::

    request: ID SP OP SP WORKER SP LEASE SP LENGTH LF BODY
    answer:  ID SP STATUS SP LENGTH LF BODY

A frame's body is the HTTP call's JSON body, and its answer's body and status
those the HTTP call would answer. What it saves is HTTP: a connection per call
here (the transport opens one per call), and the headers of each.

One session carries every call of a :class:`~leaselog.WorkerClient`, from any
thread; a reader thread hands each answer to its call. A call that times out,
an aborted one (:meth:`leaselog._http.Call.abort`: the worker's acquire when
it stops), or a connection that breaks, ends the session, as it would end an
HTTP call's connection, so that the daemon ends a long poll nobody waits for:
its calls in flight raise :class:`~leaselog.errors.Unreachable` (retryable),
and the next call opens another.
"""

from __future__ import annotations

import json
import socket
import ssl
import threading
import urllib.parse
from typing import Dict, Optional, Tuple

from . import errors

#: The Upgrade token of a worker session.
PROTOCOL = "leaselog-session/1"
#: The path a session is opened on.
PATH = "/v1/session"
#: Calls in flight on one session: the daemon's cap (server.MaxSessionCalls).
#: A call past it is made over HTTP.
MAX_CALLS = 250
#: The ops of a session: the worker calls of the same names.
OPS = ("acquire", "heartbeat", "start", "report")


class Refused(Exception):
    """The daemon, or a proxy before it, refused the upgrade for good: the
    client makes plain calls (:func:`refused`)."""


def refused(status: int) -> bool:
    """Whether an answer to the upgrade other than 101 refuses sessions for
    good: a 2xx or 3xx (a proxy that answered the GET itself), a 404 (a
    daemon from before sessions), a 400, 405, 426 or 501 (the Upgrade header
    lost on the way, a proxy that does not pass upgrades). A 401 or 403 is
    the token's, which a plain call would hear too; a 408, 429 or other 5xx
    passes. As the Go client's (api/session.go)."""
    return status in (400, 404, 405, 426, 501, 505) or status // 100 in (2, 3)


def frame_field(worker: str) -> bool:
    """Whether a worker id can be a frame header's field: printable ASCII, no
    space, short enough for the header. One that cannot — never a valid id —
    is sent as a plain call, for the daemon to refuse as over HTTP; in a frame
    it would end the session."""
    return 0 < len(worker) <= 128 and all(0x21 <= ord(c) <= 0x7e for c in worker)


class _Pending:
    __slots__ = ("done", "status", "body", "error")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.status = 0
        self.body = b""
        self.error: Optional[errors.LeaselogError] = None


class Session:
    """One open session; :func:`dial` opens one."""

    def __init__(self, sock: socket.socket, rfile, where: str) -> None:
        self._sock = sock
        self._rfile = rfile
        self._where = where
        self._wlock = threading.Lock()  # one frame written at a time
        self._lock = threading.Lock()  # guards the fields below
        self._pending: Dict[int, _Pending] = {}
        self._next = 0
        self._error: Optional[errors.LeaselogError] = None
        threading.Thread(target=self._read, name="leaselog-session", daemon=True).start()

    @property
    def broken(self) -> bool:
        with self._lock:
            return self._error is not None

    def full(self) -> bool:
        with self._lock:
            return len(self._pending) >= MAX_CALLS

    def call(self, op: str, worker: str, lease: str, body: bytes, timeout: float,
             call=None) -> Tuple[int, bytes]:
        """Send a frame and wait up to timeout seconds for its answer: its
        status and body. Raises Unreachable if the session breaks, the call
        times out (which ends the session) or is aborted."""
        p = _Pending()
        with self._lock:
            if self._error is not None:
                raise self._error
            self._next += 1
            id = self._next
            self._pending[id] = p
        if call is not None:
            call.on_abort = self._abort
            if call.aborted:
                self._abort()
        head = f"{id} {op} {worker} {lease or '-'} {len(body)}\n".encode()
        try:
            with self._wlock:
                self._sock.sendall(head + body)
        except OSError as e:
            self.close(f"write: {e}")
        if not p.done.wait(timeout):
            self.close(f"{op}: no answer within {timeout:g}s")
        if p.error is not None:
            raise p.error
        return p.status, p.body

    def _abort(self) -> None:
        # The daemon would go on with the call — a long poll would grant a
        # lease nobody reads: end the session, as an HTTP call's abort
        # closes its connection, so that the daemon ends it.
        self.close("a call was aborted")

    def close(self, why: str = "closed by the client") -> None:
        """End the session: its calls in flight raise Unreachable."""
        with self._lock:
            if self._error is None:
                self._error = errors.Unreachable(f"{self._where}: worker session broken: {why}")
            pending, self._pending = self._pending, {}
            err = self._error
        try:
            self._sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        for p in pending.values():
            if not p.done.is_set():
                p.error = err
                p.done.set()

    def _read(self) -> None:
        why = "the daemon closed it"
        try:
            while True:
                line = self._rfile.readline(256)
                if not line.endswith(b"\n"):
                    break
                id_s, status_s, n_s = line.decode("ascii").split()
                id, status, n = int(id_s), int(status_s), int(n_s)
                body = self._rfile.read(n)
                if len(body) < n:
                    break
                if id == 0:  # about the session: the daemon closes it
                    why = f"{status} {body.decode('utf-8', 'replace')}"
                    break
                with self._lock:
                    p = self._pending.pop(id, None)
                if p is not None:  # else its call gave up
                    p.status, p.body = status, body
                    p.done.set()
        except (OSError, ValueError) as e:
            why = str(e) or type(e).__name__
        finally:
            self.close(why)
            try:
                self._rfile.close()
                self._sock.close()
            except OSError:
                pass


def dial(server: str, token: Optional[str], timeout: float) -> Session:
    """Open a session to server (a URL as normalize_server makes it).

    Raises Refused if the daemon or a proxy refused the upgrade for good, the
    error of any other answer, and Unreachable if none came."""
    where = f"GET {server}{PATH}"
    host = "leaselog"
    prefix = ""
    try:
        if server.startswith("unix://"):
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.settimeout(timeout)
            sock.connect(server[len("unix://"):])
        else:
            u = urllib.parse.urlsplit(server)
            host, prefix = u.netloc, u.path.rstrip("/")
            port = u.port or (443 if u.scheme == "https" else 80)
            sock = socket.create_connection((u.hostname, port), timeout=timeout)
            if u.scheme == "https":
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=u.hostname)
    except OSError as e:
        raise errors.Unreachable(f"{where}: {e or type(e).__name__}") from e
    try:
        if sock.family != socket.AF_UNIX:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        req = [f"GET {prefix}{PATH} HTTP/1.1", f"Host: {host}", "Connection: Upgrade", f"Upgrade: {PROTOCOL}"]
        if token:
            req.append("Authorization: Bearer " + token)
        sock.sendall(("\r\n".join(req) + "\r\n\r\n").encode("latin-1"))
        rfile = sock.makefile("rb")
        status_line = rfile.readline(1024).decode("latin-1")
        parts = status_line.split(None, 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
            raise OSError(f"not an HTTP answer: {status_line[:80]!r}")
        status = int(parts[1])
        length: Optional[int] = None
        while True:
            h = rfile.readline(8192).decode("latin-1")
            if h in ("\r\n", "\n", ""):
                break
            name, _, value = h.partition(":")
            if name.strip().lower() == "content-length":
                length = int(value.strip())
        if status == 101:
            sock.settimeout(None)  # the reader waits between frames; calls time out by themselves
            return Session(sock, rfile, f"{server} session")
        text = rfile.read(min(length, 64 << 10)).decode("utf-8", "replace") if length else ""
    except (OSError, ValueError) as e:
        sock.close()
        raise errors.Unreachable(f"{where}: {e or type(e).__name__}") from e
    sock.close()
    if refused(status):
        raise Refused(f"{where}: answered {status}")
    try:
        doc = json.loads(text) if text.strip() else None
    except ValueError:
        doc = None
    raise errors.from_answer(status, doc, text)
