"""Typed, frozen specs of a fabric: links, ECN marking, ECMP, transport, topology.

Every spec is built from plain data (a scenario file's dicts) by a ``from_dict`` that rejects unknown keys and
impossible values with a ``SpecError`` naming the key path and the reason. Nothing here touches the system.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Literal, cast

from testbed.spec.classes import Lossless, TrafficClass, check_weights, parse_classes
from testbed.spec.fields import SpecError, check_keys, choice, integer, number, sub, unit
from testbed.spec.units import Size, parse_duration, parse_rate, parse_size, parse_tc_time

# The most this 2-core machine kind emulates faithfully per link (one flow is accurate to about
# 200 Mbit/s, docs/bench.md; HTB from 100 kbit/s up to that). Scenarios state higher real-world rates with a scale factor.
MIN_RATE_BPS = 100_000
MAX_RATE_BPS = 1_000_000_000
ETH_HEADER = 14


# --------------------------------------------------------------------------------------------------------------
# ECN marking


MarkMode = Literal["off", "step", "ramp"]
MarkImpl = Literal["auto", "kernel", "bpf"]
MARK_MODES: tuple[MarkMode, ...] = ("off", "step", "ramp")
MARK_IMPLS: tuple[MarkImpl, ...] = ("auto", "kernel", "bpf")


@dataclass(frozen=True)
class Marking:
    """Switch-style ECN marking on an egress queue.

    - ``off``: drop-tail.
    - ``step``: mark CE on every ECT packet arriving when the instantaneous queue is >= ``k`` (DCTCP-style).
    - ``ramp``: mark with probability rising linearly from 0 at ``kmin`` to ``pmax`` at ``kmax``, 1 above ``kmax``
      (DCQCN-style WRED).
    ``impl`` picks the implementation: kernel ``sch_red`` or the project's eBPF marker; ``auto`` chooses from the
    capability probe.
    """

    mode: MarkMode = "off"
    k: Size | None = None
    kmin: Size | None = None
    kmax: Size | None = None
    pmax: float | None = None
    impl: MarkImpl = "auto"

    @classmethod
    def from_dict(cls, data: Any, path: str) -> Marking:
        if data is None or data is False or data == "off":
            return cls()
        check_keys(data, {"mode", "k", "kmin", "kmax", "pmax", "impl"}, path, {"mode"})
        mode = cast(MarkMode, choice(sub(path, "mode"), data["mode"], MARK_MODES))
        impl = cast(MarkImpl, choice(sub(path, "impl"), data.get("impl", "auto"), MARK_IMPLS))
        if mode == "off":
            extra = sorted(set(data) - {"mode", "impl"})
            if extra:
                raise SpecError(sub(path, extra[0]), "only meaningful when mode is step or ramp")
            return cls(impl=impl)
        if mode == "step":
            check_keys(data, {"mode", "k", "impl"}, path, {"k"})
            return cls(mode, k=unit(sub(path, "k"), parse_size, data["k"]), impl=impl)
        check_keys(data, {"mode", "kmin", "kmax", "pmax", "impl"}, path, {"kmin", "kmax", "pmax"})
        kmin = unit(sub(path, "kmin"), parse_size, data["kmin"])
        kmax = unit(sub(path, "kmax"), parse_size, data["kmax"])
        pmax = number(sub(path, "pmax"), data["pmax"], 0.0, 1.0)
        if pmax <= 0.0:
            raise SpecError(sub(path, "pmax"), "must be in (0, 1]")
        if kmin.unit != kmax.unit:
            raise SpecError(sub(path, "kmax"), "kmin and kmax must use the same unit (bytes or packets)")
        if kmin.value > kmax.value:
            raise SpecError(sub(path, "kmin"), f"kmin ({kmin}) is above kmax ({kmax})")
        return cls(mode, kmin=kmin, kmax=kmax, pmax=pmax, impl=impl)

    def thresholds_bytes(self, mtu: int) -> tuple[int, int]:
        """(low, high) thresholds in bytes: (k, k) for step, (kmin, kmax) for ramp."""
        if self.mode == "step" and self.k is not None:
            return self.k.to_bytes(mtu), self.k.to_bytes(mtu)
        if self.mode == "ramp" and self.kmin is not None and self.kmax is not None:
            return self.kmin.to_bytes(mtu), self.kmax.to_bytes(mtu)
        raise ValueError("marking is off")

    def describe(self) -> str:
        if self.mode == "off":
            return "drop-tail"
        if self.mode == "step":
            return f"ECN K={self.k}"
        return f"ECN ramp {self.kmin}-{self.kmax} p={self.pmax:g}"


# --------------------------------------------------------------------------------------------------------------
# Links

LINK_KEYS = {"rate", "buffer", "mtu", "loss", "delay", "ecn", "classes"}
QDISC_LIMIT_MAX = 2**32 - 1  # bfifo's and pfifo's limit (struct tc_fifo_qopt) is a u32
MTU_RANGE = (576, 9000)
MAX_LOSS = 0.5


@dataclass(frozen=True)
class LinkSpec:
    """One direction-symmetric link class: every egress port on it is shaped the same way.

    ``rate_bps`` is the line rate (Ethernet frames, 14-byte header counted, as HTB counts); ``buffer`` the depth
    of each egress queue; ``loss`` a random drop probability per packet; ``delay_s`` one-way delay (needs netem;
    written with its unit, as tc reads a bare time as microseconds: ``parse_tc_time``).
    """

    rate_bps: int = 100_000_000
    buffer: Size = Size(300_000)
    mtu: int = 9000
    loss: float = 0.0
    delay_s: float = 0.0
    marking: Marking = field(default_factory=Marking)
    classes: tuple[TrafficClass, ...] = ()  # traffic classes (testbed.spec.classes); empty: one queue

    @classmethod
    def from_dict(cls, data: Any, path: str, base: LinkSpec | None = None) -> LinkSpec:
        check_keys(data, LINK_KEYS, path)
        spec = base or cls()
        if "rate" in data:
            spec = replace(spec, rate_bps=unit(sub(path, "rate"), parse_rate, data["rate"]))
        if "buffer" in data:
            spec = replace(spec, buffer=unit(sub(path, "buffer"), parse_size, data["buffer"]))
        if "mtu" in data:
            spec = replace(spec, mtu=integer(sub(path, "mtu"), data["mtu"], *MTU_RANGE))
        if "loss" in data:
            spec = replace(spec, loss=number(sub(path, "loss"), data["loss"], 0.0, MAX_LOSS))
        if "delay" in data:
            spec = replace(spec, delay_s=unit(sub(path, "delay"), parse_tc_time, data["delay"]))
        if "ecn" in data:
            spec = replace(spec, marking=Marking.from_dict(data["ecn"], sub(path, "ecn")))
        if "classes" in data:
            spec = replace(spec, classes=parse_classes(data["classes"], sub(path, "classes"), Marking.from_dict))
        spec.validate(path)
        return spec

    def validate(self, path: str) -> None:
        if self.rate_bps < MIN_RATE_BPS:
            raise SpecError(
                sub(path, "rate"), f"{self.rate_bps} bit/s is below {MIN_RATE_BPS} bit/s, where HTB is accurate"
            )
        if self.rate_bps > MAX_RATE_BPS:
            raise SpecError(
                sub(path, "rate"),
                f"{self.rate_bps / 1e6:g} Mbit/s is above the {MAX_RATE_BPS / 1e6:g} Mbit/s this machine can emulate "
                "faithfully; state real-world rates scaled down (e.g. 400G as 400Mbit)",
            )
        frame = self.mtu + ETH_HEADER
        if self.buffer.to_bytes(self.mtu) > QDISC_LIMIT_MAX:
            raise SpecError(
                sub(path, "buffer"),
                f"{self.buffer} is above the {QDISC_LIMIT_MAX} bytes a qdisc's limit can hold (a 32-bit count)",
            )
        if self.buffer.to_bytes(self.mtu) < frame:
            raise SpecError(
                sub(path, "buffer"), f"{self.buffer} is smaller than one frame ({frame} bytes at MTU {self.mtu})"
            )
        _check_marking(self.marking, self.buffer_bytes, self.mtu, path)
        for i, c in enumerate(self.classes):
            where = sub(path, f"classes[{i}]")
            buffer = self.class_buffer(c)
            if c.buffer is not None and buffer.to_bytes(self.mtu) < frame:
                raise SpecError(sub(where, "buffer"), f"{buffer} is smaller than one frame ({frame} bytes)")
            _check_marking(self.class_marking(c), buffer.to_bytes(self.mtu), self.mtu, where)
            if c.lossless is not None:
                _check_lossless(c.lossless, buffer.to_bytes(self.mtu), self.mtu, sub(where, "lossless"))
        check_weights(self.classes, frame, sub(path, "classes"))

    def class_buffer(self, c: TrafficClass) -> Size:
        return c.buffer if c.buffer is not None else self.buffer

    def class_marking(self, c: TrafficClass) -> Marking:
        return c.ecn if c.ecn is not None else self.marking

    def class_link(self, c: TrafficClass) -> LinkSpec:
        """The link as one class's queue sees it: its buffer and marking, no classes."""
        return replace(self, buffer=self.class_buffer(c), marking=self.class_marking(c), classes=())

    @property
    def buffer_bytes(self) -> int:
        return self.buffer.to_bytes(self.mtu)

    @property
    def payload_rate_bps(self) -> float:
        """TCP goodput ceiling: MSS (MTU - 40 IP/TCP - 12 timestamp option) per frame of MTU + 14."""
        return self.rate_bps * (self.mtu - 52) / (self.mtu + ETH_HEADER)


