"""What the sampler samples: the egress queues (``PortRef``) and its settings (``SamplerConfig``), as JSON.

Config file (``--config``)::

    {"rate_hz": 1000, "link_hz": 100, "cpu_hz": 10, "flush_s": 0.5, "keyframe_s": 0.1, "rt_priority": 10,
     "ports": [{"netns": "tb3fa2-s1", "dev": "s1-l1", "leaf_handle": "10:", "root": "1:", "node": "s1"}],
     "links_netns": ["tb3fa2-s1"],
     "senders": [{"netns": "tb3fa2-l2h1", "node": "l2h1", "dports": [5201]}], "sender_hz": 20}

``marks_map`` (optional) is the eBPF marker's pinned stats map for that port (``bpfmarks.marks_map_path``).
``root`` may be null when the leaf is the root qdisc; ``node`` defaults to the namespace name without its run
prefix (``tb3fa2-s1`` -> ``s1``); ``links_netns`` (every interface but lo is sampled there) defaults to the
ports' namespaces. ``senders`` (optional): namespaces whose TCP sockets to ``dports`` are bulk senders, whose
TCP_INFO goes to senders.csv at ``sender_hz`` (``testbed.telemetry.senders``). ``go_file`` (optional): the run's
start gate; the sampling-gap statistics restart at its go time. Unknown keys are errors.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from testbed.errors import TestbedError
from testbed.telemetry.rtnl import parse_handle


class ConfigError(TestbedError, ValueError):
    """A sampler config that cannot be used; names the key."""


def node_of(netns: str) -> str:
    return netns.split("-", 1)[1] if "-" in netns else netns


@dataclass(frozen=True)
class PortRef:
    netns: str
    dev: str
    leaf: str = "10:"
    root: str | None = "1:"
    node: str = ""
    marks_map: str | None = None  # pinned stats map of the eBPF marker on this port (see bpfmarks)

    def __post_init__(self) -> None:
        if not self.netns or not self.dev:
            raise ConfigError(f"port needs netns and dev: {self!r}")
        for key, h in (("leaf_handle", self.leaf), ("root", self.root)):
            if h is not None:
                try:
                    parse_handle(h)
                except ValueError as exc:
                    raise ConfigError(f"port {self.netns}/{self.dev}.{key}: {exc}") from None
        if not self.node:
            object.__setattr__(self, "node", node_of(self.netns))

    def to_dict(self) -> dict[str, Any]:
        return {
            "netns": self.netns,
            "dev": self.dev,
            "leaf_handle": self.leaf,
            "root": self.root,
            "node": self.node,
            "marks_map": self.marks_map,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PortRef:
        allowed = {"netns", "dev", "leaf_handle", "root", "node", "marks_map"}
        unknown = sorted(set(d) - allowed)
        if unknown:
            raise ConfigError(f"port key {unknown[0]!r} unknown (allowed: {', '.join(sorted(allowed))})")
        return cls(
            netns=d.get("netns", ""),
            dev=d.get("dev", ""),
            leaf=d.get("leaf_handle", "10:"),
            root=d.get("root", "1:"),
            node=d.get("node", ""),
            marks_map=d.get("marks_map"),
        )


@dataclass(frozen=True)
class SenderRef:
    """A namespace whose TCP sockets connected to one of ``dports`` are bulk senders (iperf3 clients)."""

    netns: str
    node: str
    dports: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.netns or not self.dports or not all(0 < int(p) < 65536 for p in self.dports):
            raise ConfigError(f"sender needs netns and dports in 1..65535: {self!r}")
        object.__setattr__(self, "dports", tuple(int(p) for p in self.dports))
        if not self.node:
            object.__setattr__(self, "node", node_of(self.netns))

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SenderRef:
        unknown = sorted(set(d) - {"netns", "node", "dports"})
        if unknown:
            raise ConfigError(f"sender key {unknown[0]!r} unknown (allowed: dports, netns, node)")
        return cls(netns=d.get("netns", ""), node=d.get("node", ""), dports=tuple(d.get("dports") or ()))


@dataclass(frozen=True)
class SamplerConfig:
    ports: list[PortRef]
    rate_hz: float = 1000.0
    link_hz: float = 100.0
    cpu_hz: float = 10.0  # 0 disables cpu.csv
    flush_s: float = 0.5
    keyframe_s: float = 0.1  # an unchanged queue/link still gets a row this often
    # SCHED_FIFO priority of the sampler process (0 = normal scheduling): without it other tasks run first and the
    # sampling gaps grow a tail (docs/bench.md, "The queue sampler's priority")
    rt_priority: int = 10
    links_netns: list[str] = field(default_factory=list)
    senders: list[SenderRef] = field(default_factory=list)
    sender_hz: float = 20.0
    go_file: str | None = None  # the run's start gate (traffic.gate): gap statistics restart at its go time

    def __post_init__(self) -> None:
        if not self.ports:
            raise ConfigError("ports: at least one egress queue is needed")
        if not 1 <= self.rate_hz <= 20000:
            raise ConfigError(f"rate_hz must be in [1, 20000], got {self.rate_hz}")
        if not 0 < self.link_hz <= self.rate_hz:
            raise ConfigError(f"link_hz must be in (0, rate_hz], got {self.link_hz}")
        if not 0 <= self.cpu_hz <= 100:
            raise ConfigError(f"cpu_hz must be in [0, 100], got {self.cpu_hz}")
        if not 0.01 <= self.flush_s <= 10 or self.keyframe_s <= 0:
            raise ConfigError("flush_s must be in [0.01, 10] and keyframe_s > 0")
        if not 0 <= self.rt_priority <= 99:
            raise ConfigError(f"rt_priority must be in [0, 99], got {self.rt_priority}")
        if not 0 < self.sender_hz <= self.rate_hz:
            raise ConfigError(f"sender_hz must be in (0, rate_hz], got {self.sender_hz}")
        keys = [(p.netns, p.dev) for p in self.ports]
        if len(set(keys)) != len(keys):
            raise ConfigError("ports: the same netns/dev appears twice")
        if not self.links_netns:
            object.__setattr__(self, "links_netns", sorted({p.netns for p in self.ports}))

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["ports"] = [p.to_dict() for p in self.ports]
        d["senders"] = [{"netns": r.netns, "node": r.node, "dports": list(r.dports)} for r in self.senders]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SamplerConfig:
        allowed = {
            "ports",
            "rate_hz",
            "link_hz",
            "cpu_hz",
            "flush_s",
            "keyframe_s",
            "rt_priority",
            "links_netns",
            "senders",
            "sender_hz",
            "go_file",
        }
        unknown = sorted(set(d) - allowed)
        if unknown:
            raise ConfigError(f"config key {unknown[0]!r} unknown (allowed: {', '.join(sorted(allowed))})")
        ports = [PortRef.from_dict(p) for p in d.get("ports", [])]
        senders = [SenderRef.from_dict(r) for r in d.get("senders", [])]
        rest = {k: v for k, v in d.items() if k not in ("ports", "senders")}
        return cls(ports=ports, senders=senders, **rest)

    @classmethod
    def load(cls, path: Path) -> SamplerConfig:
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ConfigError(f"cannot read sampler config {path}: {exc}") from None
        return cls.from_dict(data)
