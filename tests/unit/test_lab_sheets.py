"""The lab sheets (testbed/labsheets.py): each student sheet parses with its instructor's notes, gives nothing of
them away, and the fix or change each names edits a real setting of its scenario."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.cli import parser
from testbed.labsheets import (
    LABS,
    LabError,
    check,
    find,
    fix_spellings,
    for_scenario,
    get_dotted,
    leaks,
    main,
    parse,
    set_dotted,
    sheets,
)
from testbed.spec.scenario import expand

ROOT = Path(__file__).resolve().parents[2]
SHEETS = sheets()
BREAK_FIX = ["lab6-hashing", "lab7-uplink", "lab8-flap", "lab9-mtu", "lab10-qos", "lab11-pfc"]


def _scenario(path: Path) -> dict[str, Any]:
    data = yaml.safe_load((ROOT / parse(path).scenario).read_text())
    assert isinstance(data, dict)
    return data


def test_there_are_eleven_labs_six_of_them_break_fix() -> None:
    assert [p.stem.split("-")[0] for p in SHEETS] == [f"lab{i}" for i in range(1, 12)]
    assert [p.stem for p in SHEETS if parse(p).break_fix] == BREAK_FIX
    assert all((LABS / "instructor" / p.name).is_file() for p in SHEETS)


@pytest.mark.parametrize("path", SHEETS, ids=[p.stem for p in SHEETS])
def test_each_sheet_runs_a_shipped_scenario_and_its_setting_is_valid(path: Path) -> None:
    """A dry load: the run line is the CLI's, the scenario expands, and the one setting (the student's change or
    the instructor's fix) edits a setting the file has and keeps it a valid scenario with as many points."""
    sheet = parse(path)
    assert parser().parse_args(sheet.run_argv[3:]).command == "run"
    data = _scenario(path)
    points = len(expand(data).points)
    assert len(sheet.applied) == 1
    for dotted, value in sheet.applied.items():
        get_dotted(data, dotted)  # the setting is there
        set_dotted(data, dotted, value)
    assert len(expand(data).points) == points
    assert all(0 <= int(e["point"]) < points and int(e.get("over", 0)) < points for e in sheet.expect)
    assert all(0 <= int(e["point"]) < points for e in sheet.fixed)


@pytest.mark.parametrize("path", SHEETS, ids=[p.stem for p in SHEETS])
def test_the_student_sheet_gives_nothing_away(path: Path) -> None:
    """No fix's setting, no instructor's number, no instructor's block in what a student is handed."""
    sheet = parse(path)
    assert not leaks(sheet, _scenario(path)), leaks(sheet, _scenario(path))
    text = sheet.student.read_text()
    assert not any(f"```{b}" in text for b in ("yaml lab-fix", "yaml lab-expect", "yaml lab-check"))
    if sheet.break_fix:  # the instructor names the fix; the student is told only to find one setting
        assert not sheet.change and fix_spellings(sheet, _scenario(path))
        assert f"testbed lab check {sheet.name.split('-')[0]} " in text


@pytest.mark.parametrize("path", [p for p in SHEETS if p.stem in BREAK_FIX], ids=BREAK_FIX)
def test_the_instructor_notes_name_a_fix_that_changes_the_scenario(path: Path) -> None:
    sheet = parse(path)
    data = _scenario(path)
    ((dotted, value),) = sheet.fix.items()
    assert get_dotted(data, dotted) != value
    assert f"```yaml lab-fix\n{dotted}: " in sheet.instructor.read_text()


@pytest.mark.parametrize("path", [p for p in SHEETS if p.stem in BREAK_FIX], ids=BREAK_FIX)
def test_a_break_fix_scenario_does_not_comment_its_fault(path: Path) -> None:
    comments = [ln for ln in (ROOT / parse(path).scenario).read_text().splitlines() if "#" in ln]
    assert not comments, comments


def _sheet(tmp_path: Path, student: str, instructor: str) -> Path:
    (tmp_path / "instructor").mkdir(exist_ok=True)
    (tmp_path / "instructor" / "lab1-x.md").write_text(instructor)
    (tmp_path / "lab1-x.md").write_text(student)
    return tmp_path / "lab1-x.md"


RUN = "```\npython3 -m testbed run scenarios/lab_hashing.yaml -o runs/lab1\n```\n"
EXPECT = "```yaml lab-expect\n- {metric: goodput_bps, point: 0, at_most: 60000000}\n```\n"
FIX = "```yaml lab-fix\nfabric.ecmp.hash: l4\n```\n"
CHECK = "```yaml lab-check\n- {metric: goodput_bps, point: 0, at_least: 85000000}\n```\n"


