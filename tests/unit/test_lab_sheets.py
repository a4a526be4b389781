"""The lab sheets' machine-readable steps (scenarios/lab_sheets.py) parse, and their changes edit real settings."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from scenarios.lab_sheets import check, get_dotted, parse, set_dotted
from testbed.cli import parser
from testbed.spec.scenario import expand

ROOT = Path(__file__).resolve().parents[2]
SHEETS = sorted((ROOT / "docs" / "labs").glob("lab*.md"))


def test_there_are_five_sheets() -> None:
    assert [p.stem.split("-")[0] for p in SHEETS] == ["lab1", "lab2", "lab3", "lab4", "lab5"]


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
