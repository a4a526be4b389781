"""PFC-style lossless classes at run time: start the controller process (testbed.pfc.controller) on a built
fabric's pause points (testbed.fabric.pfc), stop it, and hand its summary to the manifest."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from testbed.fabric.pfc import PfcPlan
from testbed.host.child import start_child, stop_child
from testbed.host.procs import Proc, ProcessGroup
from testbed.pfc.errors import PfcError

__all__ = ["PfcError", "PfcHandle", "start_pfc"]


class PfcHandle:
    """The running controller: ``stop()`` signals it, waits for its files, returns its summary (idempotent)."""

    def __init__(self, proc: Proc, out: Path):
        self.proc, self.out = proc, out
        self.summary: dict[str, Any] | None = None

    def stop(self, timeout: float = 30.0) -> dict[str, Any]:
        if self.summary is None:
            self.summary = stop_child(self.proc, self.out / "pfc.json", PfcError, timeout)
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
    config = out / "pfc_config.json"
    config.write_text(json.dumps(cfg, indent=1) + "\n")
    proc = start_child(procs, "pfc-controller", "testbed.pfc.controller", config, out, out / "pfc.ready",
                       out / "pfc.log", PfcError, ready_timeout)  # fmt: skip
    return PfcHandle(proc, out)
