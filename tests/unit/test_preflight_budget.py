"""The CPU cost model and budget: fitting calibrations, the cache, the prediction, the rate solve, the refusal.

No root and no system changes: calibrations are synthetic and the cache lives in tmp_path.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pytest

from testbed.calibrate import cache as cal_cache
from testbed.calibrate import fit as cal_fit
from testbed.calibrate import model as cal_model
from testbed.calibrate import record as cal_record
from testbed.calibrate.model import FALLBACK, CostModel
from testbed.calibrate.record import Calibration, ForwardingSample, Machine, SamplerSample
from testbed.errors import TestbedError
from testbed.host.capabilities import Capabilities
from testbed.plan import budget
from testbed.plan import budget as pf_budget
from testbed.plan import load as pf_load
from testbed.plan import model as pf_model
from testbed.plan import timeline as pf_timeline
from testbed.plan.budget import BudgetError
from testbed.plan.flows import flow_paths
from testbed.spec.fabric import FabricSpec
from testbed.spec.scenario import TelemetrySpec, expand
from testbed.spec.workload import parse_workload

REPO = Path(__file__).resolve().parents[2]
MACHINE = Machine("6.18.0-test", 2, "Test CPU @ 1 GHz")
TWO_CPUS = Capabilities.from_dict({"cpus": 2})
A, B = 1.2e-5, 3.0e-10  # per crossing, per byte
TICK, NS, ROW = 4.0e-5, 2.0e-5, 1.5e-5


def fwd_sample(mtu: int, rate: float, crossings: int, nbytes: int, noise: float = 1.0) -> ForwardingSample:
    cost = (A * crossings + B * nbytes) * noise
    return ForwardingSample(mtu, rate, 3.0, cost + 0.5, 0.2, 0.05, 0.25, crossings, nbytes, crossings // 3)


def samp_sample(ns: int, ticks: float, rows: int, traffic: bool = False) -> SamplerSample:
    return SamplerSample(ns, ticks, rows, ticks * (TICK + ns * NS) + rows * ROW, ticks / 1000, traffic)


def synthetic() -> Calibration:
    fwd = [
        fwd_sample(9000, 50e6, 80_000, 480_000_000),
        fwd_sample(9000, 100e6, 160_000, 960_000_000),
        fwd_sample(1500, 8e6, 60_000, 61_000_000),
        fwd_sample(1500, 15e6, 120_000, 122_000_000),
    ]
    samp = [samp_sample(14, 3000, 2000), samp_sample(4, 3000, 1000), samp_sample(14, 3000, 70_000, True)]
    return cal_fit.calibration_from(fwd, samp, MACHINE, "2026-12-01T12:00:00+00:00", "abc123")


# --- fitting -------------------------------------------------------------------------------------------------------
def test_fit_recovers_the_coefficients_of_synthetic_measurements() -> None:
    cal = synthetic()
    assert cal.per_crossing_s == pytest.approx(A, rel=1e-6)
    assert cal.per_byte_s == pytest.approx(B, rel=1e-6)
    assert (cal.sampler_per_tick_s, cal.sampler_per_netns_s, cal.sampler_per_row_s) == pytest.approx(
        (TICK, NS, ROW), rel=1e-6
    )
    assert cal.model.calibrated and "2026-12-01" in cal.model.source


def test_fit_subtracts_others_baseline_and_sampler() -> None:
    s = fwd_sample(9000, 50e6, 80_000, 480_000_000)
    assert s.forwarding_core_s == pytest.approx(A * 80_000 + B * 480_000_000)
    assert s.veths_per_packet == pytest.approx(3.0, rel=1e-4)


def test_fit_with_noise_stays_close_and_never_negative() -> None:
    fwd = [
        fwd_sample(9000, 50e6, 80_000, 480_000_000, 1.05),
        fwd_sample(9000, 100e6, 160_000, 960_000_000, 0.97),
        fwd_sample(1500, 8e6, 60_000, 61_000_000, 1.03),
        fwd_sample(1500, 15e6, 120_000, 122_000_000, 0.98),
    ]
    a, b = cal_fit.fit_forwarding(fwd)
    assert a == pytest.approx(A, rel=0.1) and b >= 0
    # per-byte cost that the data contradict (jumbo frames cheaper per crossing) is dropped, not made negative
    odd = [
        fwd_sample(9000, 100e6, 100_000, 600_000_000),
        dataclasses.replace(fwd_sample(1500, 15e6, 100_000, 100_000_000)),
    ]
    odd[1] = dataclasses.replace(odd[1], busy_core_s=odd[1].busy_core_s + 0.8)
    a, b = cal_fit.fit_forwarding(odd)
    assert b == 0.0 and a > 0


def test_fit_refuses_no_data() -> None:
    with pytest.raises(cal_record.CalibrationError, match="no traffic window"):
        cal_fit.fit_forwarding([])
    with pytest.raises(cal_record.CalibrationError, match="no sampler window"):
        cal_fit.fit_sampler([])


# --- the cache -----------------------------------------------------------------------------------------------------
def test_cache_round_trip_and_machine_match(tmp_path: Path) -> None:
    cal = synthetic()
    path = tmp_path / "sub" / "calibration.json"
    cal_cache.save(cal, path)
    data = json.loads(path.read_text())
    assert data["format"] == cal_record.FORMAT and data["machine"]["cpu_model"] == MACHINE.cpu_model
    assert data["forwarding"][0]["forwarding_core_s"] == pytest.approx(cal.forwarding[0].forwarding_core_s)
    assert cal_cache.load(path) == cal
    assert cal_cache.load_matching(path, MACHINE) == cal
    for other in (
        dataclasses.replace(MACHINE, kernel="6.1.0-28-amd64"),
        dataclasses.replace(MACHINE, cpus=4),
        dataclasses.replace(MACHINE, cpu_model="Other CPU"),
    ):
        assert cal_cache.load_matching(path, other) is None
        assert cal_cache.status(path, other)["status"] == "stale"
    assert cal_cache.status(path, MACHINE)["status"] == "calibrated"


def test_the_model_says_whether_it_is_this_machines_calibration_or_an_estimate_and_why(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    missing = cal_cache.current_model(path, MACHINE)
    assert missing == FALLBACK and not missing.calibrated and missing.source == cal_model.NOT_CALIBRATED
    cal_cache.save(synthetic(), path)
    assert cal_cache.current_model(path, MACHINE).calibrated
    stale = cal_cache.current_model(path, dataclasses.replace(MACHINE, kernel="6.1.0-28-amd64"))
    assert not stale.calibrated and stale.source == cal_model.STALE
    assert stale.per_crossing_s == FALLBACK.per_crossing_s  # the built-in constants, not the other machine's
    (hot,) = scenario("1Gbit", 1500).points
    with pytest.raises(BudgetError, match="cached calibration is of another kernel or CPU"):
        pf_budget.require_budget(hot, TWO_CPUS, stale, env={})


def test_cache_missing_or_broken_is_not_calibrated(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    assert cal_cache.load(path) is None and cal_cache.status(path, MACHINE)["status"] == "not calibrated"
    path.write_text("{not json")
    assert cal_cache.load(path) is None
    path.write_text(json.dumps({**synthetic().to_dict(), "format": 999}))
    assert cal_cache.load(path) is None


def test_doctor_row_shows_values_date_or_how_to_calibrate(tmp_path: Path) -> None:
    from testbed.machine import doctor_rows

    path = tmp_path / "calibration.json"
    rows = doctor_rows(Capabilities.from_dict({"calibration": cal_cache.status(path, MACHINE)}))
    assert rows[-1] == ("CPU cost calibration", *cal_cache.describe_status({"status": "not calibrated"}))
    assert rows[-1][1] == "not calibrated: run testbed calibrate"
    cal_cache.save(synthetic(), path)
    _, status, values, how = doctor_rows(Capabilities.from_dict({"calibration": cal_cache.status(path, MACHINE)}))[-1]
    assert status == "yes (2026-12-01, rev abc123)" and how == ""
    assert "12.00 us/packet/veth" in values and "0.300 ns/byte" in values and "20.0 us/namespace/tick" in values
    stale = doctor_rows(
        Capabilities.from_dict({"calibration": cal_cache.status(path, dataclasses.replace(MACHINE, cpus=8))})
    )[-1]
    assert stale[1] == "STALE" and "testbed calibrate" in stale[3]


def test_cpu_model_from_cpuinfo() -> None:
    text = "processor\t: 0\nvendor_id\t: X\nmodel name\t: AMD  EPYC   7B13\nflags\t: fpu\n"
    assert cal_record.cpu_model(text) == "AMD EPYC 7B13"
    assert cal_record.cpu_model("processor : 0\n") == "unknown CPU"


# --- the prediction ------------------------------------------------------------------------------------------------
def spec(rate: str = "100Mbit", mtu: int = 9000, **kw: Any) -> FabricSpec:
    return FabricSpec.from_dict(
        {"spines": 2, "leaves": 4, "hosts_per_leaf": 2, "host_link": {"rate": rate, "mtu": mtu}, **kw}
    )


def ring(s: FabricSpec) -> tuple[Any, ...]:
    from testbed.spec.topology import Topology

    hosts = list(Topology(s).hosts)
    return parse_workload(
        [{"kind": "iperf", "name": f"f{i}", "src": h, "dst": hosts[(i + 1) % len(hosts)]} for i, h in enumerate(hosts)]
    )


def test_forwarding_is_crossings_times_per_packet_cost() -> None:
    s = spec()
    model = CostModel(1e-5, 0.0, 0.0, 0.0, 0.0)
    e = pf_load.estimate(s, ring(s), TWO_CPUS, model)
    # 8 flows at 100 Mbit/s, 1387 frames/s each plus half as many ACKs, 4 flows over 2 veths and 4 over 4
    data = 100e6 / (8 * 9014)
    assert e.crossings_per_s == pytest.approx(8 * data * 1.5 * 3)
    assert e.load == pytest.approx(e.crossings_per_s * 1e-5 / 2)
    assert e.sampler_load == 0.0 and e.total == e.load  # no telemetry: no sampler term


def test_sampler_term_grows_with_namespaces_and_rate() -> None:
    model = CostModel(0.0, 0.0, 5e-5, 2e-5, 0.0)
    small = FabricSpec.from_dict({"spines": 1, "leaves": 2, "hosts_per_leaf": 1})  # 5 namespaces
    idle = parse_workload([])
    e = pf_load.estimate(small, idle, TWO_CPUS, model, TelemetrySpec(queue_hz=1000))
    assert e.namespaces == 5 and e.sampler_load == pytest.approx(1000 * (5e-5 + 5 * 2e-5) / 2)
    half = pf_load.estimate(small, idle, TWO_CPUS, model, TelemetrySpec(queue_hz=500))
    assert half.sampler_load == pytest.approx(e.sampler_load / 2)
    assert pf_load.estimate(small, idle, TWO_CPUS, model, TelemetrySpec(queue_hz=0)).sampler_load == 0.0


def test_sampler_rows_saturate_at_one_per_port_per_tick() -> None:
    from testbed.spec.topology import Topology

    s = spec("1Gbit")
    paths = flow_paths(s, Topology(s), ring(s))
    ports = len(Topology(s).ports())
    rows = pf_model.sampler_rows_per_s(paths, s.host_link.rate_bps, 1500, ports, 100, 10)
    assert rows == pytest.approx(ports * 100 + ports * 10)
    idle = pf_model.sampler_rows_per_s([], 1e8, 9000, ports, 1000, 100)
    assert idle == pytest.approx(2 * ports / pf_model.KEYFRAME_S)


def test_the_load_is_the_mean_over_the_known_timeline_and_the_peak_its_busiest_interval() -> None:
    s = spec()
    jobs = parse_workload(
        [
            {"kind": "iperf", "name": "a", "src": "l1h1", "dst": "l2h1", "duration": 5},
            {"kind": "iperf", "name": "b", "src": "l1h2", "dst": "l2h2", "duration": 5, "start_after": "6s"},
            {"kind": "iperf", "name": "c", "src": "l3h1", "dst": "l4h1", "duration": 5, "start_after": "3s"},
        ]
    )
    one = pf_load.estimate(s, jobs[:1], TWO_CPUS)
    e = pf_load.estimate(s, jobs, TWO_CPUS)
    assert [len(p) for p in pf_timeline.phases(jobs)] == [1, 2, 1, 2, 1]  # a, a+c, c, c+b, b: never all three
    assert e.flows == 2 and e.peak_load == pytest.approx(2 * one.load)
    # 0-3 s one flow, 3-5 two, 5-6 one, 6-8 two, 8-11 one: 15 flow-seconds in 11 s
    assert e.load == pytest.approx(one.load * 15 / 11)
    assert e.total == pytest.approx(e.load) and e.peak == pytest.approx(e.peak_load)  # no telemetry, no sampler


def test_an_open_ended_job_counts_at_least_its_own_load() -> None:
    s = spec()
    ring_job = {"kind": "allreduce", "name": "ar", "ranks": "all", "size": "4MB"}
    iperf = {"kind": "iperf", "name": "x", "src": "l1h1", "dst": "l4h2", "duration": 2}
    alone = pf_load.estimate(s, parse_workload([ring_job]), TWO_CPUS)
    both = pf_load.estimate(s, parse_workload([ring_job, iperf]), TWO_CPUS)
    late = pf_load.estimate(s, parse_workload([ring_job, {**iperf, "start_after": "30s"}]), TWO_CPUS)
    assert alone.flows == 8 and both.load >= alone.load and late.load >= alone.load
    assert both.peak >= both.total


# --- the budget, the rate solve, the refusal ----------------------------------------------------------------------
def scenario(rate: str = "100Mbit", mtu: int = 9000, queue_hz: float = 1000, sweep: Any = None) -> Any:
    s = spec(rate, mtu)
    from testbed.spec.topology import Topology

    hosts = list(Topology(s).hosts)
    data: dict[str, Any] = {
        "name": "hot",
        "fabric": {"spines": 2, "leaves": 4, "hosts_per_leaf": 2, "host_link": {"rate": rate, "mtu": mtu}},
        "workload": [
            {"kind": "iperf", "name": f"f{i}", "src": h, "dst": hosts[(i + 1) % len(hosts)]}
            for i, h in enumerate(hosts)
        ],
        "telemetry": {"queue_hz": queue_hz},
    }
    if sweep:
        data["sweep"] = sweep
    return expand(data)


LINEAR = CostModel(1.5e-5, 0.0, 5e-5, 2e-5, 0.0, calibrated=True, source="test")


def test_budget_default_and_override() -> None:
    assert pf_budget.cpu_budget({}) == pf_budget.CPU_BUDGET == 0.60
    assert pf_budget.cpu_budget({"TESTBED_CPU_BUDGET": "0.75"}) == 0.75
    assert pf_budget.cpu_budget({"TESTBED_CPU_BUDGET": "90%"}) == pytest.approx(0.9)
    for bad in ("lots", "0", "1.5", "-10%"):
        with pytest.raises(BudgetError, match="TESTBED_CPU_BUDGET"):
            pf_budget.cpu_budget({"TESTBED_CPU_BUDGET": bad})


def test_max_rate_solves_the_linear_model() -> None:
    (point,) = scenario("1Gbit", 1500, queue_hz=1000).points
    v = pf_budget.check_budget(point, TWO_CPUS, LINEAR, env={})
    assert not v.fits
    # load(r) = crossings(r) x a / cores + sampler; crossings(r) = r / (8 x 1514) x 1.5 x 3 x 8 flows
    per_bps = 1.5 * 3 * 8 / (8 * 1514) * 1.5e-5 / 2
    sampler = 1000 * (5e-5 + 14 * 2e-5) / 2
    exact = (0.60 - sampler) / per_bps
    assert v.max_rate_bps is not None and 0.95 * exact <= v.max_rate_bps <= exact
    assert v.max_rate_bps == budget._round_down(v.max_rate_bps)  # two significant digits
    at_max = pf_load.estimate(point.fabric, point.workload, TWO_CPUS, LINEAR, point.telemetry, v.max_rate_bps)
    assert at_max.total <= 0.60


def test_refusal_is_one_line_naming_point_load_budget_and_rate() -> None:
    sf = scenario("1Gbit", 1500, sweep={"fabric.host_link.buffer": ["100KB", "300KB"]})
    with pytest.raises(BudgetError) as err:
        pf_budget.require_budget(sf.points[1], TWO_CPUS, LINEAR, env={})
    msg = str(err.value)
    assert isinstance(err.value, TestbedError) and "\n" not in msg
    assert msg.startswith("scenario 'hot' point [buffer=300KB]: predicted CPU load ")
    assert "of 2 cores" in msg and "over the budget of 60%" in msg
    assert "the highest host-link rate that fits is " in msg and "(now 1 Gbit/s" in msg and "Mbit/s" in msg
    assert "(this machine's calibration;" in msg and "TESTBED_CPU_BUDGET" in msg
    # a point that fits passes and returns its verdict; an expert may raise the budget
    (ok,) = scenario("10Mbit").points
    assert pf_budget.require_budget(ok, TWO_CPUS, LINEAR, env={}).fits
    (warm,) = scenario("130Mbit").points  # about 65%
    with pytest.raises(BudgetError):
        pf_budget.require_budget(warm, TWO_CPUS, LINEAR, env={})
    assert pf_budget.require_budget(warm, TWO_CPUS, LINEAR, env={"TESTBED_CPU_BUDGET": "75%"}).fits


def test_refusal_when_only_the_sampler_is_too_much() -> None:
    (point,) = scenario("10Mbit", queue_hz=20000).points
    heavy = CostModel(1e-5, 0.0, 1e-4, 5e-5, 0.0, calibrated=True)
    with pytest.raises(
        BudgetError, match=r"no host-link rate fits: the queue sampler alone needs .*telemetry\.queue_hz"
    ):
        pf_budget.require_budget(point, TWO_CPUS, heavy, env={})


def test_an_uncalibrated_estimate_says_so_and_can_be_made_a_warning(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    (hot,) = scenario("1Gbit", 1500).points
    with pytest.raises(
        BudgetError, match=r"\(built-in estimate: this machine is not calibrated, run `sudo testbed calibrate`;"
    ):
        pf_budget.require_budget(hot, TWO_CPUS, FALLBACK, env={})
    monkeypatch.setattr(budget, "ENFORCE_UNCALIBRATED", False)
    v = pf_budget.require_budget(hot, TWO_CPUS, FALLBACK, env={})
    assert not v.fits and not v.enforced
    (record,) = [r for r in caplog.records if r.name == "testbed.preflight"]
    assert record.levelname == "WARNING"
    assert "built-in estimate: this machine is not calibrated, run `sudo testbed calibrate`, not enforced" in (
        record.getMessage()
    )


def test_a_busiest_interval_that_saturates_is_refused_even_when_the_mean_fits() -> None:
    hosts = [f"l{j}h{k}" for j in range(1, 5) for k in (1, 2)]
    flows = [
        {"kind": "iperf", "name": f"f{i}", "src": h, "dst": hosts[(i + 1) % 8], "duration": 2}
        for i, h in enumerate(hosts)
    ]
    idle = {
        "kind": "iperf",
        "name": "late",
        "src": "l1h1",
        "dst": "l1h2",
        "duration": 60,
        "start_after": "2s",
        "rate": "1Mbit",
    }
    sf = expand(
        {
            "name": "burst",
            "fabric": {"spines": 2, "leaves": 4, "hosts_per_leaf": 2, "host_link": {"rate": "1Gbit", "mtu": 9000}},
            "workload": [*flows, idle],
            "telemetry": {"queue_hz": 100},
        }
    )
    (point,) = sf.points
    v = pf_budget.check_budget(point, TWO_CPUS, LINEAR, env={})
    assert v.estimate.total <= 0.60 < pf_budget.PEAK_LIMIT < v.estimate.peak and not v.fits
    assert "its busiest interval is over 90% (both cores saturated)" in v.message()
    assert v.max_rate_bps is not None and v.max_rate_bps < 1e9


def test_jumbo_frames_are_suggested_when_they_fit() -> None:
    (point,) = scenario("100Mbit", 1500, queue_hz=100).points
    v = pf_budget.check_budget(point, TWO_CPUS, LINEAR, env={})
    assert not v.fits and v.mtu9000_fits and "host_link.mtu: 9000 fits" in v.message()


def test_manifest_entry_records_estimate_budget_and_model() -> None:
    (point,) = scenario("100Mbit").points
    entry = pf_budget.manifest_entry(point.fabric, point.workload, TWO_CPUS, point.telemetry, LINEAR, env={})
    assert set(entry) == {"warnings", "estimate", "budget", "fits", "enforced", "model"}
    assert entry["fits"] is True and entry["enforced"] is True
    assert entry["budget"] == 0.60 and entry["model"]["calibrated"] is True and entry["model"]["source"] == "test"
    assert entry["estimate"]["sampler_load"] > 0 and entry["estimate"]["total_load"] == pytest.approx(
        entry["estimate"]["forwarding_load"] + entry["estimate"]["sampler_load"], abs=1e-3
    )
    rec = pf_budget.manifest_entry(point.fabric, point.workload, TWO_CPUS)
    assert isinstance(rec["warnings"], list) and "sampler" in rec["estimate"]  # no telemetry given: said so
    assert rec["fits"] is None
    full = pf_budget.manifest_entry(point.fabric, point.workload, TWO_CPUS, point.telemetry)
    assert full["estimate"]["sampler_load"] > 0 and "sampler" not in full["estimate"]
    json.dumps(rec)  # plain data for the manifest


# The calibration `testbed calibrate` measured on a development machine (Linux 6.18, 2 x AMD EPYC, 2026-12-01).
DEV_MACHINE = CostModel(1.0e-5, 0.0, 1.0e-4, 1.7e-5, 1.5e-5, calibrated=True, source="dev machine")


@pytest.mark.parametrize("model", [DEV_MACHINE, FALLBACK], ids=["dev-machine", "uncalibrated"])
def test_no_shipped_native_scenario_is_refused(model: CostModel) -> None:
    """What the project ships runs on the development machines, calibrated or not (CI machines are fresh)."""
    from testbed.spec.scenario import load_scenario_file

    refused = []
    for path in sorted((REPO / "scenarios").glob("*.yaml")):
        for point in load_scenario_file(path).points:
            if point.kernel != "native":
                continue
            try:
                pf_budget.require_budget(point, TWO_CPUS, model, env={})
            except BudgetError as exc:
                refused.append(str(exc))
    assert not refused, refused


def test_round_down_keeps_two_significant_digits() -> None:
    assert budget._round_down(123_456_789) == 120_000_000
    assert budget._round_down(9.99e6) == 9.9e6
    assert budget._round_down(0) == 0.0
    assert math.isclose(budget._round_down(1e6), 1e6)


def test_the_kernel_telemetry_is_charged_per_packet_per_queue() -> None:
    """bpf_queues adds its programs' and reader's cost (bench.qtelem_cost) to the telemetry's share."""
    from testbed.spec.scenario import load_scenario

    point = load_scenario(Path(__file__).resolve().parents[2] / "scenarios" / "default.yaml")
    tele = point.telemetry
    on = pf_load.estimate(point.fabric, point.workload, telemetry=dataclasses.replace(tele, bpf_queues=True))
    off = pf_load.estimate(point.fabric, point.workload, telemetry=dataclasses.replace(tele, bpf_queues=False))
    extra = (on.sampler_load - off.sampler_load) * on.cores
    assert on.crossings_per_s > 0
    assert extra == pytest.approx(on.crossings_per_s * pf_model.QTELEM_PER_CROSSING_S)
