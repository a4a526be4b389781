"""One sweep point on a cluster worker, in a process of its own: ``python3 -m testbed.cluster.point SCRATCH PARENT``.

``SCRATCH/point.json`` holds the task (the point's scenario dict, its variant and repetition, the lock wait and
the retakes); the records go to ``SCRATCH/runs`` and the results to ``SCRATCH/result.json``. A process of its own
because only a main thread can be interrupted: the worker stops a point with SIGINT, which takes the same path as
Ctrl-C on a local run (the fabric torn down, the record finished as failed). The kernel sends that SIGINT too when
the worker dies (PR_SET_PDEATHSIG), and then the half-written scratch is removed: the point runs again elsewhere.
"""

from __future__ import annotations

import ctypes
import json
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

from testbed.errors import TestbedError
from testbed.spec.fields import SpecError
from testbed.spec.scenario import Scenario, ScenarioFile, build_scenario

PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """SIGINT this process when the worker that started it exits (and exit at once if it already has)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGINT, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:
        raise KeyboardInterrupt


def point_from_task(task: dict[str, Any]) -> ScenarioFile:
    """The one-point ScenarioFile a task names, built as ``expand`` builds each point of a sweep."""
    variant = tuple((str(k), v) for k, v in task["variant"])
    point = build_scenario(task["scenario"], variant, int(task["repeat_index"]))
    return ScenarioFile(point, (point,))


def task_json(point: Scenario, lock_wait: float, retake_unfaithful: int) -> str:
    """A task's only data: the point's scenario dict (as a local sweep builds it), its variant and repetition."""
    return json.dumps(
        {
            "scenario": point.raw,
            "variant": [[k, v] for k, v in point.variant],
            "repeat_index": point.repeat_index,
            "lock_wait": lock_wait,
            "retake_unfaithful": retake_unfaithful,
        }
    )


def result_entry(res: Any) -> dict[str, Any]:
    return {
        "name": res.path.name,
        "status": res.status,
        "faithful": res.faithful,
        "error": res.error,
        "retaken": [p.name for p in res.retaken],
    }


def main(argv: list[str]) -> int:
    scratch, parent = Path(argv[0]), int(argv[1])
    result = scratch / "result.json"
    signal.signal(signal.SIGINT, signal.default_int_handler)  # a Dask worker may have left SIGINT ignored
    try:
        die_with_parent(parent)
        task = json.loads((scratch / "point.json").read_text())
        from testbed.invocation import enter
        from testbed.machine import here
        from testbed.run import run_file  # after the signal is armed: importing the run takes a second

        enter(os.environ)  # this child's own entry: the worker's run lock and state files
        results = run_file(
            point_from_task(task),
            scratch / "runs",
            float(task["lock_wait"]),
            int(task["retake_unfaithful"]),
            machine=here(os.environ),  # this child's own entry: the worker's machine
        )
        result.write_text(json.dumps({"results": [result_entry(r) for r in results]}))
        return 0
    except KeyboardInterrupt:  # the worker stopped the point, or died: nothing of it is kept
        shutil.rmtree(scratch, ignore_errors=True)
        return 130
    except (SpecError, TestbedError) as exc:  # refused before anything was built (this worker's preflight)
        result.write_text(json.dumps({"refused": str(exc)}))
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
