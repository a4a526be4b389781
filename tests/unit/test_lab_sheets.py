"""The lab sheets' machine-readable steps (scenarios/lab_sheets.py) parse, and their changes edit real settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from scenarios.lab_sheets import check, get_dotted, parse, set_dotted
from testbed.cli import parser
from testbed.spec.scenario import expand

ROOT = Path(__file__).resolve().parents[2]
SHEETS = sorted(
    (ROOT / "docs" / "labs").glob("lab*.md"), key=lambda p: int(p.stem[3:].split("-")[0])
)  # lab10 after lab9


def test_there_are_ten_sheets_five_of_them_break_fix() -> None:
    assert [p.stem.split("-")[0] for p in SHEETS] == [f"lab{i}" for i in range(1, 12)]
    fixed = [p.stem for p in SHEETS if parse(p).fixed]
    assert fixed == ["lab6-hashing", "lab7-uplink", "lab8-flap", "lab9-mtu", "lab10-qos", "lab11-pfc"]


@pytest.mark.parametrize("path", SHEETS, ids=[p.stem for p in SHEETS])
def test_each_sheet_runs_a_shipped_scenario_and_its_change_is_valid(path: Path) -> None:
    sheet = parse(path)
    assert parser().parse_args(sheet.run_argv[3:]).command == "run"
    data = yaml.safe_load((ROOT / sheet.scenario).read_text())
    points = len(expand(data).points)
    for dotted, value in sheet.change.items():
        set_dotted(data, dotted, value)
    changed = expand(data)  # the edited copy is a valid scenario, with the same number of points
    assert len(changed.points) == points
    assert all(0 <= int(e["point"]) < points and int(e.get("over", 0)) < points for e in sheet.expect)


def test_set_dotted_walks_lists_and_refuses_a_new_key() -> None:
    data = {"sweep": {"fabric.overrides": [[], [{"ecn": {"k": "30KB"}}]]}, "workload": [{"ranks": "x"}]}
    set_dotted(data, "workload.0.ranks", "all")
    assert data["workload"][0]["ranks"] == "all"
    with pytest.raises(KeyError, match="rnaks"):
        set_dotted(data, "workload.0.rnaks", "all")


def test_get_dotted_keeps_keys_with_dots_and_colons() -> None:
    s = {"queues": {"l1:l1-l1h1": {"drops": 3}}, "bytes_per_spine": {"s1": 5}}
    assert get_dotted(s, "queues.l1:l1-l1h1.drops") == 3 and get_dotted(s, "bytes_per_spine.s1") == 5
    with pytest.raises(KeyError):
        get_dotted(s, "queues.l9:x.drops")


def test_check_kinds() -> None:
    pts = [{"t": 1.0, "q": "l1:l1-s1"}, {"t": 2.1}]
    assert check({"metric": "t", "point": 1, "over": 0, "about": 2.0, "within": [0.75, 1.2]}, pts)[0]
    assert not check({"metric": "t", "point": 1, "over": 0, "about": 3.0, "within": [0.75, 1.2]}, pts)[0]
    assert check({"metric": "t", "point": 0, "at_most": 1.1}, pts)[0]
    assert not check({"metric": "t", "point": 1, "at_least": 2.2}, pts)[0]
    assert check({"metric": "q", "point": 0, "matches": r"l\d:l\d-s1"}, pts)[0]


def test_break_fix_check_reads_a_run_directory(tmp_path: Path) -> None:
    """The student's check: the sheet's lab-check items on the summaries under a run directory."""
    import json

    from scenarios.lab_sheets import main

    sheet = Path(__file__).resolve().parents[2] / "docs" / "labs" / "lab6-hashing.md"
    assert parse(sheet).fixed  # a break-fix sheet
    run = tmp_path / "20261205T000000Z-lab-hashing"
    run.mkdir()
    (run / "manifest.json").write_text("{}")
    (run / "summary.json").write_text(json.dumps({"goodput_bps": 98e6, "ecmp_imbalance": 1.03}))
    assert main(["check", str(sheet), str(tmp_path)]) == 0
    (run / "summary.json").write_text(json.dumps({"goodput_bps": 49e6, "ecmp_imbalance": 2.0}))
    assert main(["check", str(sheet), str(tmp_path)]) == 1
    with pytest.raises(ValueError, match="no run record"):
        main(["check", str(sheet), str(tmp_path / "empty")])
