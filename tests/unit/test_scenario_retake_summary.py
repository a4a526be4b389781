"""scenarios/conftest.py ends the pytest session with one line counting the points ``run_file`` retook, also when it
is 0 and when tests failed (no root: a pytest session in a subprocess runs that conftest with run_file replaced by
one that writes real records and retakes as the real one does)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PY = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable

FAKE_TESTS = textwrap.dedent(
    """
    import dataclasses

    import results.cli
    import testbed.machine
    import testbed.run
    from results.record import RunRecord

    # buffer -> the verdicts of its takes: faithful at once, faithful on the retake, never faithful
    TAKES = {"50KB": [True], "100KB": [False, True], "200KB": [False, False, False]}

    def take(out, point, faithful, retake_of):
        rec = RunRecord.create(out, point.name, dict(point.variant), extra={"retake_of": retake_of} if retake_of else {})
        rec.set("fidelity", {"faithful": faithful, "failed": [] if faithful else ["cpu_saturation: busy"]})
        rec.finish("complete")
        return testbed.run.RunResult(rec.path, "complete", faithful)

    def run_file(sf, out, lock_wait=0.0, retake_unfaithful=0, machine=None):
        results = []
        for point in sf.points:
            verdicts, retaken = list(TAKES[str(point.fabric.host_link.buffer)]), []
            while True:
                res = take(out, point, verdicts.pop(0), [p.name for p in retaken])
                if res.faithful or len(retaken) >= retake_unfaithful:
                    break
                retaken.append(res.path)
            results.append(dataclasses.replace(res, retaken=tuple(retaken)))
        return results

    testbed.run.run_file = run_file
    testbed.machine.here = lambda env: None  # no probe: the fake run_file takes no machine
    results.cli.report_main = lambda argv: 0

    def test_sweep(experiment):
        experiment("small")

    def test_override_never_faithful(experiment):
        experiment("small", data={**experiment_data(), "sweep": {}}, **{"fabric.host_link.buffer": "200KB"})

    def experiment_data():
        import yaml
        from pathlib import Path
        return yaml.safe_load((Path(__file__).parent / "small.yaml").read_text())
    """
)

SMALL = """\
name: small
fabric: {spines: 1, leaves: 1, hosts_per_leaf: 2, host_link: {rate: 10Mbit, buffer: 100KB}}
duration: 1s
sweep:
  fabric.host_link.buffer: [50KB, 100KB]
"""


def session(tmp_path: Path, tests: str, retakes: str = "2") -> subprocess.CompletedProcess[str]:
    shutil.copy(REPO / "scenarios" / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "small.yaml").write_text(SMALL)
    (tmp_path / "test_fake.py").write_text(tests)
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TESTBED_SCENARIO_RUNS": str(tmp_path / "runs"),
        "TESTBED_RETAKES": retakes,
    }
    return subprocess.run(
        [PY, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path), str(tmp_path)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )


def summary_lines(cp: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in cp.stdout.splitlines() if line.startswith("testbed: ")]


def test_retaken_points_are_counted_and_named_also_when_a_test_fails(tmp_path: Path) -> None:
    cp = session(tmp_path, FAKE_TESTS)
    assert cp.returncode == 1, cp.stdout + cp.stderr  # the never-faithful point fails its test
    assert "1 failed, 1 passed" in cp.stdout, cp.stdout
    assert summary_lines(cp) == [
        "testbed: 2 points retaken (of 3 points run): small/buffer=100KB (1 retake); "
        "small[buffer=200KB] (2 retakes, still NOT FAITHFUL)"
    ], cp.stdout


def test_no_retakes_with_retakes_off(tmp_path: Path) -> None:
    cp = session(tmp_path, FAKE_TESTS, retakes="0")
    assert summary_lines(cp) == ["testbed: 0 points retaken (of 3 points run)"], cp.stdout


def test_the_line_prints_when_nothing_ran(tmp_path: Path) -> None:
    cp = session(tmp_path, "def test_fails():\n    assert False\n")
    assert cp.returncode == 1
    assert summary_lines(cp) == ["testbed: 0 points retaken (of 0 points run)"], cp.stdout
