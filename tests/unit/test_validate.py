"""`testbed validate FILE [--set KEY=VALUE]`: the plan of every point and `run`'s own preflight, no root (the
capability probe is canned here)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed import cli
from testbed import validate as validate_mod
from testbed.host.capabilities import NEEDS, Capabilities
from testbed.spec.fields import SpecError

SMALL = {
    "name": "small",
    "fabric": {
        "spines": 1,
        "leaves": 2,
        "hosts_per_leaf": 2,
        "host_link": {"rate": "10Mbit", "buffer": "102400B"},
        "overrides": [{"port": "l1->l1h1", "buffer": "51200B"}],
    },
    "workload": [{"kind": "allreduce", "name": "ar", "ranks": "all", "size": "1048576B", "iterations": 2}],
    "duration": "20s",
    "sweep": {"fabric.host_link.ecn": ["off", {"mode": "step", "k": "20480B"}]},
    "repeat": 2,
}


def write(tmp_path: Path, data: dict[str, Any]) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def canned(monkeypatch: pytest.MonkeyPatch, **overrides: Any) -> None:
    caps: dict[str, Any] = {n.key: True for n in NEEDS}
    caps.update(overrides)
    caps["ecn"] = {"sch_red": True, "bpf_marker": True, "marking_auto": "kernel", "dctcp": "kernel"}
    caps["netns"] = True
    monkeypatch.setattr(validate_mod, "probe", lambda: Capabilities.from_dict(caps))


def test_a_file_that_would_run_prints_every_variant_plan_and_exits_0(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    canned(monkeypatch)
    assert cli.main(["validate", str(write(tmp_path, SMALL))]) == 0
    out = capsys.readouterr().out
    assert "4 point(s): 2 variant(s) x 2 repeat(s)" in out
    assert "spine-leaf: 1 spines, 2 leaves, 2 hosts per leaf (4 hosts), 7 nodes; oversubscription 2:1" in out
    lines = out.splitlines()
    host = [line for line in lines if line.strip().startswith("host links:")]
    assert len(host) == 2 and all("10Mbit/s, buffer " in line and "(102,400 B), MTU 9000" in line for line in host)
    assert host[0].endswith("drop-tail") and "ECN K=" in host[1]
    over = [line for line in lines if "override (host links, 1 port: l1->l1h1)" in line]
    assert len(over) == 2 and "(51,200 B)" in over[0]
    job = "job ar: allreduce, 4 ranks (all: l1h1, l1h2, l2h1, l2h2); iterations 2, size "
    assert sum(line.strip().startswith(job) and "(1,048,576 B)" in line for line in lines) == 2
    assert out.count("would run (2 repeat(s))") == 2
    assert "every point would run" in out


def test_a_point_that_cannot_run_exits_2_with_its_one_line_reason(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    canned(monkeypatch, **{"qdisc.netem": False})
    data = {**SMALL, "fabric": {**SMALL["fabric"], "host_link": {"rate": "10Mbit", "delay": "1ms"}}}
    assert cli.main(["validate", str(write(tmp_path, data))]) == 2
    captured = capsys.readouterr()
    errors = captured.err.splitlines()
    assert len(errors) == 2  # one line per variant (its repeats share the reason)
    assert errors[0].startswith("error: sweep point fabric.host_link.ecn=off: link delay needs sch_netem")
    assert "REFUSED: sweep point" in captured.out
    assert "every point would run" not in captured.out


def test_set_overrides_a_key_for_this_command_only(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    canned(monkeypatch)
    path = write(tmp_path, SMALL)
    argv = ["validate", str(path), "--set", "fabric.host_link.rate=20Mbit", "--set", "repeat=1"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "2 point(s): 2 variant(s) x 1 repeat(s)" in out
    assert "host links:   20Mbit/s" in out and "10Mbit/s" not in out
    assert yaml.safe_load(path.read_text()) == SMALL  # the file is left as it is


def test_set_of_an_unknown_key_is_one_line_naming_the_set(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    canned(monkeypatch)
    path = write(tmp_path, SMALL)
    assert cli.main(["validate", str(path), "--set", "fabric.host_link.rat=20Mbit"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [
        "error: fabric.host_link.rat: unknown key (allowed: buffer, classes, delay, ecn, loss, mtu, rate) "
        "(from --set fabric.host_link.rat=20Mbit)"
    ]


def test_set_parses_the_same_on_run_cli_and_demo() -> None:
    p = cli.parser()
    for argv in (["run", "f.yaml"], ["cli", "f.yaml"], ["demo"], ["validate", "f.yaml"]):
        args = p.parse_args([*argv, "--set", "a.b=1", "--set", "c=x"])
        assert args.set == ["a.b=1", "c=x"]
    opts = cli.run_options(p.parse_args(["run", "f.yaml", "--set", "fabric.host_link.rate=50Mbit"]))
    assert opts.settings == ("fabric.host_link.rate=50Mbit",)


def test_without_root_the_namespace_trials_are_assumed_and_said() -> None:
    unprobed = Capabilities.from_dict({"root": False, "tool.nft": True, "qdisc.htb": None})
    assumed, did = validate_mod.assume_unprobed(unprobed)
    assert did and assumed.has("qdisc.htb") and assumed.has("ifb") and assumed.ecn.marking_auto == "kernel"
    probed = Capabilities.from_dict({"root": True, "netns": True, "qdisc.netem": False})
    same, did = validate_mod.assume_unprobed(probed)
    assert same is probed and not did
    with pytest.raises(SpecError):
        validate_mod.validate("/nonexistent/scenario.yaml")
