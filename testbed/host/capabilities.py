"""What this machine can do: the typed result of the capability probe (``testbed.host.probe``), and the needs table.

``probe()`` returns a ``Capabilities``: typed and frozen, with ``to_dict()`` giving the plain dict that every run
manifest stores (and ``Capabilities.from_dict`` reading one back, or a partial canned one). ``doctor_rows()`` turns
it into the table ``python3 -m testbed doctor`` prints: each capability, whether it is there, what its absence
disables, and how to get it on Debian/Ubuntu. ``calibration`` is this machine's CPU cost calibration (``testbed
calibrate``: its values and date, ``stale`` when measured on another kernel or CPU, or ``not calibrated``), set by
``testbed.machine.probe``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Literal, TypeVar, cast

from testbed.errors import TestbedError


@dataclass(frozen=True)
class Need:
    key: str
    what: str
    disables: str
    get: str


NEEDS = [
    Need("qdisc.htb", "HTB qdisc", "rate shaping (nothing can run)", "any stock Debian/Ubuntu kernel has sch_htb"),
    Need("qdisc.bfifo", "bfifo/pfifo qdiscs", "buffer depth (nothing can run)", "stock kernels have them"),
    Need(
        "qdisc.red",
        "sch_red (RED with ECN)",
        "kernel ECN marking: the eBPF marker is used instead",
        "stock kernel (linux-image-amd64), or `python3 -m testbed vm`",
    ),
    Need(
        "qdisc.netem",
        "sch_netem",
        "link delay: scenarios with `delay` fail or skip",
        "stock kernel, or `python3 -m testbed vm`",
    ),
    Need("qdisc.fq_codel", "sch_fq_codel", "nothing here (informational)", "stock kernel"),
    Need("qdisc.clsact", "clsact qdisc", "the eBPF ECN marker", "stock kernels have it"),
    Need("ifb", "ifb devices", "link delay (netem on the receiving side)", "stock kernels have it"),
    Need("cc.cubic", "TCP cubic", "cubic flows", "stock kernels have tcp_cubic"),
    Need(
        "cc.dctcp",
        "TCP DCTCP (kernel module)",
        "kernel DCTCP: the BPF struct_ops DCTCP is used instead",
        "stock kernel (modprobe tcp_dctcp), or `python3 -m testbed vm`",
    ),
    Need(
        "ecmp.hash_policy_3", "ECMP hash policy 3 with hash fields", "deterministic ECMP hashing", "Linux 5.12 or newer"
    ),
    Need(
        "ecmp.hash_seed",
        "fib_multipath_hash_seed sysctl",
        "ecmp.seed (hash seed must be left unset)",
        "Linux 6.11 or newer",
    ),
    Need("nftables", "nftables (numgen random)", "random loss (`loss`) on links", "apt install nftables"),
    Need("tool.clang", "clang", "building the eBPF marker and BPF DCTCP", "apt install clang llvm"),
    Need("tool.bpftool", "bpftool", "loading BPF DCTCP (struct_ops)", "apt install bpftool"),
    Need("btf", "kernel BTF (/sys/kernel/btf/vmlinux)", "the eBPF programs (CO-RE)", "stock kernels ship it"),
    Need(
        "ovs",
        "Open vSwitch kernel datapath",
        "nothing (the fabric is routed L3; informational)",
        "apt install openvswitch-switch on a stock kernel",
    ),
    Need("tool.iperf3", "iperf3", "iperf3 background load", "apt install iperf3"),
    Need("tool.tcpdump", "tcpdump", "packet captures", "apt install tcpdump"),
    Need(
        "mininet",
        "Mininet (Python module + mnexec)",
        "building fabrics (nothing can run)",
        "apt install mininet (Debian's, for /usr/bin/python3)",
    ),
]


NEEDS_BY_KEY = {n.key: n for n in NEEDS}

T = TypeVar("T")
EcnImpl = Literal["kernel", "bpf"]  # testbed.ecn's Impl


def _frozen(d: Mapping[str, T]) -> Mapping[str, T]:
    return d if isinstance(d, MappingProxyType) else MappingProxyType(dict(d))


def _impl(value: Any, key: str) -> EcnImpl | None:
    if value is None or value in ("kernel", "bpf"):
        return cast("EcnImpl | None", value)
    raise ValueError(f"capabilities ecn.{key}: expected 'kernel', 'bpf' or None, got {value!r}")


@dataclass(frozen=True)
class EcnSupport:
    """What ``testbed.ecn.probe`` found: the ECN marking and DCTCP implementations this machine will use.

    None means not probed (not root, or a partial canned dict); for ``marking_auto`` and ``dctcp`` it also means
    that no implementation is available (the reasons say why). ``error``: testbed.ecn failed to import."""

    sch_red: bool | None = None
    sch_red_reason: str | None = None
    bpf_marker: bool | None = None
    bpf_marker_reason: str | None = None
    marking_auto: EcnImpl | None = None
    dctcp: EcnImpl | None = None
    dctcp_reason: str | None = None
    error: str | None = None

    @property
    def probed(self) -> bool:
        return self != EcnSupport()

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> EcnSupport:
        """``testbed.ecn.probe``'s dict (the manifest's ``capabilities.ecn``), or part of one."""
        return cls(
            sch_red=d.get("sch_red"),
            sch_red_reason=d.get("sch_red_reason"),
            bpf_marker=d.get("bpf_marker"),
            bpf_marker_reason=d.get("bpf_marker_reason"),
            marking_auto=_impl(d.get("marking_auto"), "marking_auto"),
            dctcp=_impl(d.get("dctcp"), "dctcp"),
            dctcp_reason=d.get("dctcp_reason"),
            error=d.get("error"),
        )

    def to_dict(self) -> dict[str, Any]:
        """The probe's dict: its seven keys, or ``marking_auto`` and ``error`` when testbed.ecn did not import."""
        if self.error is not None:
            return {"marking_auto": self.marking_auto, "error": self.error}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name != "error"}


