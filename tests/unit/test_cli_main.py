"""The command line's run path without building anything (no root): `_guarded` prints the project's own errors as
one line and lets a bug show its traceback; `run` and `demo` define every option RunOptions has, and `main` hands
run_main exactly the RunOptions the options say (`testbed run` once crashed because run.py read an option cli.py
never defined, and no test ran this path)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from testbed import cli
from testbed import run as run_mod
from testbed.errors import TestbedError
from testbed.host.ownership import BusyError
from testbed.run import RunOptions
from testbed.spec.fields import SpecError

REPO = Path(__file__).resolve().parents[2]
PY = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable

# Every option of `run`, each away from its default (the demo takes the same ones without the scenario)
OPTIONS = ["--wait", "5", "--kernel", "k", "--no-report", "--allow-unfaithful", "--retake-unfaithful", "1", "-o", "d"]
OPTIONS += ["--cluster", "tcp://s:8786", "--tls-ca-file", "ca", "--tls-cert", "c", "--tls-key", "k"]
OPTIONS += ["--set", "repeat=1", "--set", "seed=2"]
EXPECTED = {
    "out": Path("d"),
    "report": False,
    "kernel": "k",
    "allow_unfaithful": True,
    "retake_unfaithful": 1,
    "lock_wait": 5.0,
    "cluster": "tcp://s:8786",
    "tls": ("ca", "c", "k"),
    "settings": ("repeat=1", "seed=2"),
}


def _raiser(exc: BaseException) -> Any:
    def fn(args: argparse.Namespace) -> int:
        raise exc

    return fn


# --- _guarded ---------------------------------------------------------------------------------------------------


def test_a_spec_error_is_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    rc = cli._guarded(_raiser(SpecError("fabric.spines", "must be at least 1")), argparse.Namespace())
    err = capsys.readouterr().err
    assert rc == 2
    assert err.splitlines() == ["error: fabric.spines: must be at least 1"]


def test_another_testbed_error_is_one_line_and_exit_1(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TESTBED_DEBUG", raising=False)
    rc = cli._guarded(_raiser(BusyError("another run holds the machine")), argparse.Namespace())
    err = capsys.readouterr().err
    assert rc == 1
    assert err.splitlines() == ["error (BusyError): another run holds the machine"]
    assert "Traceback" not in err


def test_testbed_debug_shows_the_project_errors_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESTBED_DEBUG", "1")
    with pytest.raises(BusyError):
        cli._guarded(_raiser(BusyError("busy")), argparse.Namespace())


@pytest.mark.parametrize(
    "exc",
    [
        AttributeError("'Namespace' object has no attribute 'wait'"),  # the bug that broke `testbed run`
        RuntimeError("a builtin base of BusyError, but not the project's error"),
        ValueError("a builtin base of SpecError, but not the project's error"),
        KeyError("k"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_a_bug_propagates(exc: Exception, capsys: pytest.CaptureFixture[str]) -> None:
    assert not isinstance(exc, TestbedError)
    with pytest.raises(type(exc)):
        cli._guarded(_raiser(exc), argparse.Namespace())
    assert capsys.readouterr().err == ""  # no one-line "error (AttributeError): ..." printed before it


def test_ctrl_c_exits_130(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli._guarded(_raiser(KeyboardInterrupt()), argparse.Namespace()) == 130
    assert len(capsys.readouterr().err.splitlines()) == 1


# --- main: the real command line through run_main ---------------------------------------------------------------

BUG = textwrap.dedent(
    """
    import sys
    import testbed.run
    def run_main(opts, runner=None, env=None):
        return opts.wait  # a bug: RunOptions has no attribute wait
    testbed.run.run_main = run_main
    from testbed.cli import main
    raise SystemExit(main(sys.argv[1:]))
    """
)


def test_a_bug_in_the_run_path_shows_its_traceback(tmp_path: Path) -> None:
    """Through the interpreter: the traceback and exit 1, not a one-line error that reads like the user's mistake."""
    env = {k: v for k, v in os.environ.items() if k != "TESTBED_DEBUG"}
    cp = subprocess.run(
        [PY, "-c", BUG, "run", str(tmp_path / "x.yaml"), "-o", str(tmp_path / "runs")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert cp.returncode == 1, cp.stderr
    assert "Traceback (most recent call last)" in cp.stderr
    assert "AttributeError" in cp.stderr and "wait" in cp.stderr
    assert "error (AttributeError)" not in cp.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", ["run", "demo"])
def test_main_hands_run_main_the_options(command: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[RunOptions] = []
    runners: list[Any] = []

    def run_main(opts: RunOptions, runner: Any = None, env: Any = None) -> int:
        seen.append(opts)
        runners.append(runner)
        return 7

    monkeypatch.setattr(run_mod, "run_main", run_main)
    argv = [command, *(["x.yaml"] if command == "run" else []), *OPTIONS]
    assert cli.main(argv) == 7
    scenario = Path("x.yaml") if command == "run" else Path(cli.DEFAULT_SCENARIO)
    assert seen == [RunOptions(scenario=scenario, **EXPECTED)]
    from testbed.cluster.client import run_on_cluster

    assert runners == [run_on_cluster]  # --cluster: the points go to the cluster client


def test_testbed_cluster_in_the_environment_is_the_cluster_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TESTBED_CLUSTER", "tcp://e:8786")
    assert cli.run_options(cli.parser().parse_args(["run", "x.yaml"])).cluster == "tcp://e:8786"
    opts = cli.run_options(cli.parser().parse_args(["run", "x.yaml", "--cluster", "tcp://o:1"]))
    assert opts.cluster == "tcp://o:1"


# --- run_options: every RunOptions field has an option ------------------------------------------------------------


@pytest.mark.parametrize("command", ["run", "demo"])
def test_every_run_option_is_defined_and_reaches_run_options(command: str) -> None:
    argv = [command, *(["x.yaml"] if command == "run" else []), *OPTIONS]
    opts = cli.run_options(cli.parser().parse_args(argv))
    assert isinstance(opts, RunOptions)
    scenario = Path("x.yaml") if command == "run" else Path(cli.DEFAULT_SCENARIO)
    assert opts == RunOptions(scenario=scenario, **EXPECTED)
    # A field added to RunOptions without an option (or not wired in run_options) keeps its default here: OPTIONS
    # sets every field away from its default, so a new field must come with an option and a line in this test.
    fields = {f.name for f in dataclasses.fields(RunOptions)}
    assert fields == {"scenario", *EXPECTED}, "RunOptions changed: add its option to the CLI and to OPTIONS/EXPECTED"
    for f in dataclasses.fields(RunOptions):
        if f.default is not dataclasses.MISSING:
            assert getattr(opts, f.name) != f.default, f"RunOptions.{f.name} is not set by any option of `{command}`"


@pytest.mark.parametrize("command", ["run", "demo"])
def test_the_cli_defaults_are_run_options_defaults(command: str) -> None:
    argv = [command, *(["x.yaml"] if command == "run" else [])]
    opts = cli.run_options(cli.parser().parse_args(argv))
    scenario = Path("x.yaml") if command == "run" else Path(cli.DEFAULT_SCENARIO)
    assert opts == RunOptions(scenario=scenario)


def test_the_demo_runs_the_default_scenario() -> None:
    assert Path(cli.DEFAULT_SCENARIO) == REPO / "scenarios" / "default.yaml"
    assert Path(cli.DEFAULT_SCENARIO).is_file()
