"""What needs no root installs with plain pip: in a virtual environment without the system's packages, `pip install
CLONE` (its dependencies from the package index) gives a `testbed` command whose `report` reads stored records.

Slow (it downloads numpy, pandas, matplotlib, scipy and pyyaml) and needs the package index, so it is its own tier.
The clone is copied first (its tracked files): pip builds in the source tree, and the copy keeps the build out of it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FIXTURE_RUNS = REPO / "tests" / "data" / "runs" / "sweep-buffer"
PYTHON = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
IGNORED = shutil.ignore_patterns(".git", "runs", "build", "reports", "*.egg-info", "__pycache__", ".*_cache")


def copy_clone(dest: Path) -> Path:
    """The clone's tracked files (every file outside the ignored build and record folders when not in git)."""
    files = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, text=True)
    if files.returncode != 0:
        shutil.copytree(REPO, dest, ignore=IGNORED)
        return dest
    for name in filter(None, files.stdout.split("\0")):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    return dest


def _run(argv: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert out.returncode == 0, f"{' '.join(argv)} exited {out.returncode}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}"
    return out


def test_pip_install_into_a_plain_venv_then_report_a_stored_record(tmp_path: Path) -> None:
    clone = copy_clone(tmp_path / "clone")
    venv = tmp_path / "venv"
    _run([PYTHON, "-m", "venv", str(venv)], tmp_path, 300)
    _run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check", str(clone)], tmp_path, 900)
    testbed = str(venv / "bin" / "testbed")
    version = _run([testbed, "--version"], tmp_path, 60)
    assert version.stdout.startswith("testbed ") and "(unknown revision)" in version.stdout  # no clone beside it
    out = tmp_path / "report"
    _run([testbed, "report", str(FIXTURE_RUNS), "-o", str(out)], tmp_path, 300)
    assert (out / "report.html").is_file() and (out / "comparison.csv").is_file()
    assert any((out / "plots").glob("*.png"))
    # the emulation is not there: a root command says so in one line
    refused = subprocess.run([testbed, "demo"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused.stderr
