"""The executor's and the auditor's side of the API: :class:`Client`; and the
worker's endpoints one call each: :class:`WorkerClient` (which
:class:`leaselog.Worker` drives).

Lists page (the paging contract of issue 14): each list call takes ``limit``
and ``after`` and answers with its list and ``next``, absent on the last
page; the iterators here pass ``next`` back verbatim as ``after``, whatever
its JSON type, and stop when it is absent (or when a page comes back empty,
which also ends a list from a daemon whose events answer ``next`` on every
page).
"""

from __future__ import annotations

import datetime as _dt
import json
import time
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, TypeVar

from . import errors
from ._http import WORKER_TOKEN_FILE, Call, Transport, quote
from .types import Event, Grant, Job, Lease, Submitted, format_time, grants

T = TypeVar("T")

#: The event type of a report on a lease that had expired.
STALE_REPORT = "lease.stale_report"


def _spec(run: Optional[str], spec: Optional[Mapping[str, Any]], checkout: Optional[Mapping[str, Any]],
          bring_back: Optional[Sequence[str]]) -> Dict[str, Any]:
    out: Dict[str, Any] = dict(spec or {})
    if run is not None:
        out["run"] = run
    if checkout is not None:
        out["checkout"] = dict(checkout)
    if bring_back is not None:
        out["bring_back"] = list(bring_back)
    return out


def _submission(id: str, kind: str, run: Optional[str], spec: Optional[Mapping[str, Any]],
                checkout: Optional[Mapping[str, Any]], bring_back: Optional[Sequence[str]],
                max_requeues: Optional[int], labels: Optional[Mapping[str, str]] = None,
                priority: Optional[int] = None, not_before: Any = None,
                timing: Optional[Mapping[str, Optional[float]]] = None) -> Dict[str, Any]:
    body: Dict[str, Any] = {"id": id, "kind": kind, "spec": _spec(run, spec, checkout, bring_back)}
    if max_requeues is not None:
        body["max_requeues"] = max_requeues
    if labels:
        body["labels"] = dict(labels)
    if priority:
        body["priority"] = priority
    if not_before is not None:
        body["not_before"] = _rfc3339(not_before)
    for key in _TIMING:
        if timing and timing.get(key) is not None:
            body[key] = timing[key]
    return body


#: The keys of a job's own timing (see Client.submit).
_TIMING = ("renew_seconds", "grace_seconds", "toleration_seconds")


def _rfc3339(t: Any) -> str:
    """A time as RFC 3339: a string as it is, a datetime (naive ones are
    taken as UTC) written out."""
    if isinstance(t, str):
        return t
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.timezone.utc)
    return t.isoformat()


def _labels_query(labels: Optional[Mapping[str, str]]) -> Optional[str]:
    """Labels as a query gives them: key=value pairs, by key, comma-separated."""
    if not labels:
        return None
    return ",".join(f"{k}={labels[k]}" for k in sorted(labels))


