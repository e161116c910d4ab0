"""The HTTP transport of the client and the worker: standard library only.

One connection per call (``http.client``), so that every method is safe to call
from any thread and a call can be aborted by closing its socket (the worker
aborts its long-polling acquire that way when it stops). Answers are JSON;
error answers become :mod:`leaselog.errors` exceptions. The worker calls go
over a worker session (:mod:`leaselog._session`) when the transport is made
with ``session=True``, and over HTTP from the first refusal of the upgrade on.
"""

from __future__ import annotations

import http.client
import ipaddress
import json
import logging
import os
import socket
import stat
import threading
import urllib.parse
from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Tuple

from . import _session, errors

log = logging.getLogger("leaselog")

#: Where a client looks for the daemon when told nothing (as the Go client).
DEFAULT_SERVER = "http://127.0.0.1:7420"

#: Where a client looks for a local daemon's token files when told nothing
#: (as the CLI: ``--data``, else ``$LEASELOG_DATA``, else this).
DEFAULT_DATA = "./leaselog-data"

#: The token files a daemon with no ``[auth]`` keeps in its data directory:
#: its admin token, and the workers' token (any worker id, nothing else).
ADMIN_TOKEN_FILE = "token"
WORKER_TOKEN_FILE = "worker-token"

#: The shortest token a daemon accepts.
MIN_TOKEN_LEN = 16


def normalize_server(server: Optional[str]) -> str:
    """The daemon's address as a URL: ``host:port`` gets ``http://``.

    ``None`` or empty reads ``$LEASELOG_SERVER``, then the default.
    ``unix:///path`` is kept as it is.
    """
    server = (server or os.environ.get("LEASELOG_SERVER") or DEFAULT_SERVER).strip()
    if server.startswith("unix://"):
        if len(server) <= len("unix://"):
            raise ValueError(f"server {server!r}: unix:// needs a socket path")
        return server
    if "://" not in server:
        server = "http://" + server
    u = urllib.parse.urlsplit(server)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise ValueError(f"server {server!r} is not host:port, an http(s):// URL or unix:///path")
    return server.rstrip("/")


def local_server(server: str) -> bool:
    """Whether a daemon's address (a URL, as :func:`normalize_server`
    returns) is on this host: a unix socket, localhost or a loopback IP."""
    if server.startswith("unix://"):
        return True
    host = urllib.parse.urlsplit(server).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def read_token_file(path: str) -> str:
    """The token in a file, refusing one other users may read (as the CLI
    does): a regular file, this user's, mode 0600 or tighter, one line of at
    least 16 characters. Raises FileNotFoundError if there is none."""
    fd = os.open(path, os.O_RDONLY)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ValueError(f"token file {path}: not a regular file")
        if st.st_mode & 0o077:
            raise ValueError(f"token file {path}: mode {stat.S_IMODE(st.st_mode):04o} lets other users read it; "
                             "remove it (a new token is generated at the next start) or chmod 600 it")
        if st.st_uid != os.geteuid():
            raise ValueError(f"token file {path}: owned by uid {st.st_uid}, not this user ({os.geteuid()})")
        token = f.read(4096).decode("utf-8", "replace").strip()
    if len(token) < MIN_TOKEN_LEN or any(c.isspace() for c in token):
        raise ValueError(f"token file {path}: does not hold a token (one line of at least {MIN_TOKEN_LEN} characters)")
    return token


def find_token(server: str, token: Optional[str], data: Optional[str],
               file_name: str = ADMIN_TOKEN_FILE) -> Tuple[Optional[str], str]:
    """The token to send to ``server``, and where it came from (for errors).

    As the CLI finds it: ``token`` if given; else ``$LEASELOG_TOKEN`` (set
    but blank is an error); else, for a daemon on this host only, the file
    ``file_name`` in the data directory ``data``, else ``$LEASELOG_DATA``,
    else ``./leaselog-data`` — if there is one (a token file is never sent
    to another host); else none.
    """
    if token is not None:
        return normalize_token(token), "the token given"
    env = os.environ.get("LEASELOG_TOKEN")
    if env is not None:
        if not env.strip():
            raise ValueError("LEASELOG_TOKEN is set but blank: unset it or give it a token")
        return normalize_token(env), "$LEASELOG_TOKEN"
    if not local_server(server):
        return None, "no token"
    path = os.path.join(data or os.environ.get("LEASELOG_DATA") or DEFAULT_DATA, file_name)
    try:
        return read_token_file(path), f"the token of {path}"
    except FileNotFoundError:
        return None, "no token"


