"""What a cluster worker runs: one sweep point per task, in a child process, returned as finished records.

A task's arguments are JSON text (the point's scenario dict, its variant and repetition, the lock wait and the
retakes); its function is this module's ``run_point_task``, which the worker imports from its own checkout (Dask
pickles a module-level function by reference), so no code travels from the client. The worker runs the point with
its own installed code: each record's manifest names the worker's git revision. The records come back as gzip'd
tar archives, whole or not at all.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from testbed.host import staging

REPO = Path(__file__).resolve().parents[2]
FABRIC = "fabric"  # the Dask resource: a worker has one, every point needs it, so a worker runs one point at a time
METRIC = "testbed"  # the worker metric that carries its info (capabilities, calibration, revision) to the client
CANCEL_CHECK_S = 0.5  # how long the task waits on the client's cancel event between looks at its child


class PointCancelled(Exception):
    """The client cancelled the sweep (Ctrl-C) while this point ran; its fabric was torn down."""


def worker_info(caps: dict[str, Any]) -> str:
    """What a worker tells the client about itself (JSON: Dask's heartbeat turns lists into tuples)."""
    from results.record import git_revision

    return json.dumps(
        {
            "host": socket.gethostname(),
            "revision": git_revision(REPO),
            "capabilities": caps,
            "calibration": caps.get("calibration"),
        }
    )


def info_metric(info: str, worker: Any) -> str:
    """The worker metric (``metrics={METRIC: partial(info_metric, info)}``): the same text every heartbeat."""
    return info


def worker_options(caps: dict[str, Any]) -> dict[str, Any]:
    """The Worker / Nanny keyword arguments of a testbed worker: one thread, one fabric, its info as a metric."""
    from functools import partial

    return {
        "nthreads": 1,
        "resources": {FABRIC: 1},
        "metrics": {METRIC: partial(info_metric, worker_info(caps))},
    }


def pack(record: Path) -> bytes:
    """A record directory as a gzip'd tar archive (its name at the top)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
        tar.add(record, arcname=record.name)
    return buf.getvalue()


def _this_worker() -> dict[str, Any]:
    """The running worker's host, revision and calibration (its metric), for the records it returns."""
    try:
        from distributed import get_worker

        worker = get_worker()
        info = json.loads(worker.metrics[METRIC](worker))
        return {"host": info["host"], "revision": info["revision"], "calibration": info["calibration"]}
    except (ValueError, KeyError):  # not inside a testbed worker (a unit test calls the task directly)
        return {"host": socket.gethostname()}


def _scratch_root() -> str | None:
    """The Dask worker's own directory (purged by Dask when a dead worker left it), else the system's temp."""
    try:
        from distributed import get_worker

        return str(get_worker().local_directory)
    except ValueError:  # not inside a worker (a unit test calls the task directly)
        return None


def _wait(child: subprocess.Popen[bytes], cancel_event: str | None) -> int:
    """The child's exit code; on the client's cancel event, SIGINT it (its fabric is torn down) and raise."""
    event = None
    if cancel_event:
        from distributed import Event

        event = Event(cancel_event)
    while True:
        try:
            return child.wait(timeout=None if event is None else 0)
        except subprocess.TimeoutExpired:
            pass
        assert event is not None
        if event.wait(timeout=CANCEL_CHECK_S):
            child.send_signal(signal.SIGINT)
            child.wait()
            raise PointCancelled("cancelled by the client")


def run_point_task(task_json: str, cancel_event: str | None = None) -> dict[str, Any]:
    """Run one point (``task_json``, see ``testbed.cluster.point``) and return its records and results."""
    scratch = Path(tempfile.mkdtemp(prefix="tbpoint-", dir=_scratch_root()))
    try:
        (scratch / "point.json").write_text(task_json)
        log = scratch / "point.log"
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        with log.open("wb") as out:
            child = subprocess.Popen(
                [sys.executable, "-m", "testbed.cluster.point", str(scratch), str(os.getpid())],
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a terminal's Ctrl-C reaches the worker, which stops the child itself
            )
            rc = _wait(child, cancel_event)
        result_file = scratch / "result.json"
        if result_file.exists():
            result = json.loads(result_file.read_text())
        else:
            tail = log.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
            result = {"error": f"the point's process exited {rc} without a result: {tail[0]}"}
        runs = scratch / "runs"
        records = (
            [{"name": p.name, "archive": pack(p)} for p in sorted(runs.iterdir()) if (p / "manifest.json").is_file()]
            if runs.is_dir()
            else []
        )
        return {"result": result, "records": records, "worker": _this_worker()}
    finally:
        # a point interrupted while its sampler started can leave the sampler's stage; its run dies with scratch
        staging.discard_under(scratch)
        shutil.rmtree(scratch, ignore_errors=True)