def _check_marking(marking: Marking, limit: int, mtu: int, path: str) -> None:
    """ECN thresholds within the queue's buffer (``limit`` bytes)."""
    if marking.mode == "off":
        return
    low, high = marking.thresholds_bytes(mtu)
    if high > limit:
        key = "k" if marking.mode == "step" else "kmax"
        raise SpecError(sub(path, f"ecn.{key}"), f"threshold {high} bytes is above the buffer ({limit} bytes)")
    if marking.mode == "step" and low <= 0:
        raise SpecError(sub(path, "ecn.k"), "must be positive")


def _check_lossless(pfc: Lossless, limit: int, mtu: int, path: str) -> None:
    """PFC thresholds: XON under XOFF, XOFF under the class's buffer (the headroom check needs the topology:
    testbed.fabric.pfc)."""
    xoff, xon = pfc.xoff.to_bytes(mtu), pfc.xon.to_bytes(mtu)
    if xoff >= limit:
        raise SpecError(sub(path, "xoff"), f"{pfc.xoff} is not below the class's buffer ({limit} bytes)")
    if not 0 < xon < xoff:
        raise SpecError(sub(path, "xon"), f"{pfc.xon} must be above 0 and below xoff ({pfc.xoff})")


# --------------------------------------------------------------------------------------------------------------
# ECMP and transport