# Keys of the probe's dict held by one attribute each (the families qdisc.*, cc.*, tool.* are mappings).
_SCALARS = {
    "kernel": "kernel",
    "machine": "machine",
    "cpus": "cpus",
    "root": "root",
    "netns": "netns",
    "ifb": "ifb",
    "ecmp.hash_policy_3": "ecmp_hash_policy_3",
    "ecmp.hash_seed": "ecmp_hash_seed",
    "nftables": "nftables",
    "cc.available": "cc_available",
    "cc.allowed": "cc_allowed",
    "cc.default": "cc_default",
    "mininet": "mininet",
    "btf": "btf",
    "ovs": "ovs",
}


@dataclass(frozen=True)
class Capabilities:
    """What ``probe()`` found on this machine (frozen). None, or a name missing from a mapping, means not probed
    (unknown): the namespace trials need root, and canned test dicts hold a few keys only.

    ``qdiscs`` (``qdisc.<name>`` of the probe's dict: each of ``testbed.host.trials.QDISC_TRIALS``), ``cc`` (``cc.<name>``: reno,
    cubic, bbr, dctcp, built in or as a loadable module) and ``tools`` (``tool.<name>``: on PATH) map names to
    whether they work. ``has(key)`` / ``require(key, why)`` read the probe's keys (the ``NEEDS`` table's); code
    reads the attributes. ``to_dict()`` is the plain dict a run manifest stores, ``from_dict`` reads one back."""

    kernel: str | None = None
    machine: str | None = None
    cpus: int | None = None
    root: bool | None = None
    netns: bool | None = None  # a scratch namespace could be made (the qdisc, ifb, ECMP, nft and ECN trials ran)
    qdiscs: Mapping[str, bool] = field(default_factory=dict, hash=False)
    ifb: bool | None = None
    ecmp_hash_policy_3: bool | None = None
    ecmp_hash_seed: bool | None = None
    nftables: bool | None = None  # nft with numgen random (random loss)
    ecn: EcnSupport = EcnSupport()
    cc_available: tuple[str, ...] | None = None
    cc_allowed: tuple[str, ...] | None = None
    cc_default: str | None = None
    cc: Mapping[str, bool] = field(default_factory=dict, hash=False)
    mininet: bool | None = None
    btf: bool | None = None
    ovs: bool | None = None
    tools: Mapping[str, bool] = field(default_factory=dict, hash=False)
    calibration: Mapping[str, Any] | None = field(default=None, hash=False)  # testbed.machine.probe sets it
    extra: Mapping[str, Any] = field(default_factory=dict, hash=False)  # keys from_dict does not know, kept as read

    def __post_init__(self) -> None:
        for name in ("qdiscs", "cc", "tools", "extra"):
            object.__setattr__(self, name, _frozen(getattr(self, name)))
        if self.calibration is not None:
            object.__setattr__(self, "calibration", _frozen(self.calibration))
        for name in ("cc_available", "cc_allowed"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, tuple(getattr(self, name)))

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Capabilities:
        """A probe's dict (a manifest's ``capabilities``), or a partial canned one: absent keys are not probed."""
        kw: dict[str, Any] = {}
        families: dict[str, dict[str, Any]] = {"qdisc.": {}, "cc.": {}, "tool.": {}}
        extra: dict[str, Any] = {}
        for key, value in d.items():
            family = next((f for f in families if key.startswith(f)), None)
            if key in _SCALARS:
                kw[_SCALARS[key]] = value
            elif key == "ecn":
                kw["ecn"] = EcnSupport.from_dict(value or {})
            elif key == "calibration":
                kw["calibration"] = value
            elif family is not None:
                families[family][key.removeprefix(family)] = value
            else:
                extra[key] = value
        return cls(**kw, qdiscs=families["qdisc."], cc=families["cc."], tools=families["tool."], extra=extra)

    def to_dict(self) -> dict[str, Any]:
        """The plain dict a run manifest stores: the probe's keys in the probe's order (a None is left out)."""
        out: dict[str, Any] = {}

        def put(*keys: str) -> None:
            for key in keys:
                value = self._value(key)
                if value is not None:
                    out[key] = list(value) if isinstance(value, tuple) else value

        put("kernel", "machine", "cpus", "root", "netns")
        out.update({f"qdisc.{k}": v for k, v in self.qdiscs.items()})
        put("ifb", "ecmp.hash_policy_3", "ecmp.hash_seed", "nftables")
        if self.ecn.probed:
            out["ecn"] = self.ecn.to_dict()
        put("cc.available", "cc.allowed", "cc.default")
        out.update({f"cc.{k}": v for k, v in self.cc.items()})
        put("mininet", "btf", "ovs")
        out.update({f"tool.{k}": v for k, v in self.tools.items()})
        if self.calibration is not None:
            out["calibration"] = dict(self.calibration)
        out.update(self.extra)
        return out

    def _value(self, key: str) -> Any:
        """The value under a probe key (``qdisc.red``, ``cc.dctcp``, ``tool.iperf3``, ``ecmp.hash_seed``, ...);
        None when not probed. Code reads the typed attributes; this is for key tables such as ``NEEDS``."""
        if key in _SCALARS:
            return getattr(self, _SCALARS[key])
        if key == "ecn":
            return self.ecn if self.ecn.probed else None
        if key == "calibration":
            return self.calibration
        for family, mapping in (("qdisc.", self.qdiscs), ("cc.", self.cc), ("tool.", self.tools)):
            if key.startswith(family):
                return mapping.get(key.removeprefix(family))
        return self.extra.get(key)

    def has(self, key: str) -> bool | None:
        """Whether the machine has the capability of a probe key: True, False, or None when not probed."""
        value = self._value(key)
        return None if value is None else bool(value)

    def require(self, key: str, why: str) -> None:
        """Raise a CapabilityError naming what is missing (or not probed), what needed it and how to get it."""
        if self.has(key):
            return
        need = NEEDS_BY_KEY.get(key)
        how = f" ({need.get})" if need else ""
        raise CapabilityError(f"{why} needs {need.what if need else key}, which this machine lacks{how}")