class Client:
    """A client of a leaselog daemon, for executors and auditors.

    ``server`` is ``host:port``, an ``http(s)://`` URL or ``unix:///path``;
    None reads ``$LEASELOG_SERVER`` (default ``http://127.0.0.1:7420``).
    ``token`` is sent as a bearer token; None finds it as the CLI does:
    ``$LEASELOG_TOKEN``, else, for a daemon on this host, the admin token a
    daemon with no ``[auth]`` keeps in ``DATA/token``, where DATA is
    ``data``, else ``$LEASELOG_DATA``, else ``./leaselog-data``.
    Every failure raises a :class:`leaselog.errors.LeaselogError`. Safe for
    concurrent use.
    """

    def __init__(self, server: Optional[str] = None, token: Optional[str] = None, *,
                 timeout: float = 30.0, data: Optional[str] = None) -> None:
        self._t = Transport(server, token, timeout, data=data)

    @property
    def server(self) -> str:
        """The daemon's address, as a URL."""
        return self._t.server

    def __repr__(self) -> str:
        return f"Client({self.server!r})"

    # Executors.

    def submit(self, id: str, kind: str = "run", run: Optional[str] = None, *,
               spec: Optional[Mapping[str, Any]] = None, checkout: Optional[Mapping[str, Any]] = None,
               bring_back: Optional[Sequence[str]] = None, max_requeues: Optional[int] = None,
               labels: Optional[Mapping[str, str]] = None, priority: Optional[int] = None,
               not_before: Any = None, renew_seconds: Optional[float] = None,
               grace_seconds: Optional[float] = None, toleration_seconds: Optional[float] = None) -> Job:
        """Submit a job; idempotent on its id.

        ``run`` is the command leaselog's own workers run (``spec.run``);
        ``spec`` may carry anything else an executor's workers understand.
        ``max_requeues`` caps how many times an evaluation is queued again
        after its worker is lost; lost once more, it fails ("lost N times").
        None is the daemon's default, 0 no cap; a run takes none. The
        answer's ``created`` says whether this call made the job. The same id
        with another kind or spec (or another ``max_requeues``, if given)
        raises :class:`errors.JobExists`.

        ``labels`` are those a worker must offer (each with an equal value)
        to take the job; ``priority`` orders it among the jobs a worker can
        take (higher first, then the first queued); ``not_before`` (a
        datetime, or an RFC 3339 string) is the time before which it is
        granted to no one. Another ``labels`` or ``priority`` for the same id
        raises :class:`errors.JobExists`; a job keeps its first ``not_before``.
        ``renew_seconds``, ``grace_seconds`` and ``toleration_seconds`` ask
        for the job's own timing (None: the daemon's): its leases expire, and
        its worker fences it, by it; out of the daemon's bounds raises
        :class:`errors.BadRequest` naming the field.
        """
        body = _submission(id, kind, run, spec, checkout, bring_back, max_requeues, labels, priority, not_before,
                           {"renew_seconds": renew_seconds, "grace_seconds": grace_seconds,
                            "toleration_seconds": toleration_seconds})
        status, doc = self._t.request("POST", "/v1/jobs", body=body)
        return Job.from_json(doc, created=status == 201)

    def submit_many(self, jobs: Iterable[Mapping[str, Any]]) -> List[Submitted]:
        """Submit up to 1,000 jobs in one call (``POST /v1/jobs/batch``).

        Each item takes the keyword arguments of :meth:`submit` (``id``,
        ``kind``, ``run``, ``spec``, ``checkout``, ``bring_back``,
        ``max_requeues``, ``labels``, ``priority``, ``not_before``,
        ``renew_seconds``…). Each is
        decided alone: the answer has one :class:`Submitted` per item, in
        order, with the job or the error that refused it (which wrote
        nothing). Only a batch that is bad as a whole raises.
        """
        items = []
        for j in jobs:
            items.append(_submission(j["id"], j.get("kind", "run"), j.get("run"), j.get("spec"), j.get("checkout"),
                                     j.get("bring_back"), j.get("max_requeues"), j.get("labels"), j.get("priority"),
                                     j.get("not_before"), j))
        _, doc = self._t.request("POST", "/v1/jobs/batch", body={"jobs": items})
        out = []
        for item in doc.get("jobs") or []:
            status = item.get("status", 0)
            job = Job.from_json(item["job"], created=status == 201) if item.get("job") else None
            err = errors.from_answer(status, {"error": item["error"]}) if item.get("error") else None
            out.append(Submitted(id=item.get("id", ""), status=status, job=job, error=err))
        return out

    def job(self, id: str) -> Job:
        """The job, with its live lease; :class:`errors.NotFound` if none."""
        _, doc = self._t.request("GET", f"/v1/jobs/{quote(id)}")
        return Job.from_json(doc)

    def jobs(self, state: Optional[str] = None, kind: Optional[str] = None, *,
             outcome: Optional[str] = None, labels: Optional[Mapping[str, str]] = None,
             limit: Optional[int] = None) -> Iterator[Job]:
        """Every job (by id), or those in ``state`` / of ``kind`` / reported
        with ``outcome`` / requiring ``labels`` (and maybe more), page by page.

        A job whose worker reported it failed or killed is in state
        ``reported`` with that outcome; state ``failed`` is a job whose
        worker was lost (a run, or an evaluation past its ``max_requeues``).
        ``limit`` is the page size (the daemon's default when None).
        """
        return self._pages("/v1/jobs", "jobs", Job.from_json, {"state": state, "kind": kind, "outcome": outcome,
                                                               "labels": _labels_query(labels)}, limit)

    def cancel(self, id: str) -> Job:
        """Cancel a job: a queued one at once, a leased one at its worker's next
        heartbeat. An ended job is answered unchanged."""
        _, doc = self._t.request("POST", f"/v1/jobs/{quote(id)}/cancel")
        return Job.from_json(doc)

    def kill(self, id: str) -> Job:
        """Kill a job: as :meth:`cancel`, but its worker is told ``kill``."""
        _, doc = self._t.request("POST", f"/v1/jobs/{quote(id)}/kill")
        return Job.from_json(doc)

    def history(self, id: str, *, limit: Optional[int] = None) -> Iterator[Event]:
        """Every event of a job, in order, page by page."""
        return self._pages(f"/v1/jobs/{quote(id)}/history", "events", Event.from_json, {}, limit)

    def wait(self, id: str, timeout: Optional[float] = None, interval: float = 0.2) -> Job:
        """Poll the job until it has ended (reported, cancelled, failed).

        Raises TimeoutError with the job's last state after ``timeout``
        seconds (None: no limit).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            j = self.job(id)
            if j.ended:
                return j
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"job {id} did not end in {timeout}s: it is {j.state}")
            time.sleep(interval)

    # Auditors.

    def leases(self, state: Optional[str] = None, worker: Optional[str] = None, kind: Optional[str] = None,
               *, limit: Optional[int] = None) -> Iterator[Lease]:
        """The live leases (or those in ``state``), by token, page by page."""
        return self._pages("/v1/leases", "leases", Lease.from_json,
                           {"state": state, "worker": worker, "kind": kind}, limit)

    def events(self, type: Optional[str] = None, job: Optional[str] = None, worker: Optional[str] = None,
               since: Any = None, until: Any = None, after: Any = None, *,
               limit: Optional[int] = None) -> Iterator[Event]:
        """The events of the log, by seq, from its indexes, page by page.

        ``since`` / ``until`` are datetimes (naive means UTC) or RFC 3339
        strings; ``after`` a cursor (a seq, or a ``next`` a page answered).
        """
        q = {"type": type, "job": job, "worker": worker, "since": format_time(since),
             "until": format_time(until)}
        return self._pages("/v1/events", "events", Event.from_json, q, limit, after)

    def stale_reports(self, job: Optional[str] = None, worker: Optional[str] = None, since: Any = None,
                      until: Any = None, *, limit: Optional[int] = None) -> Iterator[Event]:
        """The reports refused as stale (``lease.stale_report`` events): on
        leases that had expired, and late claims on leases already reported
        that differ from the first report. What ``leaselog audit
        stale-reports`` lists."""
        return self.events(STALE_REPORT, job=job, worker=worker, since=since, until=until, limit=limit)

    def follow(self, type: Optional[str] = None, job: Optional[str] = None, worker: Optional[str] = None,
               after: Any = None, *, reconnect: bool = True, idle_timeout: float = 90.0) -> Iterator[Event]:
        """The events after ``after`` (a seq; None: from the first), then each
        new one as it becomes durable, over ``/v1/events/stream``, forever.

        A connection that fails or stays silent for ``idle_timeout`` seconds
        (the daemon writes a keepalive well within that) is made again, from
        the last event seen (``Last-Event-ID``), so no event is lost or
        repeated across a daemon's restart; with ``reconnect=False`` it
        raises :class:`errors.Unreachable` instead. Stop by breaking out of
        the loop.
        """
        q = {"type": type, "job": job, "worker": worker}
        cursor = after
        wait = 0.05
        while True:
            try:
                for e in self._t.stream("/v1/events/stream", query=q, timeout=idle_timeout,
                                        last_event_id=None if cursor is None else str(cursor)):
                    ev = Event.from_json(json.loads(e["data"]))
                    cursor, wait = ev.seq, 0.05
                    yield ev
            except errors.LeaselogError as err:
                if not (reconnect and err.retryable):
                    raise
            if not reconnect:
                return
            time.sleep(wait)
            wait = min(2 * wait, 5.0)

    def health(self) -> Dict[str, Any]:
        """``/healthz``: status, the last durable seq, the host's boot id."""
        _, doc = self._t.request("GET", "/healthz")
        return doc

    def _pages(self, path: str, key: str, conv: Callable[[Mapping[str, Any]], T], query: Mapping[str, Any],
               limit: Optional[int], after: Any = None) -> Iterator[T]:
        if limit is not None and limit <= 0:
            raise ValueError(f"limit {limit}: want a positive page size")
        return _paginate(self._t, path, key, conv, query, limit, after)


