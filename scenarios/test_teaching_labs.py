"""Every lab sheet in docs/labs/ executed as a student follows it (scenarios/lab_sheets.py reads its steps).

For each sheet: its `testbed run` line must parse as the CLI's own arguments and name a shipped scenario, whose run
(this session's scenario test's, else run here; the same ``run_file`` path, retakes as the scenario tests) must meet
the sheet's "what the instructor should expect" checks; its CLI session is typed at `testbed cli` (pexpect), where
every command must answer without an error; its one change is applied to a copy of the scenario, which then runs
through the literal command line (`python3 -m testbed run COPY -o DIR`) and must end with every point faithful.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from scenarios.lab_sheets import LabSheet, check, check_fix, parse, set_dotted
from scenarios.scenario_helpers import REVERSED
from testbed.cli import parser
from testbed.spec.scenario import resolve_paths

ROOT = Path(__file__).resolve().parents[1]
SHEETS = sorted(
    (ROOT / "docs" / "labs").glob("lab*.md"), key=lambda p: int(p.stem[3:].split("-")[0])
)  # lab10 after lab9
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
            assert "*** error" not in said and "Unknown command" not in said, f"{sheet.path.name}: `{line}`: {said}"
    finally:
        child.sendline("exit")
        child.expect(pexpect.EOF, timeout=120)
        child.close()
    assert child.exitstatus == 0, f"{sheet.path.name}: the CLI exited {child.exitstatus}"


def test_lab_sheet(sheet: LabSheet, experiment: Callable[..., object], tmp_path: Path) -> None:
    args = parser().parse_args(sheet.run_argv[3:])  # python3 -m testbed run ...
    assert args.command == "run" and (ROOT / sheet.scenario).is_file(), sheet.run_argv
    name = Path(sheet.scenario).stem
    exp = experiment(name)
    summaries = [p.summary for p in exp.points]  # type: ignore[attr-defined]
    failed = [seen for ok, seen in (check(item, summaries) for item in sheet.expect) if not ok]
    assert not failed, f"{sheet.path.name}: the instructor's expectations do not hold: " + "; ".join(failed)

    if sheet.cli:
        _cli_session(sheet, tmp_path / "cli")

    data = yaml.safe_load((ROOT / sheet.scenario).read_text())
    for dotted, value in sheet.change.items():
        set_dotted(data, dotted, value)
    resolve_paths(data, (ROOT / sheet.scenario).parent)  # the copy runs elsewhere: its traces stay where they are
    changed = tmp_path / f"{name}-changed.yaml"
    changed.write_text(yaml.safe_dump(data, sort_keys=False))
    argv = [*sheet.run_argv[:4], str(changed), "-o", str(tmp_path / "runs"), "--retake-unfaithful", "2"]
    cp = subprocess.run(["/usr/bin/python3", *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert cp.returncode == 0, f"{sheet.path.name}: the changed scenario: {cp.stdout[-1500:]}{cp.stderr[-1500:]}"
    if sheet.fixed:  # a break-fix lab: the student's check passes on the fix, and did not on the fault
        student = ["/usr/bin/python3", "-m", "scenarios.lab_sheets", "check", str(sheet.path), str(tmp_path / "runs")]
        cp = subprocess.run(student, cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert cp.returncode == 0, f"{sheet.path.name}: the check on the fixed run: {cp.stdout}{cp.stderr}"
        broken = [seen for ok, seen in check_fix(sheet, summaries) if ok]
        assert not all(ok for ok, _ in check_fix(sheet, summaries)), f"{sheet.path.name}: the fault passes: {broken}"
