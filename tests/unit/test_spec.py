"""Spec validation (no root): every rejection names the key path and the reason.

Covers testbed.spec.link (Marking, LinkSpec, EcmpSpec, TransportSpec) and testbed.spec.fabric (FabricSpec, overrides,
oversubscription). A SpecError carries ``path`` (the dotted key) and ``reason``; both are checked.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction
from typing import Any

import pytest

from testbed.spec.fabric import FabricSpec, parse_ratio
from testbed.spec.fields import SpecError
from testbed.spec.link import MAX_RATE_BPS, EcmpSpec, LinkSpec, Marking, TransportSpec
from testbed.spec.scenario import build_scenario
from testbed.spec.topology import Topology
from testbed.spec.units import Size

ECN = "fabric.host_link.ecn"
HL = "fabric.host_link"


def rejects(fn: Callable[[], Any], path: str, reason: str) -> SpecError:
    """``fn()`` raises a SpecError whose path is exactly ``path`` and whose reason contains ``reason``."""
    with pytest.raises(SpecError) as info:
        fn()
    exc = info.value
    assert exc.path == path, f"path {exc.path!r} != {path!r} ({exc})"
    assert reason in exc.reason, f"{reason!r} not in {exc.reason!r}"
    assert str(exc).startswith(f"{path}: "), str(exc)
    assert "\n" not in str(exc)
    return exc


# ---------------------------------------------------------------------------------------------------------------
# Marking


def test_marking_off_forms() -> None:
    for data in (None, False, "off", {"mode": "off"}, {"mode": False}):
        assert Marking.from_dict(data, ECN) == Marking()
    assert Marking.from_dict({"mode": "off", "impl": "bpf"}, ECN).impl == "bpf"
    assert Marking().describe() == "drop-tail"
    with pytest.raises(ValueError):
        Marking().thresholds_bytes(9000)


def test_marking_step_and_ramp() -> None:
    step = Marking.from_dict({"mode": "step", "k": "30KB", "impl": "kernel"}, ECN)
    assert (step.mode, step.k, step.impl) == ("step", Size(30_720), "kernel")
    assert step.thresholds_bytes(9000) == (30_720, 30_720)
    assert step.describe() == "ECN K=30KB"
    pk = Marking.from_dict({"mode": "step", "k": "20pkt"}, ECN)
    assert pk.thresholds_bytes(1500) == (20 * 1514, 20 * 1514)
    ramp = Marking.from_dict({"mode": "ramp", "kmin": "20KB", "kmax": "60KB", "pmax": 0.2}, ECN)
    assert ramp.thresholds_bytes(9000) == (20_480, 61_440)
    assert ramp.describe() == "ECN ramp 20KB-60KB p=0.2"
    assert Marking.from_dict({"mode": "ramp", "kmin": "5pkt", "kmax": "5pkt", "pmax": 1}, ECN).pmax == 1.0


@pytest.mark.parametrize(
    ("data", "path", "reason"),
    [
        ({"mode": "step", "k": "30KB", "q": 1}, f"{ECN}.q", "unknown key"),
        ({"k": "30KB"}, f"{ECN}.mode", "required key is missing"),
        ({"mode": "bogus"}, f"{ECN}.mode", "must be one of off, step, ramp"),
        ({"mode": "step"}, f"{ECN}.k", "required key is missing"),
        ({"mode": "step", "k": "30KB", "kmin": "1KB"}, f"{ECN}.kmin", "unknown key"),
        ({"mode": "step", "k": 0}, f"{ECN}.k", "must be positive"),
        ({"mode": "step", "k": "-3KB"}, f"{ECN}.k", "must be positive"),
        ({"mode": "step", "k": "30KB", "impl": "asic"}, f"{ECN}.impl", "must be one of auto, kernel, bpf"),
        ({"mode": "off", "k": "30KB"}, f"{ECN}.k", "only meaningful when mode is step or ramp"),
        ({"mode": "ramp", "kmin": "20KB", "kmax": "60KB"}, f"{ECN}.pmax", "required key is missing"),
        ({"mode": "ramp", "kmin": "20KB", "kmax": "60KB", "pmax": 0.1, "k": "1KB"}, f"{ECN}.k", "unknown key"),
        ({"mode": "ramp", "kmin": "60KB", "kmax": "20KB", "pmax": 0.1}, f"{ECN}.kmin", "above kmax"),
        ({"mode": "ramp", "kmin": "20KB", "kmax": "60KB", "pmax": 0}, f"{ECN}.pmax", "(0, 1]"),
        ({"mode": "ramp", "kmin": "20KB", "kmax": "60KB", "pmax": 1.5}, f"{ECN}.pmax", "must be in"),
        ({"mode": "ramp", "kmin": "20KB", "kmax": "60KB", "pmax": -0.1}, f"{ECN}.pmax", "must be in"),
        ({"mode": "ramp", "kmin": "20KB", "kmax": "60KB", "pmax": "high"}, f"{ECN}.pmax", "expected a number"),
        ({"mode": "ramp", "kmin": "2pkt", "kmax": "60KB", "pmax": 0.1}, f"{ECN}.kmax", "same unit"),
        ("step", ECN, "expected a mapping"),
    ],
)
def test_marking_rejections(data: Any, path: str, reason: str) -> None:
    rejects(lambda: Marking.from_dict(data, ECN), path, reason)


# ---------------------------------------------------------------------------------------------------------------
# LinkSpec


def test_link_defaults_and_values() -> None:
    d = LinkSpec.from_dict({}, HL)
    assert (d.rate_bps, d.buffer, d.mtu, d.loss, d.delay_s) == (100_000_000, Size(300_000), 9000, 0.0, 0.0)
    ls = LinkSpec.from_dict(
        {
            "rate": "50Mbit",
            "buffer": "20pkt",
            "mtu": 1500,
            "loss": 0.01,
            "delay": "2ms",
            "ecn": {"mode": "step", "k": "10pkt"},
        },
        HL,
    )
    assert ls.rate_bps == 50_000_000
    assert ls.buffer_bytes == 20 * 1514
    assert (ls.mtu, ls.loss, ls.delay_s) == (1500, 0.01, pytest.approx(0.002))
    assert ls.marking.k == Size(10, "packets")
    # TCP payload ceiling: MSS = MTU - 52 per frame of MTU + 14
    assert ls.payload_rate_bps == pytest.approx(50e6 * 1448 / 1514)
    assert LinkSpec().payload_rate_bps == pytest.approx(100e6 * 8948 / 9014)


def test_link_base_is_inherited() -> None:
    base = LinkSpec.from_dict({"rate": "10Mbit", "buffer": "50KB", "ecn": {"mode": "step", "k": "20KB"}}, HL)
    child = LinkSpec.from_dict({"rate": "20Mbit"}, "fabric.fabric_link", base=base)
    assert (child.rate_bps, child.buffer, child.marking) == (20_000_000, Size(51_200), base.marking)


def test_link_max_rate_accepted() -> None:
    assert LinkSpec.from_dict({"rate": f"{MAX_RATE_BPS}bit"}, HL).rate_bps == MAX_RATE_BPS
    assert LinkSpec.from_dict({"rate": "100kbit"}, HL).rate_bps == 100_000


def test_link_buffer_exactly_one_frame() -> None:
    assert LinkSpec.from_dict({"buffer": 9014}, HL).buffer_bytes == 9014
    assert LinkSpec.from_dict({"buffer": "1pkt"}, HL).buffer_bytes == 9014
    assert LinkSpec.from_dict({"buffer": "10pkt", "ecn": {"mode": "step", "k": "10pkt"}}, HL).marking.k == Size(
        10, "packets"
    )


@pytest.mark.parametrize(
    ("data", "path", "reason"),
    [
        ({"rtae": "10Mbit"}, f"{HL}.rtae", "unknown key (allowed: buffer, classes, delay, ecn, loss, mtu, rate)"),
        ({"rate": "-100Mbit"}, f"{HL}.rate", "must be positive"),
        ({"rate": -5}, f"{HL}.rate", "must be positive"),
        ({"rate": 0}, f"{HL}.rate", "must be positive"),
        ({"rate": "0Mbit"}, f"{HL}.rate", "must be positive"),
        ({"rate": "99kbit"}, f"{HL}.rate", "below 100000 bit/s"),
        ({"rate": "1.5Gbit"}, f"{HL}.rate", "can emulate faithfully"),
        ({"rate": "10Gbit"}, f"{HL}.rate", "above the 1000 Mbit/s"),
        ({"rate": "100Mfoo"}, f"{HL}.rate", "unknown rate unit"),
        ({"buffer": "1KB"}, f"{HL}.buffer", "smaller than one frame (9014 bytes at MTU 9000)"),
        ({"buffer": 9013}, f"{HL}.buffer", "smaller than one frame"),
        ({"buffer": "1000", "mtu": 1500}, f"{HL}.buffer", "smaller than one frame (1514 bytes at MTU 1500)"),
        ({"buffer": 0}, f"{HL}.buffer", "must be positive"),
        ({"mtu": 500}, f"{HL}.mtu", "must be in [576, 9000]"),
        ({"mtu": 9001}, f"{HL}.mtu", "must be in [576, 9000]"),
        ({"mtu": "1500"}, f"{HL}.mtu", "expected an integer"),
        ({"loss": 0.6}, f"{HL}.loss", "must be in [0.0, 0.5]"),
        ({"loss": -0.01}, f"{HL}.loss", "must be in"),
        ({"delay": "-1ms"}, f"{HL}.delay", "must not be negative"),
        ({"delay": "1h"}, f"{HL}.delay", "unknown time unit"),
        ({"delay": 40}, f"{HL}.delay", "tc reads 40 as 40 microseconds, a duration here as 40 s; write the unit"),
        ({"delay": "2.5"}, f"{HL}.delay", "tc reads '2.5' as 2.5 microseconds"),
        ({"buffer": "100KB", "ecn": {"mode": "step", "k": "200KB"}}, f"{HL}.ecn.k", "above the buffer (102400 bytes)"),
        (
            {"buffer": "100KB", "ecn": {"mode": "ramp", "kmin": "20KB", "kmax": "101KB", "pmax": 0.1}},
            f"{HL}.ecn.kmax",
            "above the buffer",
        ),
        ({"buffer": "10pkt", "ecn": {"mode": "step", "k": "11pkt"}}, f"{HL}.ecn.k", "above the buffer (90140 bytes)"),
        ({"ecn": {"mode": "step"}}, f"{HL}.ecn.k", "required key is missing"),
        ([("rate", 1)], HL, "expected a mapping"),
    ],
)
def test_link_rejections(data: Any, path: str, reason: str) -> None:
    rejects(lambda: LinkSpec.from_dict(data, HL), path, reason)


def test_a_bare_delay_is_refused_wherever_a_link_takes_one_and_other_durations_stay_seconds() -> None:
    """tc reads a bare time as microseconds: a link's delay (netem) must carry its unit, in host_link, fabric_link,
    an override and a scaled fabric; a bare 0 is the same in both readings. A job's or the run's duration is not
    tc's: a bare number stays seconds there."""
    rejects(lambda: FabricSpec.from_dict({"fabric_link": {"delay": 1}}), "fabric.fabric_link.delay", "bare number")
    override = {"overrides": [{"link": "l1-l1h1", "delay": 5}]}
    rejects(lambda: FabricSpec.from_dict(override), "fabric.overrides[0].delay", "tc reads 5 as 5 microseconds")
    scaled = {"name": "x", "fabric": {"scale": 10, "host_link": {"rate": "1Gbit", "delay": 4}}}
    with pytest.raises(SpecError, match="tc reads 4 as 4 microseconds") as err:
        build_scenario(scaled)
    assert err.value.path.endswith("host_link.delay")
    assert LinkSpec.from_dict({"delay": 0}, HL).delay_s == 0.0
    assert LinkSpec.from_dict({"delay": "40ms"}, HL).delay_s == pytest.approx(0.04)
    job = {"kind": "iperf", "name": "a", "src": "l1h1", "dst": "l2h1", "duration": 3, "start_after": 2}
    scenario = build_scenario({"name": "x", "fabric": {}, "duration": 10, "workload": [job]})
    assert (scenario.duration_s, scenario.workload[0].duration, scenario.workload[0].start_after) == (10, 3, 2)


