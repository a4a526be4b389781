"""--set KEY=VALUE (testbed.spec.settings): a key changed for one command, the file untouched."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from testbed.spec.fields import SpecError
from testbed.spec.scenario import load_scenario, load_scenario_file
from testbed.spec.settings import parse_setting, parse_settings

BASE = {
    "name": "x",
    "fabric": {"spines": 1, "leaves": 2, "hosts_per_leaf": 1, "host_link": {"rate": "10Mbit"}},
    "workload": [{"kind": "iperf", "name": "f", "src": "l1h1", "dst": "l2h1"}],
    "sweep": {"fabric.host_link.ecn": ["off", {"mode": "step", "k": "20000B"}]},
}


def write(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(BASE))
    return path


def test_value_is_yaml_and_key_a_dotted_path() -> None:
    s = parse_setting("workload.0.parallel=4")
    assert (s.key, s.value, str(s)) == ("workload.0.parallel", 4, "--set workload.0.parallel=4")
    assert parse_setting("fabric.host_link.ecn={mode: step, k: 30KB}").value == {"mode": "step", "k": "30KB"}
    assert parse_setting("sweep=").value is None
    for bad, why in (("rate", "expected KEY=VALUE"), ("=1", "expected KEY=VALUE"), ("a b=1", "expected KEY=VALUE")):
        with pytest.raises(SpecError, match=why):
            parse_setting(bad)
    with pytest.raises(SpecError, match=r"^--set a=\{: the value is not YAML"):
        parse_setting("a={")


def test_set_changes_every_point_and_indexes_lists(tmp_path: Path) -> None:
    sf = load_scenario_file(write(tmp_path), parse_settings(["fabric.host_link.rate=20Mbit", "workload.0.parallel=3"]))
    assert [p.fabric.host_link.rate_bps for p in sf.points] == [20_000_000, 20_000_000]
    assert all(p.workload[0].parallel == 3 for p in sf.points)
    assert load_scenario(BASE, parse_settings(["repeat=2"])).repeat == 2


def test_set_of_a_sweep_axis_and_of_the_sweep(tmp_path: Path) -> None:
    path = write(tmp_path)
    sf = load_scenario_file(path, parse_settings(["sweep.fabric.host_link.rate=[10Mbit,20Mbit,30Mbit]"]))
    assert len(sf.points) == 6
    assert len(load_scenario_file(path, parse_settings(["sweep=null"])).points) == 1
    with pytest.raises(SpecError, match=r"^--set fabric.host_link.ecn=off: the sweep sets fabric.host_link.ecn"):
        load_scenario_file(path, parse_settings(["fabric.host_link.ecn=off"]))


def test_an_error_at_a_set_key_names_the_set(tmp_path: Path) -> None:
    path = write(tmp_path)
    with pytest.raises(SpecError) as err:
        load_scenario_file(path, parse_settings(["fabric.host_link.rate=1kbit"]))
    assert str(err.value).startswith("fabric.host_link.rate: ")
    assert str(err.value).endswith("(from --set fabric.host_link.rate=1kbit)")
    with pytest.raises(SpecError, match=r"^bogus: unknown key .*\(from --set bogus=1\)$"):
        load_scenario_file(path, parse_settings(["bogus=1"]))
    with pytest.raises(SpecError, match=r"^--set workload.5.parallel=1: '5' is not an index of a list of 1 items$"):
        load_scenario_file(path, parse_settings(["workload.5.parallel=1"]))
    with pytest.raises(SpecError, match=r"\(with --set fabric.scale=1000\)$"):  # the error is at another key
        load_scenario_file(path, parse_settings(["fabric.scale=1000"]))
