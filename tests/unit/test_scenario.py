"""Scenario files (no root): YAML loading, sweeps as cross-products with repeats, slugs, validation messages."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from testbed.spec.fields import SpecError
from testbed.spec.scenario import expand, load_scenario, load_scenario_file
from testbed.spec.units import Size

BASE = """
name: ecn-vs-droptail
description: marking keeps the queue short
fabric:
  spines: 2
  leaves: 2
  hosts_per_leaf: 2
  host_link: {rate: 100Mbit, buffer: 300KB}
duration: 5s
seed: 3
"""


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    p = tmp_path / name
    p.write_text(textwrap.dedent(text))
    return p


def spec_error(fn: Any) -> SpecError:
    with pytest.raises(SpecError) as info:
        fn()
    assert "\n" not in str(info.value), str(info.value)
    return info.value


def test_load_plain_file(tmp_path: Path) -> None:
    sf = load_scenario_file(write(tmp_path, BASE))
    assert sf.path == tmp_path / "s.yaml"
    assert len(sf.points) == 1 and sf.points[0] == sf.base
    s = sf.base
    assert (s.name, s.description, s.duration_s, s.seed, s.repeat, s.kernel) == (
        "ecn-vs-droptail",
        "marking keeps the queue short",
        5.0,
        3,
        1,
        "native",
    )
    assert s.fabric.leaves == 2 and s.fabric.host_link.buffer == Size(307_200)
    assert s.workload == ()
    assert s.variant == () and s.repeat_index == 0
    assert s.raw["fabric"]["host_link"]["rate"] == "100Mbit"
    assert (s.telemetry.queue_hz, s.telemetry.link_hz, s.telemetry.cpu_hz) == (1000.0, 100.0, 10.0)
    assert load_scenario(tmp_path / "s.yaml") == s


def test_defaults_from_dict() -> None:
    s = load_scenario({"name": "x", "fabric": {}})
    assert (s.duration_s, s.repeat, s.seed, s.kernel) == (60.0, 1, 1, "native")
    assert s.fabric.spines == 2


def test_raw_is_a_copy() -> None:
    data: dict[str, Any] = {"name": "x", "fabric": {"spines": 2}}
    s = load_scenario(data)
    data["fabric"]["spines"] = 3
    assert s.raw["fabric"]["spines"] == 2


def test_sweep_cross_product_and_repeats(tmp_path: Path) -> None:
    text = BASE + textwrap.dedent(
        """
        repeat: 3
        sweep:
          fabric.host_link.buffer: [100KB, 200KB]
          fabric.host_link.ecn: [off, {mode: step, k: 30KB}]
        """
    )
    sf = load_scenario_file(write(tmp_path, text))
    assert len(sf.points) == 2 * 2 * 3
    assert "sweep" not in sf.base.raw
    combos = [
        (dict(p.variant)["fabric.host_link.buffer"], p.fabric.host_link.marking.mode, p.repeat_index) for p in sf.points
    ]
    assert combos[:4] == [("100KB", "off", 0), ("100KB", "off", 1), ("100KB", "off", 2), ("100KB", "step", 0)]
    assert len(set(combos)) == 12
    first, last = sf.points[0], sf.points[-1]
    assert first.fabric.host_link.buffer == Size(102_400) and first.fabric.host_link.marking.mode == "off"
    assert last.fabric.host_link.buffer == Size(204_800) and last.fabric.host_link.marking.k == Size(30_720)
    assert last.raw["fabric"]["host_link"]["ecn"] == {"mode": "step", "k": "30KB"}
    assert last.raw["fabric"]["host_link"]["rate"] == "100Mbit"  # the rest of the mapping kept
    assert (first.repeat_index, last.repeat_index) == (0, 2)


def test_sweep_creates_missing_mappings() -> None:
    sf = expand({"name": "x", "fabric": {}, "sweep": {"fabric.ecmp.hash": ["l3", "l4"]}})
    assert [p.fabric.ecmp.hash for p in sf.points] == ["l3", "l4"]
    assert [p.variant for p in sf.points] == [(("fabric.ecmp.hash", "l3"),), (("fabric.ecmp.hash", "l4"),)]


def test_sweep_top_level_key() -> None:
    sf = expand({"name": "x", "fabric": {}, "sweep": {"duration": ["1s", "2s"]}})
    assert [p.duration_s for p in sf.points] == [1.0, 2.0]


def test_sweep_point_error_mentions_the_point() -> None:
    exc = spec_error(lambda: expand({"name": "x", "fabric": {}, "sweep": {"fabric.spines": [1, 0]}}))
    assert exc.path == "fabric.spines"
    assert "must be in [1, 64], got 0" in exc.reason
    assert "(in sweep point fabric.spines=0)" in exc.reason
    exc = spec_error(
        lambda: expand(
            {
                "name": "x",
                "fabric": {"host_link": {"buffer": "100KB"}},
                "sweep": {"fabric.host_link.ecn": [{"mode": "step", "k": "30KB"}, {"mode": "step", "k": "200KB"}]},
            }
        )
    )
    assert exc.path == "fabric.host_link.ecn.k"
    assert (
        "above the buffer" in exc.reason
        and "sweep point fabric.host_link.ecn={'mode': 'step', 'k': '200KB'}" in exc.reason
    )


@pytest.mark.parametrize(
    ("sweep", "path", "reason"),
    [
        ([1, 2], "sweep", "expected a mapping"),
        ({"fabric.spines": []}, "sweep.fabric.spines", "non-empty list"),
        ({"fabric.spines": 2}, "sweep.fabric.spines", "non-empty list"),
        ({"colour": ["red"]}, "sweep.colour", "key path inside the scenario"),
        ({"name": ["a", "b"]}, "sweep.name", "key path inside the scenario"),
        ({"sweep.x": [1]}, "sweep.sweep.x", "key path inside the scenario"),
        ({"fabric.overrides.5.rate": ["1Mbit"]}, "sweep.fabric.overrides.5.rate", "'5' is not an index of a list of 1"),
        ({"fabric.overrides.x": ["1Mbit"]}, "sweep.fabric.overrides.x", "'x' is not an index"),
        ({"fabric.spines.x": [1]}, "sweep.fabric.spines.x", "'fabric.spines' is neither a mapping nor a list"),
        ({"duration.x.y": [1]}, "sweep.duration.x.y", "'duration' is neither a mapping nor a list"),
    ],
)
def test_bad_sweeps(sweep: Any, path: str, reason: str) -> None:
    fabric = {"spines": 2, "overrides": [{"port": "l1->l1h1", "rate": "5Mbit"}]}
    exc = spec_error(lambda: expand({"name": "x", "fabric": fabric, "duration": "5s", "sweep": sweep}))
    assert exc.path == path
    assert reason in exc.reason


def test_sweep_into_a_list() -> None:
    data: dict[str, Any] = {
        "name": "x",
        "fabric": {"overrides": [{"port": "l1->l1h1", "rate": "5Mbit"}]},
        "sweep": {"fabric.overrides.0.rate": ["1Mbit", "2Mbit"]},
    }
    sf = expand(data)
    assert [p.fabric.overrides[0].values for p in sf.points] == [(("rate", "1Mbit"),), (("rate", "2Mbit"),)]
    assert [p.variant for p in sf.points] == [
        (("fabric.overrides.0.rate", "1Mbit"),),
        (("fabric.overrides.0.rate", "2Mbit"),),
    ]
    assert data["fabric"]["overrides"][0]["rate"] == "5Mbit"  # the caller's data untouched


def test_kernel_key() -> None:
    assert load_scenario({"name": "x", "fabric": {}, "kernel": "stock"}).kernel == "stock"
    assert load_scenario({"name": "x", "fabric": {}, "kernel": "native"}).kernel == "native"
    exc = spec_error(lambda: load_scenario({"name": "x", "fabric": {}, "kernel": "debian-6.1"}))
    assert (exc.path, exc.reason) == ("kernel", "must be native or stock, got 'debian-6.1'")
    sf = expand({"name": "x", "fabric": {}, "sweep": {"kernel": ["native", "stock"]}})
    assert [p.kernel for p in sf.points] == ["native", "stock"]


@pytest.mark.parametrize(
    ("data", "path", "reason"),
    [
        ({"fabric": {}}, "name", "required key is missing"),
        ({"name": "x"}, "fabric", "required key is missing"),
        ({"name": "x", "fabric": {}, "duraton": "5s"}, "duraton", "unknown key"),
        ({"name": "bad name!", "fabric": {}}, "name", "short identifier"),
        ({"name": 7, "fabric": {}}, "name", "short identifier"),
        ({"name": "x", "fabric": {}, "duration": "-5s"}, "duration", "must not be negative"),
        ({"name": "x", "fabric": {}, "duration": "soon"}, "duration", "not a duration"),
        ({"name": "x", "fabric": {}, "repeat": 0}, "repeat", "must be in [1, 1000]"),
        ({"name": "x", "fabric": {}, "seed": -1}, "seed", "must be in"),
        ({"name": "x", "fabric": {}, "telemetry": {"queue_hz": 50000}}, "telemetry.queue_hz", "must be in"),
        ({"name": "x", "fabric": {}, "telemetry": {"disk_hz": 1}}, "telemetry.disk_hz", "unknown key"),
        ({"name": "x", "fabric": {"host_link": {"rate": "-100Mbit"}}}, "fabric.host_link.rate", "must be positive"),
        ({"name": "x", "fabric": {"spinez": 2}}, "fabric.spinez", "unknown key"),
        (
            {"name": "x", "fabric": {"overrides": [{"port": "l9->l9h1", "rate": "5Mbit"}]}},
            "fabric.overrides[0]",
            "names no link",
        ),
        ({"name": "x", "fabric": {}, "workload": {"kind": "iperf"}}, "workload", "expected a list"),
        ({"name": "x", "fabric": {}, "workload": [{"kind": "iperf"}]}, "workload[0].name", "required key is missing"),
    ],
)
def test_scenario_rejections(data: Any, path: str, reason: str) -> None:
    exc = spec_error(lambda: load_scenario(data))
    assert exc.path == path, str(exc)
    assert reason in exc.reason


def test_minimal_workload_parses() -> None:
    s = load_scenario(
        {"name": "x", "fabric": {}, "workload": [{"kind": "iperf", "name": "bulk", "src": "l1h1", "dst": "l2h1"}]}
    )
    assert [j.name for j in s.workload] == ["bulk"]


def test_workload_host_outside_the_fabric_is_refused() -> None:
    exc = spec_error(
        lambda: load_scenario(
            {"name": "x", "fabric": {}, "workload": [{"kind": "iperf", "name": "bulk", "src": "l9h1", "dst": "l2h1"}]}
        )
    )
    assert "l9h1" in exc.reason


def test_file_errors_are_one_line(tmp_path: Path) -> None:
    exc = spec_error(lambda: load_scenario_file(tmp_path / "missing.yaml"))
    assert "does not exist" in exc.reason
    exc = spec_error(lambda: load_scenario_file(write(tmp_path, "name: x\nfabric: {spines: 2\n")))
    assert "is not valid YAML (line " in exc.reason
    exc = spec_error(lambda: load_scenario_file(write(tmp_path, "name: x\nfabric:\n  spines: 2\n   leaves: 3\n")))
    assert "is not valid YAML (line 4, column 10): mapping values are not allowed here" in exc.reason
    exc = spec_error(lambda: load_scenario_file(tmp_path))  # a directory
    assert "cannot read scenario file" in exc.reason
    exc = spec_error(lambda: load_scenario_file(write(tmp_path, "- just\n- a list\n")))
    assert "must hold a mapping" in exc.reason
    exc = spec_error(lambda: load_scenario_file(write(tmp_path, "")))
    assert "must hold a mapping" in exc.reason


def test_link_rate_defaults_to_the_queue_rate_when_that_is_lower() -> None:
    """A scenario that lowers queue_hz below 100 Hz need not lower link_hz too (the sampler reads links on queue
    ticks, so a link rate above the queue rate is refused: test_cli_errors)."""
    from testbed.spec.scenario import TelemetrySpec

    assert TelemetrySpec.from_dict({"queue_hz": 50}, "telemetry").link_hz == 50.0
    assert TelemetrySpec.from_dict({"queue_hz": 500}, "telemetry").link_hz == 100.0