def test_max_rate_message_points_at_no_missing_key() -> None:
    # regression: the message used to advise a `fabric.scale` key that the fabric spec rejects as unknown
    exc = rejects(lambda: LinkSpec.from_dict({"rate": "2Gbit"}, HL), f"{HL}.rate", "faithfully")
    assert "fabric.scale" not in str(exc)


# ---------------------------------------------------------------------------------------------------------------
# ECMP and transport


def test_ecmp() -> None:
    assert EcmpSpec.from_dict({}, "fabric.ecmp") == EcmpSpec("l4", None)
    l3 = EcmpSpec.from_dict({"hash": "l3", "seed": 0}, "fabric.ecmp")
    assert (l3.hash, l3.seed, l3.hash_fields) == ("l3", 0, 0x0003)
    assert EcmpSpec.from_dict({"hash": "l4", "seed": 2**32 - 1}, "fabric.ecmp").hash_fields == 0x0037


@pytest.mark.parametrize(
    ("data", "path", "reason"),
    [
        ({"hash": "l5"}, "fabric.ecmp.hash", "must be one of l3, l4"),
        ({"sed": 7}, "fabric.ecmp.sed", "unknown key (allowed: gap, hash, mode, pick, seed)"),
        ({"mode": "hedera"}, "fabric.ecmp.mode", "must be one of static, spray, flowlet, adaptive, got 'hedera'"),
        ({"pick": "random"}, "fabric.ecmp.pick", "static mode picks its own next hop"),
        ({"mode": "adaptive", "pick": "random"}, "fabric.ecmp.pick", "adaptive mode picks its own next hop"),
        ({"mode": "spray", "gap": "1ms"}, "fabric.ecmp.gap", "only flowlet and adaptive modes have an idle gap"),
        ({"mode": "flowlet", "gap": "1us"}, "fabric.ecmp.gap", "must be 0 (per packet) or within 10us and 10s"),
        ({"mode": "flowlet", "gap": "soon"}, "fabric.ecmp.gap", ""),
        ({"mode": "spray", "pick": "least-loaded"}, "fabric.ecmp.pick", "must be one of round-robin, random"),
        ({"seed": -1}, "fabric.ecmp.seed", "must be in [0, 4294967295]"),
        ({"seed": 2**32}, "fabric.ecmp.seed", "must be in"),
        ({"seed": "7"}, "fabric.ecmp.seed", "expected an integer"),
        ({"seed": True}, "fabric.ecmp.seed", "expected an integer"),
    ],
)
def test_ecmp_rejections(data: Any, path: str, reason: str) -> None:
    rejects(lambda: EcmpSpec.from_dict(data, "fabric.ecmp"), path, reason)


