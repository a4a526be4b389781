"""A run killed with SIGKILL leaves state that `testbed clean` removes; a second run at once is refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.host.ownership import BusyError, RunLock, list_netns
from tests.waiting import wait_until

pytestmark = pytest.mark.root

ROOT = Path(__file__).resolve().parents[2]
CHILD = """
import sys, time
from testbed.spec.fabric import FabricSpec
from testbed.fabric.build import Fabric
fab = Fabric(FabricSpec.from_dict({"spines": 2, "leaves": 2, "hosts_per_leaf": 1}), lock_wait=300)
fab.build()
fab.procs.spawn("sleeper", ["sleep", "300"], netns=fab.hosts["l1h1"].netns)
print(fab.prefix, flush=True)
time.sleep(300)
"""


def _cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # the process ended meanwhile
        return b""


def _procs_in_other_netns() -> list[int]:
    root = os.readlink("/proc/self/ns/net")
    out = []
    for p in Path("/proc").glob("[0-9]*"):
        try:
            if os.readlink(p / "ns" / "net") != root:
                out.append(int(p.name))
        except OSError:
            pass
    return out


def test_sigkilled_run_is_cleaned_by_prefix_and_state():
    allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text()
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert child.stdout is not None
    prefix = child.stdout.readline().strip()
    assert prefix.startswith("tb"), f"child did not build: {prefix!r}"
    ours = [ns for ns in list_netns() if ns.startswith(prefix + "-")]
    assert len(ours) == 6
    child.send_signal(signal.SIGKILL)
    child.wait(10)
    assert [ns for ns in list_netns() if ns.startswith(prefix + "-")], "namespaces vanished without clean?"
    cp = subprocess.run(
        [sys.executable, "-m", "testbed", "clean"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert cp.returncode == 0, cp.stderr
    assert not [ns for ns in list_netns() if ns.startswith(prefix + "-")], cp.stdout

    def leftover() -> list[int]:
        return [pid for pid in _procs_in_other_netns() if _cmdline(pid) == b"sleep\x00300\x00"]

    # clean signals the killed run's processes; they take a moment to exit and be reaped
    wait_until(lambda: not leftover(), 10, "the killed run's processes to exit", 0.05, lambda: f"left: {leftover()}")
    assert Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text() == allowed
    assert not Path(f"/run/testbed/{prefix}.json").exists()


def test_second_run_at_once_is_refused_with_a_reason():
    with RunLock(wait=60), pytest.raises(BusyError, match="another testbed run is active"), RunLock(wait=0):
        pass