def test_leaks_finds_the_fix_and_the_numbers(tmp_path: Path) -> None:
    data = yaml.safe_load((ROOT / "scenarios" / "lab_hashing.yaml").read_text())
    notes = f"Measured 49.6 Mbit/s.\n{FIX}{EXPECT}{CHECK}"
    clean = parse(_sheet(tmp_path, f"# Lab 1\nFind the setting.\n{RUN}", notes))
    assert clean.break_fix and leaks(clean, data) == []
    told = parse(_sheet(tmp_path, f"# Lab 1\nSet `hash: l4`; expect 49.6 and 85000000.\n{RUN}", notes))
    assert leaks(told, data) == ["the fix: 'hash: l4'", "an expected number: 49.6", "an expected number: 85000000"]
    pathed = parse(_sheet(tmp_path, f"# Lab 1\nfabric.ecmp.hash is it.\n{RUN}", notes))
    assert leaks(pathed, data) == ["the fix: 'fabric.ecmp.hash'"]


def test_only_the_leaves_a_fix_changes_are_the_answer() -> None:
    sheet = parse(LABS / "lab8-flap.md")
    spellings = fix_spellings(sheet, _scenario(LABS / "lab8-flap.md"))
    assert spellings == ["events.0", "action: down"]  # the link's name and the time are the fault's, not the fix's


def test_a_block_in_the_wrong_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(LabError, match=r"lab-expect.*instructor"):
        parse(_sheet(tmp_path, f"# Lab 1\n{RUN}{EXPECT}", f"{FIX}{EXPECT}{CHECK}"))
    with pytest.raises(LabError, match=r"lab-change.*student"):
        parse(_sheet(tmp_path, f"# Lab 1\n{RUN}", f"```yaml lab-change\na: 1\n```\n{EXPECT}"))
    with pytest.raises(LabError, match="not both or neither"):
        parse(_sheet(tmp_path, f"# Lab 1\n{RUN}", EXPECT))
    with pytest.raises(LabError, match="lab-check"):
        parse(_sheet(tmp_path, f"# Lab 1\n{RUN}", f"{FIX}{EXPECT}"))
    with pytest.raises(LabError, match="no such file"):
        parse(tmp_path / "lab2-missing.md")


def test_find_and_for_scenario() -> None:
    assert find("lab6") == find("6") == find("lab6-hashing") == LABS / "lab6-hashing.md"
    assert find("lab1") == LABS / "lab1-oversubscription.md"  # not lab10 or lab11
    with pytest.raises(LabError, match="lab6-hashing"):
        find("lab12")
    assert for_scenario("lab-hashing") == LABS / "lab6-hashing.md"
    assert for_scenario("no-such-scenario") is None


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


def test_show_prints_the_instructors_notes_only_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "lab6"]) == 0
    student = capsys.readouterr().out
    assert "16 parallel streams" in student and "hash: l4" not in student and "49.6" not in student
    assert main(["show", "lab6", "--instructor"]) == 0
    both = capsys.readouterr().out
    assert both.startswith(student.rstrip()) and "fabric.ecmp.hash: l4" in both and "49.6" in both


def test_break_fix_check_reads_a_run_directory(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The student's check: the instructor's lab-check items on the summaries under a run directory, printed
    without their thresholds."""
    run = tmp_path / "20261205T000000Z-lab-hashing"
    run.mkdir()
    (run / "manifest.json").write_text("{}")
    (run / "summary.json").write_text(json.dumps({"goodput_bps": 98e6, "ecmp_imbalance": 1.03}))
    assert main(["check", "lab6", str(tmp_path)]) == 0
    said = capsys.readouterr().out
    assert "the fix worked" in said and "85000000" not in said
    (run / "summary.json").write_text(json.dumps({"goodput_bps": 49e6, "ecmp_imbalance": 2.0}))
    assert main(["check", "lab6", str(tmp_path)]) == 1
    assert main(["check", "lab1", str(tmp_path)]) == 2  # an exploration lab has nothing to check
    with pytest.raises(LabError, match="no run record"):
        main(["check", "lab6", str(tmp_path / "empty")])


def test_the_testbed_command_passes_lab_through(capsys: pytest.CaptureFixture[str]) -> None:
    from testbed.cli import main as testbed_main

    assert testbed_main(["lab", "list"]) == 0
    listed = capsys.readouterr().out.splitlines()
    assert len(listed) == len(SHEETS) and listed[5].startswith("lab6-hashing")
    assert testbed_main(["lab", "show", "lab12"]) == 1  # one line, naming the labs
    assert "no lab 'lab12'" in capsys.readouterr().err


def test_without_a_clone_the_lab_commands_say_where_the_sheets_are(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import testbed.labsheets as labsheets

    monkeypatch.setattr(labsheets, "LABS", tmp_path / "docs" / "labs")
    for argv in (["list"], ["show", "lab6"]):
        with pytest.raises(LabError, match="in a clone's docs/labs/"):
            main(argv)
