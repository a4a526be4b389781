"""PFC-style lossless classes at run time: start the controller process (testbed.pfc.controller) on a built
fabric's pause points (testbed.fabric.pfc), stop it, and hand its summary to the manifest."""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from testbed.fabric.pfc import PfcPlan
from testbed.host.procs import Proc, ProcessGroup
from testbed.pfc.errors import PfcError

PYTHON = "/usr/bin/python3"
REPO = Path(__file__).resolve().parents[2]

__all__ = ["PfcError", "PfcHandle", "start_pfc"]


class PfcHandle:
    """The running controller: ``stop()`` signals it, waits for its files, returns its summary (idempotent)."""

    def __init__(self, proc: Proc, out: Path):
        self.proc, self.out = proc, out
        self.summary: dict[str, Any] | None = None

    def stop(self, timeout: float = 30.0) -> dict[str, Any]:
        if self.summary is not None:
            return self.summary
        if self.proc.poll() is None:
            self.proc.signal_group(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except TimeoutError:
                self.proc.stop(grace=1.0)
                raise PfcError(f"the PFC controller (pid {self.proc.pid}) did not stop within {timeout:g} s") from None
        try:
            self.summary = json.loads((self.out / "pfc.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise PfcError(
                f"the PFC controller exited {self.proc.poll()} without pfc.json ({exc}): {self.proc.stderr_tail(5)}"
            ) from None
        return dict(self.summary)


def start_pfc(
    procs: ProcessGroup,
    plan: PfcPlan,
    netns: Callable[[str], str],
    out: Path,
    ready_timeout: float = 20.0,
) -> PfcHandle:
    """Write DIR/pfc_config.json, spawn the controller in ``procs``, wait until its programs are attached."""
    cfg = {
        "queues": [{**asdict(q), "router_netns": netns(q.router)} for q in plan.queues],
        "feeds": [
            {**asdict(f), "router_netns": netns(f.router), "upstream_netns": netns(f.upstream)} for f in plan.feeds
        ],
    }
    (out / "pfc_config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    argv = [PYTHON if Path(PYTHON).exists() else sys.executable, "-m", "testbed.pfc.controller"]
    argv += ["--config", str(out / "pfc_config.json"), "--out", str(out)]
    proc = procs.spawn("pfc-controller", argv, stderr=out / "pfc.log", cwd=REPO)
    deadline = time.monotonic() + ready_timeout
    while not (out / "pfc.ready").exists():  # a child's readiness: no condition to wait on but the file
        if proc.poll() is not None:
            raise PfcError(f"the PFC controller exited {proc.poll()} before it was ready: {proc.stderr_tail(5)}")
        if time.monotonic() > deadline:
            proc.stop(grace=0.5)
            raise PfcError(f"the PFC controller was not ready within {ready_timeout:g} s: {proc.stderr_tail(5)}")
        time.sleep(0.01)
    return PfcHandle(proc, out)
