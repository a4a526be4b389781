"""PFC-style lossless classes at run time: start the controller process (testbed.pfc.controller) on a built
fabric's pause points (testbed.fabric.pfc), stop it, and hand its summary to the manifest."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from testbed.fabric.pfc import PfcPlan
from testbed.host.child import ChildHandle, start_child
from testbed.host.procs import ProcessGroup
from testbed.pfc.errors import PfcError

__all__ = ["PfcError", "start_pfc"]


def start_pfc(
    procs: ProcessGroup,
    plan: PfcPlan,
    netns: Callable[[str], str],
    out: Path,
    ready_timeout: float = 20.0,
) -> ChildHandle:
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
    return ChildHandle(proc, out / "pfc.json", PfcError)
