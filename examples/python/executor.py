#!/usr/bin/env python3
"""An executor in the style of piloop: it submits agent sessions to leaselog
and runs a worker that carries them out, then reads the outcome back.

Each session is a job of kind ``run`` whose spec holds a prompt and a
number of steps. The worker's handler is a Python callable that plays the
agent: one step at a time, checking between steps whether it must stop (a
cancel or kill from an operator, its lease gone, or the worker fencing
itself because it lost the daemon), and returning a summary that becomes
the report's result. With ``--command`` the sessions run as shell commands
instead (the spec's ``run``), each in its own process group, which a
restarted worker re-attaches to.

    leaselog serve --data /tmp/ex --local-capacity 0 --listen 127.0.0.1:7421 &
    LEASELOG_SERVER=127.0.0.1:7421 python3 examples/python/executor.py --runs 3

Then look at what happened with ``leaselog jobs`` and ``leaselog events``.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile
import time
from typing import Any, Dict, List

try:
    import leaselog
except ImportError:  # run from the repository without installing the package
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "clients", "python"))
    import leaselog


def agent_session(task: leaselog.Task) -> Dict[str, Any]:
    """Play one agent session: ``steps`` steps of ``step_seconds`` each."""
    steps, pause = int(task.spec.get("steps", 3)), float(task.spec.get("step_seconds", 0.2))
    done: List[str] = []
    for i in range(steps):
        if task.wait(pause):  # True once the worker asks the session to stop
            logging.info("%s: stopping after %d steps (%s)", task.job.id, i, task.stop_reason)
            return {"steps": done, "stopped": task.stop_reason}
        done.append(f"step {i + 1}: thought about {task.spec['prompt']!r}")
    return {"steps": done, "summary": f"{task.spec['prompt']}: done in {steps} steps"}


def shell_session(prompt: str, steps: int, pause: float) -> str:
    """The same session as a command: its output goes to the run directory,
    its result to $LEASELOG_RESULT."""
    return (f"for i in $(seq {steps}); do echo \"step $i: {prompt}\"; sleep {pause}; done; "
            f"printf '{{\"summary\": \"%s\"}}' \"{prompt}: done\" > \"$LEASELOG_RESULT\"")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--server", help="the daemon (host:port or URL; default $LEASELOG_SERVER)")
    ap.add_argument("--worker-id", default=f"executor-{os.getpid()}")
    ap.add_argument("--runs", type=int, default=3, help="agent sessions to submit")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--step-seconds", type=float, default=0.2)
    ap.add_argument("--capacity", type=int, default=2, help="sessions at once")
    ap.add_argument("--command", action="store_true", help="run sessions as shell commands, not a callable")
    ap.add_argument("--timeout", type=float, default=120)
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    client = leaselog.Client(args.server)
    stamp = time.strftime("%Y%m%dT%H%M%S")
    prompts = ["fix the flaky test", "write the release notes", "profile the hot path", "triage issue 14"]
    ids = []
    for i in range(args.runs):
        prompt = prompts[i % len(prompts)]
        job = client.submit(id=f"piloop-{stamp}-{i}", kind="run",
                            run=shell_session(prompt, args.steps, args.step_seconds),
                            spec={"prompt": prompt, "steps": args.steps, "step_seconds": args.step_seconds})
        ids.append(job.id)
        print(f"submitted {job.id} ({'new' if job.created else 'existing'}): {prompt}")

    handler = None if args.command else agent_session
    state = tempfile.mkdtemp(prefix="leaselog-executor-")
    with leaselog.Worker(args.server, args.worker_id, handler=handler, capacity=args.capacity, state_dir=state):
        ended = [client.wait(id, timeout=args.timeout) for id in ids]

    print(f"\n{'JOB':<34} {'STATE':<9} {'OUTCOME':<10} RESULT")
    for j in ended:
        print(f"{j.id:<34} {j.state:<9} {j.outcome or '-':<10} {j.result}")
    stale = [r for id in ids for r in client.stale_reports(job=id)]
    print(f"\nstale reports of these sessions: {len(stale)}")
    return 0 if all(j.outcome == "succeeded" for j in ended) else 1


if __name__ == "__main__":
    sys.exit(main())