def _paginate(t: Transport, path: str, key: str, conv: Callable[[Mapping[str, Any]], T],
              query: Mapping[str, Any], limit: Optional[int], after: Any,
              timeout: Optional[float] = None) -> Iterator[T]:
    """Yield the items of every page, following ``next`` verbatim.

    A page is asked for only when the items before it have been consumed.
    It stops at a page without ``next``, at an empty page, and at a ``next``
    equal to the cursor just sent (which could only repeat the page).
    """
    cursor = after
    while True:
        q = dict(query)
        q["limit"] = limit
        q["after"] = cursor
        _, doc = t.request("GET", path, query=q, timeout=timeout)
        items = doc.get(key) or []
        for item in items:
            yield conv(item)
        nxt = doc.get("next")
        if nxt is None or not items or nxt == cursor:
            return
        cursor = nxt


class WorkerClient:
    """The worker's endpoints, one call each, in the name of ``worker_id``.

    :class:`leaselog.Worker` drives one; use it directly to be a worker by
    hand (or to test a daemon's fencing). ``timeout`` of each call is in
    seconds; ``call`` lets another thread abort it (:class:`leaselog._http.Call`).
    ``token`` None is found as :class:`Client` finds it, but in
    ``DATA/worker-token``: the token a daemon with no ``[auth]`` keeps for
    its user's workers (any worker id).

    With ``session`` (the default) acquire, heartbeat, start and report are
    frames of one worker session (``GET /v1/session`` upgraded: one
    connection, no HTTP per call), and plain HTTP calls from the first
    refusal of the upgrade on (a daemon from before sessions, a proxy that
    does not pass upgrades); ``session=False`` makes them plain calls.
    """

    def __init__(self, server: Optional[str], worker_id: str, token: Optional[str] = None, *,
                 data: Optional[str] = None, session: bool = True,
                 kinds: Optional[Sequence[str]] = None, labels: Optional[Mapping[str, str]] = None) -> None:
        if not worker_id:
            raise ValueError("a worker needs an id")
        self.worker_id = worker_id
        # What the worker takes, sent with every acquire (a report's too):
        # the kinds of job (None: every kind) and the labels it offers.
        self.offer: Dict[str, Any] = {}
        if kinds:
            self.offer["kinds"] = list(kinds)
        if labels:
            self.offer["labels"] = dict(labels)
        self._t = Transport(server, token, data=data, token_file=WORKER_TOKEN_FILE, session=session)
        self._w = f"/v1/workers/{quote(worker_id)}"

    @property
    def server(self) -> str:
        return self._t.server

    @property
    def token_source(self) -> str:
        """Where the token came from: "$LEASELOG_TOKEN", "the token of
        ./leaselog-data/worker-token", "no token"…"""
        return self._t.token_source

    @property
    def session(self) -> bool:
        """Whether the worker calls go over a worker session: False if made
        with ``session=False``, or once the upgrade was refused."""
        return self._t.session

    def close(self) -> None:
        """Close the worker session, if one is open (its calls in flight
        raise :class:`errors.Unreachable`); a later call opens another."""
        self._t.close()

    def acquire(self, max: int = 1, wait_seconds: float = 0, *, timeout: Optional[float] = None,
                call: Optional[Call] = None) -> List[Grant]:
        """Take up to ``max`` leases, waiting up to ``wait_seconds`` for a job."""
        body = {"max": max, "wait_seconds": wait_seconds, **self.offer}
        doc = self._t.worker_call("acquire", self.worker_id, "", self._w + "/acquire", body,
                                  timeout=timeout if timeout is not None else wait_seconds + 30, call=call)
        return grants(doc)

    def heartbeat(self, leases: Sequence[int], *, details: Optional[Mapping[int, Mapping[str, Any]]] = None,
                  timeout: Optional[float] = None) -> Dict[str, Any]:
        """Renew ``leases``; the answer has a directive per lease and the timing.

        ``details`` gives the progress of some of them, by lease: a JSON
        object each, which the job's view shows (over 4 KiB it is kept as
        ``{"cut": N}``).
        """
        body: Dict[str, Any] = {"leases": list(leases)}
        if details:
            body["details"] = {str(int(k)): dict(v) for k, v in details.items()}
        return self._t.worker_call("heartbeat", self.worker_id, "", self._w + "/heartbeat", body, timeout=timeout)

    def leases(self, *, timeout: Optional[float] = None) -> List[Grant]:
        """The live leases the daemon holds for this worker (what it re-attaches to)."""
        return list(_paginate(self._t, self._w + "/leases", "leases", Grant.from_json, {}, None, None, timeout))

    def start(self, lease: int, *, timeout: Optional[float] = None) -> Lease:
        """Say the lease's job started."""
        doc = self._t.worker_call("start", self.worker_id, str(int(lease)), f"/v1/leases/{int(lease)}/start",
                                  {"worker": self.worker_id}, timeout=timeout)
        return Lease.from_json(doc)

    def report(self, lease: int, outcome: str, *, reason: Optional[str] = None, ref: Optional[str] = None,
               result: Any = None, next_max: int = 0, timeout: Optional[float] = None) -> Dict[str, Any]:
        """Report what the lease's job came to: succeeded, failed, cancelled,
        killed or lost. A retry of an accepted report (its outcome, and a
        ref and a result each left out or its own) gets the first answer. A
        report on an expired lease, or one on a lease already reported that
        says otherwise (another outcome, ref or result), raises
        :class:`errors.StaleLease`, whose ``stale_report_seq`` names the
        ``lease.stale_report`` event that keeps it.

        With ``next_max``, the report carries the worker's next acquire (up
        to that many leases, without waiting), made only by the call that
        accepts the report: its grants are the answer's ``next``
        (:func:`leaselog.types.grants` reads them), absent when the answer
        repeats an earlier one."""
        body: Dict[str, Any] = {"worker": self.worker_id, "outcome": outcome}
        if reason:
            body["reason"] = reason
        if ref:
            body["ref"] = ref
        if result is not None:
            body["result"] = result
        if next_max:
            body["next"] = {"max": next_max, **self.offer}
        return self._t.worker_call("report", self.worker_id, str(int(lease)), f"/v1/leases/{int(lease)}/report",
                                   body, timeout=timeout)

    def health(self, *, timeout: Optional[float] = None) -> Dict[str, Any]:
        _, doc = self._t.request("GET", "/healthz", timeout=timeout)
        return doc