def test_transport() -> None:
    assert TransportSpec.from_dict({}, "fabric.transport") == TransportSpec("cubic", True, 1)
    t = TransportSpec.from_dict({"cc": "dctcp", "ecn": True, "gso_max_segs": 64}, "fabric.transport")
    assert (t.cc, t.ecn, t.gso_max_segs) == ("dctcp", True, 64)
    assert TransportSpec.from_dict({"cc": "reno", "ecn": False}, "fabric.transport").ecn is False


@pytest.mark.parametrize(
    ("data", "path", "reason"),
    [
        ({"cc": "vegas"}, "fabric.transport.cc", "must be one of reno, cubic, bbr, dctcp"),
        ({"ecn": "yes"}, "fabric.transport.ecn", "expected true or false"),
        ({"ecn": 1}, "fabric.transport.ecn", "expected true or false"),
        ({"gso_max_segs": 0}, "fabric.transport.gso_max_segs", "must be in [1, 65535]"),
        ({"gso_max_segs": True}, "fabric.transport.gso_max_segs", "expected an integer"),
        ({"cc": "dctcp", "ecn": False}, "fabric.transport.ecn", "DCTCP needs ECN"),
        ({"congestion": "cubic"}, "fabric.transport.congestion", "unknown key"),
        (None, "fabric.transport", "expected a mapping"),
    ],
)
def test_transport_rejections(data: Any, path: str, reason: str) -> None:
    rejects(lambda: TransportSpec.from_dict(data, "fabric.transport"), path, reason)