def normalize_token(token: Optional[str]) -> Optional[str]:
    """The bearer token given: blank is refused.

    A token read from a file comes with its newline, which is stripped.
    """
    if token is None:
        return None
    t = token.strip()
    if not t:
        raise ValueError("the token is blank (only spaces): set it, or leave it out")
    if "\r" in t or "\n" in t:
        raise ValueError("the token has a line break in it")
    return t


class _UnixConnection(http.client.HTTPConnection):
    """HTTP over a unix socket (``unix:///run/leaselog.sock``)."""

    def __init__(self, path: str, timeout: Optional[float]) -> None:
        super().__init__("leaselog", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        s.connect(self._path)
        self.sock = s


@dataclass
class Call:
    """A call in flight, which another thread may abort (:meth:`abort`)."""

    conn: Optional[http.client.HTTPConnection] = None
    aborted: bool = False
    #: set by a session's call: wakes it without ending the session
    on_abort: Optional[Callable[[], None]] = None

    def abort(self) -> None:
        """Cut the call: its socket is shut (or its frame given up), and it
        raises Unreachable."""
        self.aborted = True
        if self.on_abort is not None:
            self.on_abort()
        conn = self.conn
        sock = getattr(conn, "sock", None) if conn is not None else None
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Transport:
    """Sends JSON calls to one daemon, with its token.

    Safe for concurrent use: each call opens its own connection, but the
    worker calls (:meth:`worker_call`), which share one worker session if
    ``session`` is set and the daemon takes it.
    """

    def __init__(self, server: Optional[str] = None, token: Optional[str] = None,
                 timeout: float = 30.0, *, data: Optional[str] = None,
                 token_file: str = ADMIN_TOKEN_FILE, session: bool = False) -> None:
        self.server = normalize_server(server)
        #: Where the token came from (:func:`find_token`), for errors.
        self.token, self.token_source = find_token(self.server, token, data, token_file)
        self.timeout = timeout
        self.session = session  # False once the upgrade was refused
        self._session: Optional[_session.Session] = None
        self._opening = threading.Lock()  # one session opened at a time

    def worker_call(self, op: str, worker: str, lease: str, path: str, body: Any, *,
                    timeout: Optional[float] = None, call: Optional[Call] = None) -> Any:
        """Make a worker call (op, one of ``_session.OPS``; the HTTP call is
        ``POST path``) and return its decoded 2xx answer: a frame of the
        session, or an HTTP call if the transport has none, the upgrade was
        refused, the session has its most calls in flight, or the worker
        id cannot be a frame's field (the daemon refuses it over HTTP)."""
        timeout = self.timeout if timeout is None else timeout
        s = self._take(timeout) if self.session and _session.frame_field(worker) else None
        if s is None:
            return self.request("POST", path, body=body, timeout=timeout, call=call)[1]
        data = json.dumps(body, separators=(",", ":")).encode()
        status, raw = s.call(op, worker, lease, data, timeout, call)
        return _decode("POST", path, status, raw)

    def _take(self, timeout: float) -> Optional[_session.Session]:
        s = self._session
        if s is not None and not s.broken:
            return None if s.full() else s
        with self._opening:
            s = self._session
            if s is not None and not s.broken:
                return None if s.full() else s
            if not self.session:
                return None
            try:
                self._session = _session.dial(self.server, self.token, timeout)
            except _session.Refused as e:
                log.info("%s; worker calls over HTTP from now on", e)
                self.session = False
                return None
            return self._session

    def close(self) -> None:
        """Close the worker session, if one is open: its calls in flight
        raise Unreachable; the next worker call opens another."""
        s = self._session
        if s is not None:
            s.close()

    def _connect(self, timeout: float) -> http.client.HTTPConnection:
        if self.server.startswith("unix://"):
            return _UnixConnection(self.server[len("unix://"):], timeout)
        u = urllib.parse.urlsplit(self.server)
        cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
        return cls(u.netloc, timeout=timeout)

    def _prefix(self) -> str:
        if self.server.startswith("unix://"):
            return ""
        return urllib.parse.urlsplit(self.server).path.rstrip("/")

    def request(self, method: str, path: str, *, query: Optional[Mapping[str, Any]] = None,
                body: Any = None, timeout: Optional[float] = None,
                call: Optional[Call] = None) -> Tuple[int, Any]:
        """Send one call and return (status, decoded JSON) of a 2xx answer.

        Query values that are None are left out. Any other answer raises the
        :mod:`leaselog.errors` exception of its code; no answer at all (refused,
        reset, timed out, aborted) raises :class:`errors.Unreachable`.
        """
        url = self._prefix() + path
        if query:
            q = {k: _query_value(v) for k, v in query.items() if v is not None}
            if q:
                url += "?" + urllib.parse.urlencode(q)
        headers = {"Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body, separators=(",", ":")).encode()
            headers["Content-Type"] = "application/json"
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        conn = self._connect(self.timeout if timeout is None else timeout)
        if call is not None:
            call.conn = conn
        try:
            if call is not None and call.aborted:
                raise OSError("aborted")
            conn.request(method, url, body=data, headers=headers)
            resp = conn.getresponse()
            raw = resp.read()
            status = resp.status
        except (OSError, http.client.HTTPException) as e:
            raise errors.Unreachable(f"{method} {self.server}{path}: {e or type(e).__name__}") from e
        finally:
            conn.close()
        return status, _decode(method, path, status, raw)


    def stream(self, path: str, *, query: Optional[Mapping[str, Any]] = None,
               last_event_id: Optional[str] = None, timeout: Optional[float] = None
               ) -> Iterator[Dict[str, str]]:
        """Read a server-sent event stream: one dict per event (``id``,
        ``event``, ``data``), comments (keepalives) skipped. ``timeout``
        bounds the silence between two lines. Ends when the daemon closes
        the stream; raises Unreachable when the connection fails, and the
        error of a non-2xx answer."""
        url = self._prefix() + path
        q = {k: _query_value(v) for k, v in (query or {}).items() if v is not None}
        if q:
            url += "?" + urllib.parse.urlencode(q)
        headers = {"Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = str(last_event_id)
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        conn = self._connect(self.timeout if timeout is None else timeout)
        try:
            try:
                conn.request("GET", url, headers=headers)
                resp = conn.getresponse()
                if resp.status // 100 != 2:
                    text = resp.read().decode("utf-8", "replace")
                    try:
                        doc = json.loads(text)
                    except ValueError:
                        doc = None
                    raise errors.from_answer(resp.status, doc, text)
                event: Dict[str, str] = {}
                while True:
                    raw = resp.readline()
                    if not raw:
                        return
                    line = raw.decode("utf-8", "replace").rstrip("\r\n")
                    if not line:
                        if "data" in event:
                            yield event
                        event = {}
                    elif not line.startswith(":"):
                        name, _, value = line.partition(":")
                        value = value[1:] if value.startswith(" ") else value
                        event[name] = event[name] + "\n" + value if name == "data" and name in event else value
            except (OSError, http.client.HTTPException) as e:
                raise errors.Unreachable(f"GET {self.server}{path}: {e or type(e).__name__}") from e
        finally:
            conn.close()


def _decode(method: str, path: str, status: int, raw: bytes) -> Any:
    """The JSON of a 2xx answer; any other raises its error."""
    text = raw.decode("utf-8", "replace")
    try:
        doc = json.loads(text) if text.strip() else None
    except ValueError:
        doc = None
    if status // 100 != 2:
        raise errors.from_answer(status, doc, text)
    if doc is None and text.strip():
        raise errors.LeaselogError(f"{method} {path}: the answer is not JSON: {text[:200]!r}",
                                   code="bad_answer", status=status)
    return doc


def _query_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


def quote(segment: str) -> str:
    """A path segment: a job or worker id, escaped whole."""
    return urllib.parse.quote(str(segment), safe="")
