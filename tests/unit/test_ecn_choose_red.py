"""testbed.ecn without root: RED translation, implementation choice, leaf qdisc arguments, marker config."""

from __future__ import annotations

import random
import struct

import pytest

from testbed.ecn import EcnError, choose_impl, leaf_qdisc_args, red_params
from testbed.ecn.marker import config_bytes
from testbed.ecn.red import ewma_wlog, red_args, smallest_weight_burst
from testbed.host.capabilities import Capabilities
from testbed.spec.fields import SpecError
from testbed.spec.link import LinkSpec

RED_HERE = {"sch_red": True, "bpf_marker": False}
BPF_HERE = {"sch_red": False, "sch_red_reason": "no sch_red", "bpf_marker": True}
NOTHING = {"sch_red": False, "bpf_marker": False, "bpf_marker_reason": "marker not built"}


def caps(ecn: dict) -> Capabilities:
    """A capability record whose ECN probe found ``ecn``."""
    return Capabilities.from_dict({"ecn": ecn})


def link(ecn=None, **kw) -> LinkSpec:
    data = {"rate": "100Mbit", "buffer": "300KB", "mtu": 1500, **kw}
    if ecn is not None:
        data["ecn"] = ecn
    return LinkSpec.from_dict(data, "link")


STEP = {"mode": "step", "k": "30KB"}
RAMP = {"mode": "ramp", "kmin": "30KB", "kmax": "90KB", "pmax": 0.1}


def test_step_translation_is_as_instantaneous_as_tc_allows():
    p = red_params(link(STEP).marking, link(STEP))
    assert (p["min"], p["max"], p["limit"], p["avpkt"]) == (30_720, 30_721, 307_200, 1514)
    assert p["wlog"] == 1 and p["ewma_weight"] == 0.5
    assert ewma_wlog(p["min"], p["burst"], p["avpkt"]) == 1
    assert ewma_wlog(p["min"], p["burst"] - 1, p["avpkt"]) == -1  # the smallest burst tc accepts
    assert p["ecn"] and p["nodrop"] and not p["harddrop"] and p["bandwidth_bps"] == 100_000_000
    assert "W=1/2" in p["fidelity"]


def test_red_args_are_tc_syntax():
    lk = link(STEP)
    args = leaf_qdisc_args(lk.marking, lk, "kernel")
    assert args == [
        "red",
        "limit",
        "307200",
        "min",
        "30720",
        "max",
        "30721",
        "avpkt",
        "1514",
        "burst",
        "21",
        "probability",
        "0.999",
        "bandwidth",
        "100000000bit",
        "ecn",
        "nodrop",
    ]
    assert red_args(red_params(lk.marking, lk)) == args


def test_ramp_probability_compensates_reds_count_spacing():
    lk = link(RAMP)
    p = red_params(lk.marking, lk)
    assert (p["min"], p["max"]) == (30_720, 92_160)
    assert p["probability"] == pytest.approx(0.1 / 1.9, rel=1e-4)
    # Linux red_mark_probability: mark when p_b * count >= U, U uniform, count reset after a mark.
    rng, marks, count, n = random.Random(1), 0, 0, 200_000
    u = rng.random()
    for _ in range(n):
        count += 1
        if p["probability"] * count >= u:
            marks, count, u = marks + 1, 0, rng.random()
    assert marks / n == pytest.approx(0.1, abs=0.003)


def test_jumbo_and_packet_thresholds():
    lk = link({"mode": "step", "k": "20pkt"}, buffer="100pkt", mtu=9000)
    p = red_params(lk.marking, lk)
    assert p["min"] == 20 * 9014 and p["limit"] == 100 * 9014 and p["avpkt"] == 9014 and p["wlog"] == 1
    assert leaf_qdisc_args(lk.marking, lk, "bpf") == ["pfifo", "limit", "100"]


def test_threshold_below_one_frame_lowers_avpkt():
    with pytest.raises(ValueError):
        smallest_weight_burst(1000, 1514)  # tc has no weight for min < avpkt
    lk = link({"mode": "step", "k": "1000B"})
    p = red_params(lk.marking, lk)
    assert p["avpkt"] == 1000 and p["wlog"] == 1 and "avpkt lowered" in p["fidelity"]


def test_off_has_no_red():
    with pytest.raises(ValueError):
        red_params(link().marking, link())


def test_leaf_is_fifo_for_droptail_and_bpf():
    assert leaf_qdisc_args(link().marking, link(), "kernel") == ["bfifo", "limit", "307200"]
    assert leaf_qdisc_args(link(STEP).marking, link(STEP), "bpf") == ["bfifo", "limit", "307200"]


def test_choose_auto():
    m = link(STEP).marking
    assert choose_impl(m, caps(RED_HERE)) == "kernel"
    assert choose_impl(m, caps(BPF_HERE)) == "bpf"
    # nested under the capability probe's "ecn" key
    assert choose_impl(m, Capabilities.from_dict({"ecn": BPF_HERE})) == "bpf"
    with pytest.raises(EcnError, match=r"no ECN marking.*sch_red is not in this kernel.*marker not built"):
        choose_impl(m, caps(NOTHING))


def test_choose_explicit_unavailable_says_why_and_how():
    with pytest.raises(EcnError, match=r"needs sch_red: no sch_red; use impl 'bpf'"):
        choose_impl(link({**STEP, "impl": "kernel"}).marking, caps(BPF_HERE))
    with pytest.raises(EcnError, match=r"marker not built.*testbed\.bpf\.build"):
        choose_impl(link({**STEP, "impl": "bpf"}).marking, caps(NOTHING))
    assert choose_impl(link({**STEP, "impl": "bpf"}).marking, caps({**RED_HERE, "bpf_marker": True})) == "bpf"


def test_choose_droptail_needs_nothing():
    assert choose_impl(link().marking, caps(NOTHING)) == "kernel"


def test_marker_config_layout():
    mode, low, high, pmax = struct.unpack("<IIII", config_bytes(link(RAMP).marking, link(RAMP)))
    assert (mode, low, high) == (2, 30_720, 92_160) and pmax == round(0.1 * 0xFFFFFFFF)
    mode, low, high, pmax = struct.unpack("<IIII", config_bytes(link(STEP).marking, link(STEP)))
    assert (mode, low, high, pmax) == (1, 30_720, 30_720, 0xFFFFFFFF)


@pytest.mark.parametrize(
    "ecn, key",
    [
        ({"mode": "step", "k": "400KB"}, "ecn.k"),
        ({"mode": "ramp", "kmin": "90KB", "kmax": "30KB", "pmax": 0.1}, "ecn.kmin"),
        ({"mode": "ramp", "kmin": "30KB", "kmax": "90KB", "pmax": 0}, "ecn.pmax"),
        ({"mode": "ramp", "kmin": "30KB", "kmax": "90KB", "pmax": 1.5}, "ecn.pmax"),
        ({"mode": "step", "k": "30KB", "impl": "ebpf"}, "ecn.impl"),
    ],
)
def test_impossible_settings_are_errors(ecn, key):
    with pytest.raises(SpecError) as exc:
        link(ecn)
    assert exc.value.path == f"link.{key}"