# ---------------------------------------------------------------------------------------------------------------
# FabricSpec


def test_fabric_defaults() -> None:
    f = FabricSpec.from_dict({})
    assert (f.topology, f.spines, f.leaves, f.hosts_per_leaf) == ("spine-leaf", 2, 4, 2)
    assert f.fabric_link == f.host_link  # fabric_link inherits host_link
    assert f.oversubscription == 1
    assert f.mtu == 9000


def test_fabric_link_inherits_host_link() -> None:
    f = FabricSpec.from_dict(
        {"host_link": {"rate": "10Mbit", "buffer": "64KB", "mtu": 1500}, "fabric_link": {"rate": "20Mbit"}}
    )
    assert (f.fabric_link.rate_bps, f.fabric_link.buffer, f.fabric_link.mtu) == (20_000_000, Size(65_536), 1500)
    assert f.oversubscription == Fraction(2 * 10, 2 * 20)


def test_oversubscription_derives_uplink_rate() -> None:
    f = FabricSpec.from_dict(
        {"spines": 2, "hosts_per_leaf": 3, "host_link": {"rate": "60Mbit"}, "oversubscription": "3:1"}
    )
    assert f.fabric_link.rate_bps == 30_000_000  # 3 x 60 / (2 x 3)
    assert f.oversubscription == 3
    # a consistent explicit rate is accepted (within 1 %)
    g = FabricSpec.from_dict(
        {
            "spines": 2,
            "hosts_per_leaf": 2,
            "host_link": {"rate": "100Mbit"},
            "oversubscription": 2,
            "fabric_link": {"rate": "50Mbit"},
        }
    )
    assert g.fabric_link.rate_bps == 50_000_000
    h = FabricSpec.from_dict({"oversubscription": 1.5})  # 2 x 100 Mbit / (2 x 1.5), rounded to a whole bit/s
    assert h.fabric_link.rate_bps == 66_666_667
    assert float(h.oversubscription) == pytest.approx(1.5)


