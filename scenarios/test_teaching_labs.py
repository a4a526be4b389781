"""Every lab in docs/labs/ executed as a student follows it (testbed/labsheets.py reads both of its files).

For each lab: the student's sheet must give nothing of the instructor's notes away (no fix's setting, no expected
number); its `testbed run` line must parse as the CLI's own arguments and name a shipped scenario, whose run (this
session's scenario test's, else run here; the same ``run_file`` path, retakes as the scenario tests) must meet the
instructor's `lab-expect` checks; its CLI session is typed at `testbed cli` (pexpect), where every command must
answer without an error; its one setting (the student's change, or in a break-fix lab the fix the instructor's
notes name) is applied to a copy of the scenario, which then runs through the literal command line
(`python3 -m testbed run COPY -o DIR`) and must end with every point faithful; a break-fix lab's fixed run must
pass the student's `testbed lab check`, and the broken run must not.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from scenarios.scenario_helpers import REVERSED
from testbed.cli import parser
from testbed.labsheets import LabSheet, check, check_fix, leaks, parse, set_dotted, sheets
from testbed.spec.scenario import resolve_paths

ROOT = Path(__file__).resolve().parents[1]
SHEETS = sheets(ROOT / "docs" / "labs")
pytestmark = pytest.mark.skipif(REVERSED, reason="the labs check their sheets, not a scenario's setting")


@pytest.fixture(params=SHEETS, ids=[p.stem for p in SHEETS])
def sheet(request: pytest.FixtureRequest) -> LabSheet:
    return parse(request.param)


def _cli_session(sheet: LabSheet, out: Path) -> None:
    pexpect = pytest.importorskip("pexpect", reason="python3-pexpect is not installed (setup.sh installs it)")
    child = pexpect.spawn(
        "/usr/bin/python3", ["-m", "testbed", "cli", sheet.scenario, "-o", str(out)],
        cwd=str(ROOT), encoding="utf-8", timeout=120, dimensions=(50, 200),
    )  # fmt: skip
    try:
        child.expect_exact("mininet> ")
        for line in sheet.cli:
            child.sendline(line)
            child.expect_exact("mininet> ")
            said = str(child.before)
            assert "*** error" not in said and "Unknown command" not in said, f"{sheet.name}: `{line}`: {said}"
    finally:
        child.sendline("exit")
        child.expect(pexpect.EOF, timeout=120)
        child.close()
    assert child.exitstatus == 0, f"{sheet.name}: the CLI exited {child.exitstatus}"


def test_lab_sheet(sheet: LabSheet, experiment: Callable[..., object], tmp_path: Path) -> None:
    args = parser().parse_args(sheet.run_argv[3:])  # python3 -m testbed run ...
    assert args.command == "run" and (ROOT / sheet.scenario).is_file(), sheet.run_argv
    data = yaml.safe_load((ROOT / sheet.scenario).read_text())
    assert not leaks(sheet, data), f"{sheet.name}: the student's sheet gives away {leaks(sheet, data)}"
    if sheet.break_fix:  # the setting applied below is the fix the instructor's notes name, none of the student's
        assert not sheet.change and all(f"{k}: " in sheet.instructor.read_text() for k in sheet.fix), sheet.name
    name = Path(sheet.scenario).stem
    exp = experiment(name)
    summaries = [p.summary for p in exp.points]  # type: ignore[attr-defined]
    failed = [seen for ok, seen in (check(item, summaries) for item in sheet.expect) if not ok]
    assert not failed, f"{sheet.name}: the instructor's expectations do not hold: " + "; ".join(failed)

    if sheet.cli:
        _cli_session(sheet, tmp_path / "cli")

    for dotted, value in sheet.applied.items():
        set_dotted(data, dotted, value)
    resolve_paths(data, (ROOT / sheet.scenario).parent)  # the copy runs elsewhere: its traces stay where they are
    changed = tmp_path / f"{name}-changed.yaml"
    changed.write_text(yaml.safe_dump(data, sort_keys=False))
    argv = [*sheet.run_argv[:4], str(changed), "-o", str(tmp_path / "runs"), "--retake-unfaithful", "2"]
    cp = subprocess.run(["/usr/bin/python3", *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert cp.returncode == 0, f"{sheet.name}: the changed scenario: {cp.stdout[-1500:]}{cp.stderr[-1500:]}"
    if sheet.break_fix:  # the student's check passes on the fix, and did not on the fault
        student = ["/usr/bin/python3", "-m", "testbed", "lab", "check", sheet.name, str(tmp_path / "runs")]
        cp = subprocess.run(student, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert cp.returncode == 0, f"{sheet.name}: the check on the fixed run: {cp.stdout}{cp.stderr}"
        broken = [seen for ok, seen in check_fix(sheet, summaries) if ok]
        assert not all(ok for ok, _ in check_fix(sheet, summaries)), f"{sheet.name}: the fault passes: {broken}"
