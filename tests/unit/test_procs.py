"""ProcessGroup / run_checked without root: spawn, stop, group kill, timeouts."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

import pytest

from testbed.host.procs import CommandError, ProcessGroup, run_checked
from testbed.host.waiting import wait_until


def _gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


def test_spawn_and_stop_sleep(tmp_path: Path) -> None:
    pids: list[int] = []
    with ProcessGroup(state_cb=pids.append) as pg:
        p = pg.spawn("sleeper", ["sleep", "30"], stdout=tmp_path / "o", stderr=tmp_path / "e")
        assert p.poll() is None
        assert pids == [p.pid]
        assert os.getpgid(p.pid) == p.pid  # leads its own group
    assert p.returncode is not None
    assert _gone(p.pid)


def test_child_ignoring_int_and_term_is_killed(tmp_path: Path) -> None:
    code = (
        "import signal, subprocess, time, sys\n"
        "signal.signal(signal.SIGINT, signal.SIG_IGN); signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "subprocess.Popen(['sleep', '60'])\n"
        "print('ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    pg = ProcessGroup()
    p = pg.spawn("stubborn", [sys.executable, "-c", code], stdout=tmp_path / "o")
    wait_until(lambda: "ready" in (tmp_path / "o").read_text(), 10, "the child to ignore SIGINT/SIGTERM (ready)")
    t0 = time.monotonic()
    pg.stop_all(grace=0.3)
    assert time.monotonic() - t0 < 3
    assert p.returncode == -9
    assert _gone(p.pid)  # the grandchild sleep in the same group is gone too


def test_sigint_is_enough_for_well_behaved(tmp_path: Path) -> None:
    # READY is printed inside the try: a SIGINT from then on is a KeyboardInterrupt the child catches (exit 0).
    # Sent earlier, it would kill a child still starting up (-2) or one not yet in the try (exit 1).
    code = "import time\ntry:\n print('READY', flush=True)\n time.sleep(30)\nexcept KeyboardInterrupt:\n pass"
    pg = ProcessGroup()
    p = pg.spawn("py", [sys.executable, "-c", code], stdout=tmp_path / "o")
    wait_until(lambda: "READY" in (tmp_path / "o").read_text(), 10, "the child to enter its try block (READY)")
    pg.stop_all(grace=2)
    assert p.returncode == 0


def test_sigint_stops_a_child_of_a_harness_that_ignores_it(tmp_path: Path) -> None:
    """A harness started with ``cmd &`` from a script inherits SIGINT ignored; its children must not.

    This failed a fresh-clone CI pass started in the background: the child needed SIGTERM (-15).
    """
    code = "import time\ntry:\n print('READY', flush=True)\n time.sleep(30)\nexcept KeyboardInterrupt:\n pass"
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        pg = ProcessGroup()
        p = pg.spawn("py", [sys.executable, "-c", code], stdout=tmp_path / "o")
    finally:
        signal.signal(signal.SIGINT, before)
    wait_until(lambda: "READY" in (tmp_path / "o").read_text(), 10, "the child to enter its try block (READY)")
    pg.stop_all(grace=2)
    assert p.returncode == 0


def test_wait_timeout_names_process() -> None:
    with ProcessGroup() as pg:
        p = pg.spawn("napper", ["sleep", "5"])
        with pytest.raises(TimeoutError, match="napper"):
            p.wait(0.1)


def test_wait_returns_rc_and_stderr_tail(tmp_path: Path) -> None:
    with ProcessGroup() as pg:
        p = pg.spawn("fail", ["sh", "-c", "echo boom >&2; exit 3"], stderr=tmp_path / "e")
        assert p.wait(5) == 3
        assert "boom" in p.stderr_tail()


def test_spawn_missing_executable() -> None:
    with ProcessGroup() as pg, pytest.raises(CommandError):
        pg.spawn("nope", ["/nonexistent/xyz"])


def test_run_checked() -> None:
    assert run_checked(["echo", "hi"]).strip() == "hi"
    assert run_checked(["cat"], input="abc") == "abc"
    with pytest.raises(CommandError) as ei:
        run_checked(["sh", "-c", "echo bad >&2; exit 2"])
    assert ei.value.rc == 2 and "bad" in ei.value.stderr
    with pytest.raises(CommandError, match="timed out"):
        run_checked(["sleep", "5"], timeout=0.2)


def test_stop_all_stops_every_process(tmp_path: Path) -> None:
    log = tmp_path / "order"
    pg = ProcessGroup()
    outs = [tmp_path / f"p{i}.out" for i in range(3)]
    for i, out in enumerate(outs):
        code = (
            f"import signal,time,sys\ndef h(*a):\n open({str(log)!r},'a').write('{i}\\n'); sys.exit(0)\n"
            "signal.signal(signal.SIGINT,h)\nprint('READY', flush=True)\ntime.sleep(30)"
        )
        pg.spawn(f"p{i}", [sys.executable, "-c", code], stdout=out)
    wait_until(lambda: all("READY" in o.read_text() for o in outs), 10, "3 children to install their SIGINT handler")
    pg.stop_all()
    assert all(p.returncode == 0 for p in pg.procs)
    assert sorted(log.read_text().split()) == ["0", "1", "2"]