def doctor_rows(caps: Capabilities) -> list[tuple[str, str, str, str]]:
    """(capability, status, what its absence disables, how to get it)."""
    rows = []
    for need in NEEDS:
        ok = caps.has(need.key)
        status = "yes" if ok else ("unknown" if ok is None else "MISSING")
        rows.append((need.what, status, "" if ok else need.disables, "" if ok else need.get))
    ecn = caps.ecn
    rows.append(("ECN marking implementation (auto)", str(ecn.marking_auto), ecn.sch_red_reason or "", ""))
    rows.append(("DCTCP implementation", str(ecn.dctcp), ecn.dctcp_reason or "", ""))
    if ecn.error:
        rows.append(("testbed.ecn", "MISSING", ecn.error, "see the error"))
    return rows


def stock_missing(caps: Capabilities) -> list[str]:
    """What this kernel lacks of the stock-kernel paths (kernel RED, netem, the tcp_dctcp module); empty on a stock
    Debian/Ubuntu kernel, where the ``stock_kernel`` scenarios run natively instead of in the guest kernel mode."""
    have = {
        "sch_red": bool(caps.qdiscs.get("red")),
        "sch_netem": bool(caps.qdiscs.get("netem")),
        "tcp_dctcp": caps.ecn.dctcp == "kernel",
    }
    return [name for name, ok in have.items() if not ok]


def require(caps: Capabilities, key: str, why: str) -> None:
    """``caps.require(key, why)``."""
    caps.require(key, why)


class CapabilityError(TestbedError, RuntimeError):
    """A scenario asks for something this kernel or machine cannot do."""
