"""Telemetry during a run: queue/link sampler (raw rtnetlink), CPU, per-namespace netstat, per-socket TCP_INFO.

Public API (imported lazily, so ``python3 -m testbed.telemetry.sampler`` runs its module cleanly)::

    start_sampler(procs, ports, out, rate_hz=1000) -> SamplerHandle   # .stop() -> health dict
    poll_once(ports) -> list[dict]                                     # one queues.csv row per port
    PortRef(netns, dev, leaf="10:", root="1:", node="")
    netstat.snapshot_hosts(netns_by_host, phase) -> netstat.csv rows
    cpu.CpuSampler / cpu.CpuThread, tcpinfo.read_tcp_info(sock)
"""

from __future__ import annotations

import importlib
from typing import Any

_WHERE = {
    "start_sampler": "control",
    "SamplerHandle": "control",
    "poll_once": "sampler",
    "SamplerError": "sampler",
    "PortRef": "ports",
    "SamplerConfig": "ports",
    "ConfigError": "ports",
}
__all__ = ["ConfigError", "PortRef", "SamplerConfig", "SamplerError", "SamplerHandle", "poll_once", "start_sampler"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"testbed.telemetry.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'testbed.telemetry' has no attribute {name!r}")
