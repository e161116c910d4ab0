"""The exceptions of the leaselog client: one class per error code of the API.

Every error answer of the daemon is ``{"error": {"code", "message"}}`` with an
HTTP status; :func:`from_answer` turns it into the matching subclass of
:class:`LeaselogError`, which keeps the code, the status and the message. A
daemon that cannot be reached is :class:`Unreachable` (no status), so that one
``except LeaselogError`` catches everything a call can fail with.
"""

from __future__ import annotations

from typing import Any, Dict, Mapping, Optional, Type


class LeaselogError(Exception):
    """An error of a leaselog call: the API's code, the HTTP status, the message.

    ``status`` is None when no answer came (see :class:`Unreachable`).
    """

    #: The code this class stands for; subclasses set it.
    default_code = "internal"

    def __init__(self, message: str, *, code: Optional[str] = None, status: Optional[int] = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code or self.default_code
        self.status = status

    @property
    def retryable(self) -> bool:
        """Whether the same call may succeed if sent again: no answer, or a 5xx."""
        return self.status is None or self.status >= 500

    def __str__(self) -> str:
        where = f"{self.status} " if self.status is not None else ""
        return f"{where}{self.code}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(code={self.code!r}, status={self.status!r}, message={self.message!r})"


class Unreachable(LeaselogError):
    """The daemon could not be reached, or did not answer in time."""

    default_code = "unreachable"


class BadRequest(LeaselogError):
    """400: bad input; nothing was written."""

    default_code = "bad_request"


class BodyTooLarge(BadRequest):
    """400: the body is over the daemon's limit (1 MiB)."""

    default_code = "body_too_large"


class BodyTimeout(LeaselogError):
    """408: the body did not arrive within the daemon's deadline."""

    default_code = "body_timeout"


class Unauthorized(LeaselogError):
    """401: a missing, blank or unknown token."""

    default_code = "unauthorized"


class Forbidden(LeaselogError):
    """403: the token may not do this, or the lease is another worker's."""

    default_code = "forbidden"


class TokenRefused(LeaselogError):
    """A :class:`leaselog.Worker` stopped: the daemon refused its token (401
    or 403) on the worker's own calls. Nothing the worker does changes its
    token, so it does not retry; the message names the token and the
    daemon. Jobs in flight are left as on a stop."""

    default_code = "token_refused"


class NotFound(LeaselogError):
    """404: no such job or lease."""

    default_code = "not_found"


class MethodNotAllowed(LeaselogError):
    """405: the path takes another method."""

    default_code = "method_not_allowed"


class Conflict(LeaselogError):
    """409: the call conflicts with what the daemon holds."""

    default_code = "conflict"


class JobExists(Conflict):
    """409: the job id is taken by a job of another kind or spec."""

    default_code = "job_exists"


class StaleLease(Conflict):
    """409: the lease is no longer live (expired, or reported).

    A stale *report* is kept by the daemon as a ``lease.stale_report`` event,
    whose seq is :attr:`stale_report_seq` (None for a stale start).
    """

    default_code = "stale_lease"

    def __init__(self, message: str, *, code: Optional[str] = None, status: Optional[int] = None,
                 stale_report_seq: Optional[int] = None) -> None:
        super().__init__(message, code=code, status=status)
        self.stale_report_seq = stale_report_seq


#: Fenced is another name for StaleLease: the daemon fenced the caller off.
Fenced = StaleLease


class Unavailable(LeaselogError):
    """503: the daemon's storage failed, or it did not answer in time."""

    default_code = "unavailable"


class Stopping(Unavailable):
    """503: the daemon is stopping and takes no new work."""

    default_code = "stopping"


class InternalError(LeaselogError):
    """500: a bug in the daemon (its log has the details)."""

    default_code = "internal"


_BY_CODE: Dict[str, Type[LeaselogError]] = {
    cls.default_code: cls
    for cls in (BadRequest, BodyTooLarge, BodyTimeout, Unauthorized, Forbidden, NotFound,
                MethodNotAllowed, JobExists, StaleLease, Unavailable, Stopping, InternalError)
}

_BY_STATUS: Dict[int, Type[LeaselogError]] = {
    400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 405: MethodNotAllowed,
    408: BodyTimeout, 409: Conflict, 500: InternalError, 503: Unavailable,
}


def from_answer(status: int, body: Any, text: str = "") -> LeaselogError:
    """The exception for an error answer: by its code, else by its status.

    ``body`` is the decoded JSON (or None when it was not JSON); ``text`` the
    raw answer, used as the message when the body is not an error document.
    """
    err: Mapping[str, Any] = {}
    if isinstance(body, Mapping) and isinstance(body.get("error"), Mapping):
        err = body["error"]
    code = err.get("code") if isinstance(err.get("code"), str) else None
    message = err.get("message") if isinstance(err.get("message"), str) else (text.strip() or f"HTTP {status}")
    cls = _BY_CODE.get(code or "") or _BY_STATUS.get(status) or (
        InternalError if status >= 500 else LeaselogError)
    if cls is StaleLease:
        seq = body.get("stale_report_seq") if isinstance(body, Mapping) else None
        return StaleLease(message, code=code, status=status, stale_report_seq=seq if isinstance(seq, int) else None)
    return cls(message, code=code or cls.default_code, status=status)