@pytest.mark.parametrize(
    ("value", "ratio"),
    [
        ("3:1", Fraction(3)),
        ("1.5:1", Fraction(3, 2)),
        (" 4 : 2 ", Fraction(2)),
        (1, Fraction(1)),
        (2.5, Fraction(5, 2)),
    ],
)
def test_parse_ratio(value: Any, ratio: Fraction) -> None:
    assert parse_ratio(value, "fabric.oversubscription") == ratio


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("1:2", "below 1:1"),
        (0.5, "below 1:1"),
        ("3:0", "must not be 0"),
        ("three to one", "not a ratio"),
        (True, "not a ratio"),
        ("3/1", "not a ratio"),
        ("-3:1", "not a ratio"),
    ],
)
def test_bad_oversubscription_ratio(value: Any, reason: str) -> None:
    rejects(lambda: FabricSpec.from_dict({"oversubscription": value}), "fabric.oversubscription", reason)


def test_oversubscription_inconsistent_with_fabric_rate() -> None:
    exc = rejects(
        lambda: FabricSpec.from_dict(
            {"oversubscription": "2:1", "host_link": {"rate": "100Mbit"}, "fabric_link": {"rate": "100Mbit"}}
        ),
        "fabric.oversubscription",
        "needs uplinks of 50000000 bit/s, but fabric_link.rate is 100000000 bit/s",
    )
    assert "give one of the two" in exc.reason


