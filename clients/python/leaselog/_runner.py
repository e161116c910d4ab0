"""The runner of one command of a Python worker: a small supervisor.

Run as ``python -I _runner.py STATE_DIR -- ARGV...`` in a session of its own
(the worker starts it with start_new_session), it runs ARGV in its process
group and stays to record what happened, in STATE_DIR, so that a worker
restarted meanwhile can collect it:

- ``exit``: the command's exit status (128+N for signal N), written once the
  command ends (``exit.tmp`` then a rename: never half of it);
- ``fence``: ``"<clock> <seconds>"``, the fence deadline the worker renews
  after each acknowledged heartbeat, a reading of the named clock. Once it
  passes the runner writes ``fenced`` and SIGKILLs its whole group (itself
  included), whether or not the worker is still alive: a worker that died
  cannot leave its job running past its lease.

A SIGTERM to the group (a cancel) reaches the command; the runner notes it
and keeps waiting, so that the command's status is still recorded. This file
imports nothing but the standard library and nothing of its package: it runs
by path, with ``-I``.
"""

import os
import signal
import subprocess
import sys
import time

POLL = 0.025


def _now(clock):
    if clock == "boottime" and hasattr(time, "CLOCK_BOOTTIME"):
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    return time.monotonic()


def _past_fence(state):
    try:
        with open(os.path.join(state, "fence")) as f:
            clock, at = f.read().split()
        return _now(clock) > float(at)
    except (OSError, ValueError):
        return False


def _write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def main(argv):
    if len(argv) < 4 or argv[2] != "--":
        sys.stderr.write("usage: _runner.py STATE_DIR -- ARGV...\n")
        return 2
    state, cmd = argv[1], argv[3:]
    # A handler, not SIG_IGN: handlers are reset at exec, so the command
    # still dies of the SIGTERM sent to the group.
    signal.signal(signal.SIGTERM, lambda *_: None)
    try:
        child = subprocess.Popen(cmd)
    except OSError as e:
        sys.stderr.write(f"leaselog runner: cannot start {cmd[0]!r}: {e}\n")
        _write(os.path.join(state, "exit"), "127\n")
        return 127
    while True:
        try:
            code = child.wait(timeout=POLL)
            break
        except subprocess.TimeoutExpired:
            pass
        if _past_fence(state):
            _write(os.path.join(state, "fenced"), "fence deadline passed\n")
            os.killpg(0, signal.SIGKILL)
    status = 128 - code if code < 0 else code
    _write(os.path.join(state, "exit"), f"{status}\n")
    return status & 0xFF


if __name__ == "__main__":
    sys.exit(main(sys.argv))
