"""What a traffic generator gets from the run: the built fabric's hosts, the run's process group, where to write."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.procs import ProcessGroup
from testbed.spec import LinkSpec
from testbed.topology import HostInfo


@dataclass
class RunContext:
    hosts: dict[str, HostInfo]  # name -> HostInfo(name, ip, leaf, netns, pod)
    procs: ProcessGroup  # spawn every process through it: the run stops and reaps them
    raw_dir: Path  # the run record's raw/ directory: generators write their raw output here
    host_link: LinkSpec  # rate_bps, mtu, payload_rate_bps: the ideal-time formulas use it
    fabric_link: LinkSpec
    cc_name: Callable[[str], str]  # kernel name of a congestion control in this run ("dctcp" -> "dctcp_tb12ab")
    predict_path: Callable[[str, str, str, int, int], list[str]]  # (src, dst, proto, sport, dport) -> node names
    seed: int = 1
    t0: float = 0.0  # the run's time origin (epoch seconds): jobs' start_after counts from here
    caps: dict[str, Any] = field(default_factory=dict)

    @property
    def leaves(self) -> dict[str, list[str]]:
        """leaf name -> its hosts, in host order."""
        out: dict[str, list[str]] = {}
        for h in self.hosts.values():
            out.setdefault(h.leaf, []).append(h.name)
        return out
