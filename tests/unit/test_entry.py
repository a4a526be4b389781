"""The `testbed` command's front door (no root needed): `--version` names the version and the clone's revision, a
root-only command refuses in one line without root or without the emulation modules, and an interpreter without
the testbed's packages gets one line naming the one that has them, not an ImportError's traceback."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from testbed import __version__, cli, entry

REPO = Path(__file__).resolve().parents[2]
SYSTEM_PYTHON = Path(entry.SYSTEM_PYTHON)
FIXTURE_RUNS = REPO / "tests" / "data" / "runs" / "sweep-buffer"


def test_version_names_the_clones_revision_or_says_it_is_unknown(tmp_path: Path) -> None:
    if (REPO / ".git").exists():
        assert re.fullmatch(rf"testbed {re.escape(__version__)} \(git [0-9a-f]{{12}}(\+dirty)?\)", entry.version_text())
    assert entry.version_text(tmp_path) == f"testbed {__version__} (unknown revision)"


def test_version_option_prints_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out.splitlines() == [entry.version_text()]


def test_pyproject_reads_the_version_from_the_package() -> None:
    text = (REPO / "pyproject.toml").read_text()
    assert 'dynamic = ["version"]' in text and 'version = { attr = "testbed.__version__" }' in text
    assert 'testbed = "testbed.cli:main"' in text


@pytest.mark.skipif(shutil.which("testbed") is None, reason="no installed `testbed` command (sudo ./setup.sh install)")
def test_the_installed_command_works_from_any_directory(tmp_path: Path) -> None:
    out = subprocess.run(["testbed", "--version"], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith(f"testbed {__version__} (")


# --- refusals ---------------------------------------------------------------------------------------------------


def _refusal(command: str, *argv: str, euid: int = 0, modules: bool = True, system_has: bool = True) -> str | None:
    return entry.refusal(command, list(argv), euid=euid, env={}, can_import=lambda _: modules, has=lambda _: system_has)


@pytest.mark.parametrize("command", sorted(entry.ROOT_COMMANDS))
def test_a_root_command_without_root_is_refused_in_one_line(command: str) -> None:
    why = _refusal(command, "x.yaml", euid=1000)
    assert why is not None and "\n" not in why
    assert why.startswith(f"error: `testbed {command}` needs root") and f"sudo testbed {command}" in why


@pytest.mark.parametrize("command", sorted(entry.EMULATION_COMMANDS))
def test_an_emulation_command_without_mininet_names_the_interpreter_that_has_it(command: str) -> None:
    why = _refusal(command, "x.yaml", modules=False)
    assert why is not None and "\n" not in why
    assert f"{sys.executable} cannot import mininet" in why and f"{entry.SYSTEM_PYTHON} can" in why
    assert f"`testbed {command}` needs mininet, pyroute2" in why
    alone = _refusal(command, "x.yaml", modules=False, system_has=False)
    assert alone is not None and "from the distribution (sudo ./setup.sh install" in alone


def test_what_needs_neither_root_nor_the_emulation_runs() -> None:
    for command in ("report", "doctor", "validate", "scheduler", "calibrate", "bench"):
        assert _refusal(command, "x", euid=1000, modules=False) is None
    assert _refusal("run", "--help", euid=1000) is None
    assert _refusal("run", "x.yaml", "--cluster", "tcp://h:8786", euid=1000, modules=False) is None
    assert entry.refusal("run", ["x.yaml"], euid=1000, env={"TESTBED_CLUSTER": "tcp://h:8786"}) is None
    assert _refusal("clean", modules=False) is None  # root is enough: clean builds nothing
    assert _refusal("run", "x.yaml") is None


def test_main_refuses_before_anything_runs(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(entry.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(cli, "_run", lambda args: pytest.fail("ran without root"))
    assert cli.main(["run", "scenarios/default.yaml"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == ["error: " + err.split("error: ", 1)[1].rstrip("\n")] and "needs root" in err


def test_a_missing_dependency_is_one_line_and_a_missing_project_module_a_traceback(
    capsys: pytest.CaptureFixture[str],
) -> None:
    def lacks(name: str) -> None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)

    assert cli._guarded(lambda args: lacks("pandas"), cli.argparse.Namespace()) == 1
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {sys.executable} cannot import pandas")
    with pytest.raises(ModuleNotFoundError):
        cli._guarded(lambda args: lacks("results.gone"), cli.argparse.Namespace())


@pytest.mark.skipif(
    not SYSTEM_PYTHON.exists()
    or subprocess.run([str(SYSTEM_PYTHON), "-c", "import pandas, mininet"], capture_output=True).returncode != 0,
    reason="needs /usr/bin/python3 with the testbed's packages (sudo ./setup.sh install)",
)
def test_another_python_without_the_packages_says_which_has_them(tmp_path: Path) -> None:
    """Another interpreter first on PATH (here a virtual environment without system packages) runs
    `python3 -m testbed` from the clone: one line naming /usr/bin/python3, no traceback."""
    venv = tmp_path / "venv"
    subprocess.run([str(SYSTEM_PYTHON), "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python3")
    for argv, needs in (
        (["report", str(FIXTURE_RUNS), "-o", str(tmp_path / "report")], "(numpy|pandas|yaml)"),
        (["run", "scenarios/default.yaml"], "mininet"),
    ):
        out = subprocess.run([py, "-m", "testbed", *argv], cwd=REPO, capture_output=True, text=True, timeout=120)
        assert out.returncode != 0 and "Traceback" not in out.stderr, out.stderr
        (line,) = out.stderr.splitlines()
        assert re.search(f"cannot import {needs}[;:]", line) and f"{entry.SYSTEM_PYTHON} can" in line, line
