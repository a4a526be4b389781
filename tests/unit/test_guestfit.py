"""The TCG guest's fit: fast links refused with the reason, sampler rates capped, nothing changed natively."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from results.fidelity import evaluate_run
from results.fidelity import guest_thresholds as thresholds
from results.record import RunRecord, load_run
from testbed.plan.guestfit import TCG_LINK_HZ, TCG_QUEUE_HZ, GuestFitError, check_fabric, fit_telemetry, under_tcg
from testbed.spec.fabric import FabricSpec
from testbed.spec.scenario import TelemetrySpec

TCG = {"TESTBED_GUEST": "1", "TESTBED_GUEST_ACCEL": "tcg"}
KVM = {"TESTBED_GUEST": "1", "TESTBED_GUEST_ACCEL": "kvm"}


def spec(rate: str, fabric_rate: str | None = None) -> FabricSpec:
    data = {"spines": 2, "leaves": 2, "hosts_per_leaf": 1, "host_link": {"rate": rate, "mtu": 9000}}
    if fabric_rate:
        data["fabric_link"] = {"rate": fabric_rate, "mtu": 9000}
    return FabricSpec.from_dict(data)


def test_only_a_tcg_guest_counts() -> None:
    assert under_tcg(TCG) and not under_tcg(KVM) and not under_tcg({}) and not under_tcg({"TESTBED_GUEST_ACCEL": "tcg"})


def test_fast_links_refused_under_tcg_with_the_limit_and_the_fix() -> None:
    check_fabric(spec("50Mbit"), TCG)
    with pytest.raises(GuestFitError, match=r"400 Mbit/s at MTU 9000 is above the 50.5 Mbit/s .*TCG.*factor >= 7.9\)"):
        check_fabric(spec("20Mbit", fabric_rate="400Mbit"), TCG)
    slow_1500 = FabricSpec.from_dict(
        {"spines": 1, "leaves": 2, "hosts_per_leaf": 1, "host_link": {"rate": "20Mbit", "mtu": 1500}}
    )
    with pytest.raises(GuestFitError, match=r"20 Mbit/s at MTU 1500 is above the 8.48 Mbit/s \(700 frames/s\)"):
        check_fabric(slow_1500, TCG)
    check_fabric(spec("400Mbit"), KVM)  # KVM and native: the normal guardrails only
    check_fabric(spec("400Mbit"), {})


def test_sampler_rates_capped_under_tcg_and_noted() -> None:
    tele, notes = fit_telemetry(TelemetrySpec(queue_hz=1000.0, link_hz=100.0), TCG)
    assert tele.queue_hz == TCG_QUEUE_HZ == 25.0 and tele.link_hz == TCG_LINK_HZ == 25.0 and tele.cpu_hz == 10.0
    assert notes is not None and notes["queue_hz"] == {"asked": 1000.0, "used": TCG_QUEUE_HZ} and "TCG" in notes["why"]
    low = TelemetrySpec(queue_hz=25.0, link_hz=20.0)
    assert fit_telemetry(low, TCG) == (low, None)
    native = TelemetrySpec()
    assert fit_telemetry(native, {}) == (native, None) and fit_telemetry(native, KVM) == (native, None)


def test_sampler_allowance_only_under_tcg() -> None:
    th = thresholds({"guest": TCG})["th"]
    assert th.sampler_gap_max_s == 0.25 and th.sampler_rate_min == 0.85 and th.rate_min == 0.95  # rate check unchanged
    assert thresholds({"guest": KVM}) == {} and thresholds({"guest": None}) == {} and thresholds({}) == {}


# a sampler at 0.87 of its rate with a 0.2 s gap: within the TCG guest's allowance, short of the native thresholds
SLOW_SAMPLER = {"target_hz": 50, "rate_hz_min": 43.5, "per_netns": {"tb1-s1": {"gap_max_ms": 200.0}}}


def _judged(path: Path) -> dict[str, Any]:
    run = load_run(path)
    return evaluate_run(run, **thresholds(run.manifest))


@pytest.mark.parametrize("guest", [TCG, None], ids=["tcg-record", "native-record"])
def test_a_record_is_judged_by_its_manifest_not_by_the_reader(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guest: dict[str, str] | None
) -> None:
    rec = RunRecord.create(tmp_path, "judged", scenario={"fabric": {"transport": {"gso_max_segs": 1}}})
    rec.update({"guest": guest, "fabric": {"ports": []}, "sampler_health": SLOW_SAMPLER})
    for key in TCG:
        monkeypatch.delenv(key, raising=False)
    native = _judged(rec.path)
    for key, value in TCG.items():  # the reader now inside a TCG guest
        monkeypatch.setenv(key, value)
    assert _judged(rec.path) == native
    sampler = next(c for c in native["checks"] if c["name"] == "sampler")
    assert sampler["ok"] is (guest is not None), sampler  # the allowance follows the record's own guest
