"""The runner of one command of a Python worker: a small supervisor.

Run as ``python -I _runner.py STATE_DIR GRACE -- ARGV...`` in a session of
its own (the worker starts it with start_new_session), it runs ARGV in a
process group of its own and stays to record what happened in STATE_DIR, so
that a worker restarted meanwhile can collect it. It is a child subreaper
(Linux): whatever the command starts, in new sessions too, stays below it,
and it kills that whole tree

- when the worker asks (``stop``: ``cancel`` — SIGTERM to the command's
  group, then SIGKILL to the tree after GRACE seconds — or ``kill``; the
  worker writes the file, then sends the runner a SIGTERM);
- when the fence deadline passes: ``fence`` holds ``"<clock> <seconds>"``,
  a reading of the named clock the worker renews after each acknowledged
  heartbeat; past it the runner writes ``fenced`` and kills the tree, whether
  or not the worker is still alive, so that a dead worker cannot leave its
  job running past its lease;
- when the command ends (what it left behind goes with it).

Then it writes ``exit``: the command's exit status, 128+N for signal N
(``exit.tmp`` then a rename: never half of it). This file imports nothing
but the standard library and nothing of its package: it runs by path, with
``-I``.
"""

import ctypes
import os
import signal
import subprocess
import sys
import time

POLL = 0.025
PR_SET_CHILD_SUBREAPER = 36


def _now(clock):
    if clock == "boottime" and hasattr(time, "CLOCK_BOOTTIME"):
        return time.clock_gettime(time.CLOCK_BOOTTIME)
    return time.monotonic()


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return ""


def _past_fence(state):
    try:
        clock, at = _read(os.path.join(state, "fence")).split()
        return _now(clock) > float(at)
    except ValueError:
        return False


def _write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _descendants(root):
    """Every process below root, from /proc."""
    children = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(name))
    out, todo = [], [root]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def _kill_tree(job):
    """SIGKILL the command's group and every process below the runner."""
    for target in [-job] + _descendants(os.getpid()):
        try:
            os.kill(target, signal.SIGKILL)
        except OSError:
            pass


def _subreaper():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False  # not Linux: descendants in new sessions escape


def main(argv):
    if len(argv) < 5 or argv[3] != "--":
        sys.stderr.write("usage: _runner.py STATE_DIR GRACE -- ARGV...\n")
        return 2
    state, grace, cmd = argv[1], float(argv[2]), argv[4:]
    asked = []
    signal.signal(signal.SIGTERM, lambda *_: asked.append(True))
    _subreaper()
    try:
        # Its own group, so that a cancel's SIGTERM reaches the command and
        # not the runner; reaped below with waitpid, never by Popen.
        child = subprocess.Popen(cmd, preexec_fn=os.setpgrp)
    except OSError as e:
        sys.stderr.write(f"leaselog runner: cannot start {cmd[0]!r}: {e}\n")
        _write(os.path.join(state, "exit"), "127\n")
        return 127
    job, status, kill_at, fenced = child.pid, None, None, False
    while status is None:
        while True:  # reap the command, and the orphans a subreaper inherits
            try:
                pid, st = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pid = 0
            if pid == 0:
                break
            if pid == job:
                status = os.waitstatus_to_exitcode(st)
        if status is not None:
            break
        if asked:
            asked.clear()
            mode = (_read(os.path.join(state, "stop")).split() or ["cancel"])[0]
            if mode == "kill":
                _kill_tree(job)
            elif kill_at is None:
                try:
                    os.killpg(job, signal.SIGTERM)
                except OSError:
                    pass
                kill_at = time.monotonic() + grace
        if kill_at is not None and time.monotonic() >= kill_at:
            _kill_tree(job)
        if not fenced and _past_fence(state):
            fenced = True
            _write(os.path.join(state, "fenced"), "fence deadline passed\n")
            _kill_tree(job)
        time.sleep(POLL)
    child.returncode = status  # reaped above: Popen must not wait for it
    _kill_tree(job)  # whatever the command left behind
    code = 128 - status if status < 0 else status
    _write(os.path.join(state, "exit"), f"{code}\n")
    return code & 0xFF


if __name__ == "__main__":
    sys.exit(main(sys.argv))