def test_oversubscription_derived_rate_is_validated() -> None:
    rejects(
        lambda: FabricSpec.from_dict({"oversubscription": 2000, "host_link": {"rate": "100Mbit"}}),
        "fabric.fabric_link.rate",
        "below 100000 bit/s",
    )


@pytest.mark.parametrize(
    ("data", "path", "reason"),
    [
        ({"spinez": 2}, "fabric.spinez", "unknown key"),
        ({"topology": "torus"}, "fabric.topology", "must be spine-leaf or fat-tree"),
        ({"spines": 0}, "fabric.spines", "must be in [1, 64]"),
        ({"spines": 65}, "fabric.spines", "must be in [1, 64]"),
        ({"leaves": 0}, "fabric.leaves", "must be in [1, 254]"),
        ({"leaves": 255}, "fabric.leaves", "must be in [1, 254]"),
        ({"hosts_per_leaf": -1}, "fabric.hosts_per_leaf", "must be in [1, 254]"),
        ({"spines": "2"}, "fabric.spines", "expected an integer"),
        ({"k": 4}, "fabric.k", "only meaningful for topology fat-tree"),
        ({"topology": "fat-tree", "k": 3}, "fabric.k", "needs an even k, got 3"),
        ({"topology": "fat-tree", "k": 5}, "fabric.k", "even k"),
        ({"topology": "fat-tree", "k": 18}, "fabric.k", "must be in [2, 16]"),
        ({"topology": "fat-tree", "spines": 2}, "fabric.spines", "only meaningful for topology spine-leaf"),
        (
            {"topology": "fat-tree", "oversubscription": "2:1"},
            "fabric.oversubscription",
            "non-blocking by construction",
        ),
        ({"fabric_link": {"mtu": 1500}}, "fabric.fabric_link.mtu", "share one MTU (host_link has 9000)"),
        ({"host_link": {"mtu": 1500}, "fabric_link": {"mtu": 9000}}, "fabric.fabric_link.mtu", "host_link has 1500"),
        ({"fabric_link": {"rate": "-1Mbit"}}, "fabric.fabric_link.rate", "must be positive"),
        ({"fabric_link": {"bogus": 1}}, "fabric.fabric_link.bogus", "unknown key"),
        ({"host_link": {"rate": "-100Mbit"}}, "fabric.host_link.rate", "must be positive"),
        ({"host_link": None}, "fabric.host_link", "expected a mapping"),
        ({"fabric_link": [1, 2]}, "fabric.fabric_link", "expected a mapping"),
        ({"fabric_link": "fast"}, "fabric.fabric_link", "expected a mapping"),
        ({"ecmp": {"hash": "l7"}}, "fabric.ecmp.hash", "must be one of"),
        ({"transport": {"cc": "vegas"}}, "fabric.transport.cc", "must be one of"),
        ({"overrides": [{"port": "l1->l1h1", "mtu": 1500}]}, "fabric.overrides[0].mtu", "share one MTU"),
        ({"overrides": [{"port": "l1->l1h1", "rate": "-5Mbit"}]}, "fabric.overrides[0].rate", "must be positive"),
        (
            {"overrides": [{"port": "l1->l1h1", "buffer": "10B"}]},
            "fabric.overrides[0].buffer",
            "smaller than one frame",
        ),
        ({"overrides": [{"port": "l1->l1h1", "colour": "red"}]}, "fabric.overrides[0].colour", "unknown key"),
        ({"overrides": [{"port": "l1->l1h1"}]}, "fabric.overrides[0]", "must set at least one of"),
        ({"overrides": [{"rate": "5Mbit"}]}, "fabric.overrides[0]", "exactly one of port"),
        (
            {"overrides": [{"port": "l1->l1h1", "link": "l1-s1", "rate": "5Mbit"}]},
            "fabric.overrides[0]",
            "exactly one of",
        ),
        ({"overrides": [{"port": "l1 to l1h1", "rate": "5Mbit"}]}, "fabric.overrides[0].port", "is not 'node->peer'"),
        ({"overrides": [{"link": "l1->s1", "rate": "5Mbit"}]}, "fabric.overrides[0].link", "is not 'node-peer'"),
        (
            {"overrides": [{"port": "l1->l1h1", "rate": "5Mbit"}, {"port": "l1->s1", "ecn": {"mode": "step"}}]},
            "fabric.overrides[1].ecn.k",
            "required key is missing",
        ),
        ("spine-leaf", "fabric", "expected a mapping"),
    ],
)
def test_fabric_rejections(data: Any, path: str, reason: str) -> None:
    rejects(lambda: FabricSpec.from_dict(data), path, reason)


