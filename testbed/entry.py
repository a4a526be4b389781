"""What the `testbed` command settles before a subcommand runs, each in one line rather than a traceback: its
version and the code's revision (``version_text``), whether a root-only command can run here (``refusal``: root,
and the emulation modules on this interpreter), and a package this interpreter lacks (``missing_module_line``).

The command runs on the interpreter that has the testbed's packages: setup.sh installs them and the `testbed`
command for the distribution's ``/usr/bin/python3``. Another Python first on PATH (pyenv, conda) has neither, so
the line names the interpreter that has them.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from testbed import __version__

SYSTEM_PYTHON = "/usr/bin/python3"
SOURCE = Path(__file__).resolve().parents[1]  # the clone, when the code runs from one (an editable install)
PROJECT_PACKAGES = frozenset({"testbed", "traffic", "results", "bench"})
# The Mininet build and the netlink sockets: from the distribution (mininet's mnexec is not on PyPI)
EMULATION_MODULES = ("mininet", "pyroute2")
# Commands that build namespaces and shape links; `calibrate` and `bench` check root themselves, after their
# options, because `--show`, `--predict` and `--records` read files only
EMULATION_COMMANDS = frozenset({"run", "demo", "cli", "worker"})
ROOT_COMMANDS = EMULATION_COMMANDS | {"clean", "vm"}
# The distribution name of a module whose import name differs from it
DISTRIBUTION = {"yaml": "pyyaml"}


def git_commit(source: Path) -> str | None:
    """The commit (short) of the git work tree at ``source``, with ``+dirty`` when the tree differs from it; None
    when git cannot tell (no git, not a work tree)."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True
        )
        if rev.returncode != 0:
            return None
        dirty = subprocess.run(["git", "-C", str(source), "diff", "--quiet", "HEAD"], capture_output=True).returncode
    except OSError:
        return None
    return rev.stdout.strip() + ("+dirty" if dirty else "")


def revision(source: Path = SOURCE) -> str:
    """The clone's commit (``git_commit``); "unknown revision" outside a clone (an installed copy of the code has no
    history)."""
    commit = git_commit(source) if (source / ".git").exists() else None
    return "unknown revision" if commit is None else "git " + commit


def version_text(source: Path = SOURCE) -> str:
    """What `testbed --version` prints: the version and the revision."""
    return f"testbed {__version__} ({revision(source)})"


def importable(name: str) -> bool:
    """Whether this interpreter can import the top-level module ``name`` (found, not imported)."""
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def system_python_has(name: str, python: str = SYSTEM_PYTHON) -> bool:
    """Whether the distribution's interpreter can import ``name`` (and is not the one running)."""
    if sys.executable == python or not Path(python).exists():
        return False
    try:
        return subprocess.run([python, "-c", f"import {name}"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def missing_module_line(name: str, has: Callable[[str], bool] = system_python_has) -> str:
    """One line for a package this interpreter cannot import: which interpreter has it, else how to install it."""
    top = name.split(".")[0]
    head = f"error: {sys.executable} cannot import {top}"
    if has(top):
        return (
            f"{head}; {SYSTEM_PYTHON} can (setup.sh installs the testbed's packages there): use the `testbed` "
            f"command, or `{SYSTEM_PYTHON} -m testbed`"
        )
    if top in EMULATION_MODULES:
        return f"{head}: the emulation comes from the distribution (sudo ./setup.sh install, from a clone)"
    return f"{head}: install the testbed into this Python (pip install CLONE), or use sudo ./setup.sh install"


def refusal(
    command: str,
    argv: Sequence[str],
    euid: int | None = None,
    env: Mapping[str, str] | None = None,
    can_import: Callable[[str], bool] = importable,
    has: Callable[[str], bool] = system_python_has,
) -> str | None:
    """Why ``testbed COMMAND ARGV`` cannot run here, in one line; None when it can (or when it only asks for help,
    or sends a run's points to a cluster, which needs neither root nor the emulation here)."""
    if command not in ROOT_COMMANDS or {"-h", "--help"} & set(argv):
        return None
    env = os.environ if env is None else env
    if command in ("run", "demo") and (any(a.startswith("--cluster") for a in argv) or env.get("TESTBED_CLUSTER")):
        return None
    if (os.geteuid() if euid is None else euid) != 0:
        return (
            f"error: `testbed {command}` needs root (it builds network namespaces, shapes links or boots a kernel): "
            f"run `sudo testbed {command} ...`"
        )
    if command in EMULATION_COMMANDS:
        missing = [m for m in EMULATION_MODULES if not can_import(m)]
        if missing:
            line = missing_module_line(missing[0], has)
            return f"{line} (`testbed {command}` needs {', '.join(EMULATION_MODULES)})"
    return None


def is_dependency(exc: ModuleNotFoundError) -> bool:
    """Whether a failed import is of a package the testbed depends on (not one of its own modules: that is a bug)."""
    return bool(exc.name) and str(exc.name).split(".")[0] not in PROJECT_PACKAGES
