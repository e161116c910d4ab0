"""The documents of the API as dataclasses: jobs, leases, events, grants.

Each has ``from_json`` (the daemon's JSON, as docs/openapi.yaml describes
it) and keeps that JSON in ``raw``, so that a field added to the API is there
before this client knows it.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

#: States in which a job has ended and will change no more.
ENDED_STATES = frozenset({"reported", "cancelled", "failed"})

_RFC3339 = re.compile(
    r"^(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$")


def parse_time(s: Optional[str]) -> Optional[_dt.datetime]:
    """An RFC 3339 time of the API (nanoseconds, ``Z``) as an aware datetime.

    ``datetime.fromisoformat`` of Python 3.9 takes neither nanoseconds nor
    ``Z``; the fraction is cut to microseconds.
    """
    if not s:
        return None
    m = _RFC3339.match(s)
    if not m:
        raise ValueError(f"not an RFC 3339 time: {s!r}")
    date, clock, frac, zone = m.groups()
    text = f"{date}T{clock}"
    if frac:
        text += "." + (frac + "000000")[:6]
    text += "+00:00" if zone in ("Z", "z") else zone
    return _dt.datetime.fromisoformat(text)


def format_time(t: Any) -> Optional[str]:
    """A time for a query: a datetime (naive is UTC) or a string as given."""
    if t is None or isinstance(t, str):
        return t
    if isinstance(t, _dt.datetime):
        if t.tzinfo is None:
            t = t.replace(tzinfo=_dt.timezone.utc)
        return t.astimezone(_dt.timezone.utc).isoformat().replace("+00:00", "Z")
    raise TypeError(f"want a datetime or an RFC 3339 string, got {type(t).__name__}")


@dataclass
class Lease:
    """A lease: its fencing token, job, holder and state."""

    lease: int
    job: str
    kind: str
    worker: str
    state: str
    acquired: Optional[_dt.datetime]
    heard: Optional[_dt.datetime]
    revoke: Optional[str] = None
    report_seq: Optional[int] = None
    #: The timing it was granted with, its job's own; None: the daemon's.
    timing: Optional[Dict[str, float]] = None
    #: The latest details its heartbeats gave, while it is live.
    details: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Lease":
        return cls(lease=d["lease"], job=d["job"], kind=d["kind"], worker=d["worker"], state=d["state"],
                   acquired=parse_time(d.get("acquired")), heard=parse_time(d.get("heard")),
                   revoke=d.get("revoke"), report_seq=d.get("report_seq"), timing=d.get("timing"),
                   details=d.get("details"), raw=dict(d))


@dataclass
class Job:
    """A job as the daemon shows it, with its live lease (or None)."""

    id: str
    kind: str
    state: str
    attempts: int
    leases: int
    spec: Dict[str, Any]
    lease: Optional[Lease]
    submitted: Optional[_dt.datetime]
    updated: Optional[_dt.datetime]
    outcome: Optional[str] = None
    reason: Optional[str] = None
    ref: Optional[str] = None
    result: Any = None
    #: An evaluation's cap on requeues after losses; 0 for none.
    max_requeues: int = 0
    #: The labels a worker must offer to take the job, its priority, and the
    #: time before which it is granted to no one (None: none).
    labels: Dict[str, str] = field(default_factory=dict)
    priority: int = 0
    not_before: Optional[_dt.datetime] = None
    #: Of a queued job not about to be granted: what it waits for,
    #: "not_before" or "worker"; and whether no worker present can take it.
    waiting_for: Optional[str] = None
    unroutable: bool = False
    #: The job's own timing (renew_seconds, grace_seconds,
    #: toleration_seconds); None: the daemon's.
    timing: Optional[Dict[str, float]] = None
    #: The latest details (progress) its live lease's heartbeats gave.
    details: Optional[Dict[str, Any]] = None
    #: For the answer of a submit: True if this call created the job, False
    #: if the same job existed. None elsewhere.
    created: Optional[bool] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def ended(self) -> bool:
        """Whether the job has ended (reported, cancelled or failed)."""
        return self.state in ENDED_STATES

    @classmethod
    def from_json(cls, d: Mapping[str, Any], created: Optional[bool] = None) -> "Job":
        lease = d.get("lease")
        return cls(id=d["id"], kind=d["kind"], state=d["state"], attempts=d.get("attempts", 0),
                   leases=d.get("leases", 0), spec=dict(d.get("spec") or {}),
                   lease=Lease.from_json(lease) if lease else None,
                   submitted=parse_time(d.get("submitted")), updated=parse_time(d.get("updated")),
                   outcome=d.get("outcome"), reason=d.get("reason"), ref=d.get("ref"),
                   result=d.get("result"), max_requeues=d.get("max_requeues", 0),
                   labels=dict(d.get("labels") or {}), priority=d.get("priority", 0),
                   not_before=parse_time(d.get("not_before")), waiting_for=d.get("waiting_for"),
                   unroutable=bool(d.get("unroutable")), timing=d.get("timing"),
                   details=d.get("details"), created=created, raw=dict(d))


@dataclass
class Event:
    """One event of the log. Fields a type does not use are None."""

    seq: int
    id: str
    type: str
    time: Optional[_dt.datetime]
    job: Optional[str] = None
    lease: Optional[int] = None
    worker: Optional[str] = None
    kind: Optional[str] = None
    outcome: Optional[str] = None
    revoke: Optional[str] = None
    ref: Optional[str] = None
    reason: Optional[str] = None
    gap_seconds: Optional[float] = None
    spec: Optional[Dict[str, Any]] = None
    result: Any = None
    # lease.heartbeats: the heartbeats compacted into this one, the last
    # (count, first_seq, first_time).
    heartbeats: Optional[Dict[str, Any]] = None
    # A job's own timing (lease.queued), a lease's (lease.acquired).
    timing: Optional[Dict[str, float]] = None
    # lease.heartbeat: the details it carried (lease.heartbeats: the latest).
    details: Optional[Dict[str, Any]] = None
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Event":
        return cls(seq=d["seq"], id=d["id"], type=d["type"], time=parse_time(d.get("time")),
                   job=d.get("job"), lease=d.get("lease"), worker=d.get("worker"), kind=d.get("kind"),
                   outcome=d.get("outcome"), revoke=d.get("revoke"), ref=d.get("ref"),
                   reason=d.get("reason"), gap_seconds=d.get("gap_seconds"), spec=d.get("spec"),
                   result=d.get("result"), heartbeats=d.get("heartbeats"), timing=d.get("timing"),
                   details=d.get("details"), raw=dict(d))


@dataclass
class Timing:
    """The daemon's lease timing, in seconds, as a grant or heartbeat says it."""

    renew: float
    grace: float
    toleration: float

    @property
    def self_fence(self) -> float:
        """How long after its last acknowledged heartbeat a worker stops its
        jobs: toleration − 2×renew, two heartbeats before the daemon may
        expire them (timing.Config.SelfFence of the Go code)."""
        return self.toleration - 2 * self.renew

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Optional["Timing"]:
        if not d.get("renew_seconds"):
            return None
        return cls(renew=float(d["renew_seconds"]), grace=float(d["grace_seconds"]),
                   toleration=float(d["toleration_seconds"]))


@dataclass
class Grant:
    """A lease handed to a worker, with its job and the daemon's timing."""

    lease: int
    job: Job
    timing: Optional[Timing]
    held_seconds: float = 0.0
    raw: Dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def running(self) -> bool:
        """Whether the grant came running (its start is recorded already)."""
        lv = self.job.lease
        return lv is not None and lv.lease == self.lease and lv.state == "running"

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> "Grant":
        return cls(lease=d["lease"], job=Job.from_json(d["job"]), timing=Timing.from_json(d),
                   held_seconds=float(d.get("held_seconds") or 0), raw=dict(d))


@dataclass
class Submitted:
    """One item's answer in a batch submit: its status, with the job or the error."""

    id: str
    status: int
    job: Optional[Job] = None
    error: Optional[Exception] = None

    @property
    def ok(self) -> bool:
        return self.error is None


def grants(doc: Mapping[str, Any]) -> List[Grant]:
    """The grants of an acquire's answer or of a worker's lease list."""
    return [Grant.from_json(g) for g in doc.get("leases") or []]