def test_override_naming_a_missing_link() -> None:
    spec = FabricSpec.from_dict(
        {"overrides": [{"port": "l1->l1h1", "rate": "5Mbit"}, {"port": "l9->l9h1", "rate": "5Mbit"}]}
    )
    exc = rejects(lambda: Topology(spec), "fabric.overrides[1]", "'l9->l9h1' names no link of this fabric")
    assert "l1->l1h1" in exc.reason  # shows what ports look like
    rejects(
        lambda: Topology(FabricSpec.from_dict({"overrides": [{"link": "l1-l2", "rate": "5Mbit"}]})),
        "fabric.overrides[0]",
        "names no link",
    )
    # fat-tree names are not spine-leaf names
    rejects(
        lambda: Topology(
            FabricSpec.from_dict({"topology": "fat-tree", "overrides": [{"port": "l1->s1", "rate": "5Mbit"}]})
        ),
        "fabric.overrides[0]",
        "names no link",
    )


def test_override_threshold_checked_against_the_port_it_lands_on() -> None:
    # valid against host_link (300KB) but not against the fabric port's 50KB buffer
    spec = FabricSpec.from_dict(
        {"fabric_link": {"buffer": "50KB"}, "overrides": [{"port": "s1->l1", "ecn": {"mode": "step", "k": "100KB"}}]}
    )
    with pytest.raises(SpecError, match=r"ecn\.k: threshold 102400 bytes is above the buffer \(51200 bytes\)"):
        Topology(spec)


def test_overrides_apply_in_order_and_per_direction() -> None:
    spec = FabricSpec.from_dict(
        {
            "overrides": [
                {"link": "l2-s1", "rate": "50Mbit"},
                {"port": "s1->l2", "rate": "20Mbit", "buffer": "100KB"},
                {"port": "l1->l1h1", "ecn": {"mode": "step", "k": "30KB"}},
            ]
        }
    )
    topo = Topology(spec)
    port = {p.name: p for p in topo.ports()}
    assert port["l2->s1"].link.rate_bps == 50_000_000
    assert (port["s1->l2"].link.rate_bps, port["s1->l2"].link.buffer_bytes) == (20_000_000, 102_400)
    assert port["l2->s2"].link.rate_bps == 100_000_000
    assert port["l1->l1h1"].link.marking.describe() == "ECN K=30KB"
    assert port["l1h1->l1"].link.marking.mode == "off"
    assert spec.overrides[0].matches("s1", "l2") and spec.overrides[0].matches("l2", "s1")
    assert not spec.overrides[1].matches("l2", "s1")


@pytest.mark.parametrize("value", [{"port": "l1->l1h1", "rate": "5Mbit"}, "l1->l1h1"])
def test_overrides_must_be_a_list(value: Any) -> None:
    # regression: a mapping was iterated key by key ("overrides[0]: expected a mapping, got str 'port'")
    rejects(lambda: FabricSpec.from_dict({"overrides": value}), "fabric.overrides", "expected a list of overrides")
