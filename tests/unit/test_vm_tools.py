"""Guest tool discovery without installing anything (no root)."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.vm.errors import GuestToolsMissing
from testbed.vm.tools import GuestTools, ensure_guest_tools, find_guest_tools, vng_env


def test_missing_venv_is_reported_not_installed(tmp_path: Path) -> None:
    venv = tmp_path / "no-venv"
    assert find_guest_tools(venv) is None
    with pytest.raises(GuestToolsMissing, match="testbed vm --setup"):
        ensure_guest_tools(venv, install=False)
    assert not venv.exists()  # install=False touched nothing


def test_vng_env_puts_the_venv_first_and_drops_pyenv(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", "/root/.pyenv/shims:/usr/bin")
    monkeypatch.setenv("PYENV_VERSION", "3.11.7")
    tools = GuestTools(vng=tmp_path / "bin/vng", qemu=Path("/usr/bin/qemu-system-x86_64"), venv_bin=tmp_path / "bin")
    env = vng_env(tools)
    assert env["PATH"].split(":")[0] == str(tmp_path / "bin")
    assert ".pyenv" not in env["PATH"] and "PYENV_VERSION" not in env
