"""leaselog: a client and a worker for the leaselog daemon, standard library only.

- :class:`Client` submits, lists, cancels and kills jobs, and reads the lease
  table and the event log (lists are iterators that page);
- :class:`Worker` takes leases and runs their jobs — a command, or a Python
  callable — heartbeating, fencing itself and reporting as leaselog's own Go
  worker does;
- errors are :class:`LeaselogError` subclasses carrying the API's code and
  the HTTP status.

``LEASELOG_SERVER`` and ``LEASELOG_TOKEN`` are read when no server or token
is given; with neither token, for a daemon on this host, the token files a
daemon with no ``[auth]`` keeps (``./leaselog-data/token`` for a Client,
``./leaselog-data/worker-token`` for a Worker), as the CLI does.
"""

from .client import STALE_REPORT, Client, WorkerClient
from .errors import (BadRequest, BodyTimeout, BodyTooLarge, Conflict, Fenced, Forbidden, InternalError,
                     JobExists, LeaselogError, MethodNotAllowed, NotFound, StaleLease, Stopping,
                     TokenRefused, Unauthorized, Unavailable, Unreachable)
from .types import Event, Grant, Job, Lease, Submitted, Timing
from .worker import Task, Worker

__version__ = "0.1.0"

__all__ = [
    "Client", "WorkerClient", "Worker", "Task", "STALE_REPORT",
    "Job", "Lease", "Event", "Grant", "Submitted", "Timing",
    "LeaselogError", "Unreachable", "BadRequest", "BodyTooLarge", "BodyTimeout", "Unauthorized",
    "Forbidden", "NotFound", "MethodNotAllowed", "Conflict", "JobExists", "StaleLease", "Fenced",
    "Unavailable", "Stopping", "InternalError", "TokenRefused",
]