ECMP_MODES = ("static", "spray", "flowlet", "adaptive")
EcmpMode = Literal["static", "spray", "flowlet", "adaptive"]
Pick = Literal["round-robin", "random"]
HASHES = ("l3", "l4")
PICKS: tuple[Pick, ...] = ("round-robin", "random")


@dataclass(frozen=True)
class EcmpSpec:
    """How every router spreads traffic over its equal-cost next hops.

    ``mode: static`` (the default) is hash-based ECMP: a flow's next hop is fixed by its header hash, ``hash: l3``
    (source and destination address) or ``l4`` (the 5-tuple). Both use ``fib_multipath_hash_policy=3`` with
    explicit hash fields, which is deterministic per 5-tuple (policy 1 is not, on veth: the socket's flow hash is
    carried over). ``mode: spray`` picks a next hop per packet (``pick: round-robin``, or ``random``), so one flow
    uses every uplink and its packets can arrive out of order. ``mode: flowlet`` keeps a flow on its next hop until
    it has been idle for longer than ``gap``, then picks again (``pick``). Without ``gap``, the fabric sets it to
    the most two paths' delays can differ (``testbed.spec.topology.flowlet_gap``), so a new flowlet cannot
    overtake the last one's packets. ``mode: adaptive`` is flowlet switching whose new flowlets take the uplink
    whose queue holds the fewest bytes at that moment (read in the kernel); ``gap: 0s`` decides per packet.
    """

    hash: Literal["l3", "l4"] = "l4"
    seed: int | None = None
    mode: EcmpMode = "static"
    pick: Pick = "round-robin"
    gap_s: float | None = None  # flowlet mode's idle gap; None: the fabric's (Topology.flowlet_gap)

    @classmethod
    def from_dict(cls, data: Any, path: str) -> EcmpSpec:
        check_keys(data, {"hash", "seed", "mode", "pick", "gap"}, path)
        h = cast(Literal["l3", "l4"], choice(sub(path, "hash"), data.get("hash", "l4"), HASHES))
        seed = data.get("seed")
        if seed is not None:
            seed = integer(sub(path, "seed"), seed, 0, 2**32 - 1)
        mode = cast(EcmpMode, choice(sub(path, "mode"), data.get("mode", "static"), ECMP_MODES))
        pick = cast(Pick, choice(sub(path, "pick"), data.get("pick", PICKS[0]), PICKS))
        if "pick" in data and mode in ("static", "adaptive"):
            raise SpecError(sub(path, "pick"), f"{mode} mode picks its own next hop; pick is for spray or flowlet")
        gap = None
        if "gap" in data:
            if mode not in ("flowlet", "adaptive"):
                raise SpecError(sub(path, "gap"), "only flowlet and adaptive modes have an idle gap")
            gap = unit(sub(path, "gap"), parse_duration, data["gap"])
            if gap > 10.0 or 0 < gap < 10e-6:
                raise SpecError(sub(path, "gap"), f"must be 0 (per packet) or within 10us and 10s, got {data['gap']!r}")
        return cls(h, seed, mode, pick, gap)

    @property
    def hash_fields(self) -> int:
        # bits: 0x1 src ip, 0x2 dst ip, 0x4 ip proto, 0x10 src port, 0x20 dst port
        return 0x0037 if self.hash == "l4" else 0x0003


CongestionControl = Literal["reno", "cubic", "bbr", "dctcp"]
CCS: tuple[CongestionControl, ...] = ("reno", "cubic", "bbr", "dctcp")


@dataclass(frozen=True)
class TransportSpec:
    """Per-host transport defaults, set in every host namespace (never inherited from the root namespace)."""

    cc: CongestionControl = "cubic"
    ecn: bool = True
    gso_max_segs: int = 1

    @classmethod
    def from_dict(cls, data: Any, path: str) -> TransportSpec:
        check_keys(data, {"cc", "ecn", "gso_max_segs"}, path)
        cc = cast(CongestionControl, choice(sub(path, "cc"), data.get("cc", "cubic"), CCS))
        ecn = data.get("ecn", True)
        if not isinstance(ecn, bool):
            raise SpecError(sub(path, "ecn"), f"expected true or false, got {ecn!r}")
        segs = integer(sub(path, "gso_max_segs"), data.get("gso_max_segs", 1), 1, 65535)
        if cc == "dctcp" and not ecn:
            raise SpecError(sub(path, "ecn"), "DCTCP needs ECN: set transport.ecn true (or pick another cc)")
        return cls(cc, ecn, segs)
