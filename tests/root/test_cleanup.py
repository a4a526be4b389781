"""A run killed with SIGKILL leaves state that `testbed clean` removes; a second run at once is refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.host.ownership import BusyError, RunLock, delete_netns, list_netns
from testbed.host.waiting import wait_until
from tests.root.hoststate import ROOT, harness_run, procs_in_other_netns, staged_rows

pytestmark = pytest.mark.root

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
        return [pid for pid in procs_in_other_netns() if _cmdline(pid) == b"sleep\x00300\x00"]

    # clean signals the killed run's processes; they take a moment to exit and be reaped
    wait_until(lambda: not leftover(), 10, "the killed run's processes to exit", 0.05, lambda: f"left: {leftover()}")
    assert Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text() == allowed
    assert not Path(f"/run/testbed/{prefix}.json").exists()


def test_second_run_at_once_is_refused_with_a_reason():
    with RunLock(wait=60), pytest.raises(BusyError, match="another testbed run is active"), RunLock(wait=0):
        pass


LISTENER = """
import socket, time
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
s.bind(("10.99.0.2", 5001)); s.listen()
c, _ = s.accept()
time.sleep(300)  # never reads: the sender's window closes with data unsent
"""
SENDER = """
import socket
s = socket.create_connection(("10.99.0.2", 5001))
while True:
    s.sendall(b"x" * 65536)
"""


def _orphans() -> int:
    """Orphaned TCP sockets on the machine (their count is global, whatever namespace they are in)."""
    for line in Path("/proc/net/sockstat").read_text().splitlines():
        if line.startswith("TCP:"):
            fields = line.split()
            return int(fields[fields.index("orphan") + 1])
    raise AssertionError("no TCP line in /proc/net/sockstat")


def _send_q(ns: str) -> int:
    out = subprocess.run(["ss", "-N", ns, "-tnH", "state", "established"], capture_output=True, text=True).stdout
    return sum(int(line.split()[1]) for line in out.splitlines() if line.strip())


def test_deleting_a_namespace_aborts_its_orphaned_sockets() -> None:
    """A killed sender with unsent data leaves an orphaned socket that retried for ~90 s after its namespace was
    gone (and held a run's struct_ops DCTCP that long: tests/root/test_chaos.py); delete_netns aborts it."""
    with RunLock(wait=300) as state:
        snd, rcv = f"{state.prefix}-snd", f"{state.prefix}-rcv"
        procs: list[subprocess.Popen[bytes]] = []
        try:
            for ns in (snd, rcv):
                state.add("namespaces", ns)
                subprocess.run(["ip", "netns", "add", ns], check=True)
                subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True)
            subprocess.run(
                ["ip", "-n", snd, "link", "add", "v0", "type", "veth", "peer", "v1", "netns", rcv], check=True
            )
            for ns, dev, addr in ((snd, "v0", "10.99.0.1/24"), (rcv, "v1", "10.99.0.2/24")):
                subprocess.run(["ip", "-n", ns, "addr", "add", addr, "dev", dev], check=True)
                subprocess.run(["ip", "-n", ns, "link", "set", dev, "up"], check=True)
            procs.append(subprocess.Popen(["ip", "netns", "exec", rcv, sys.executable, "-c", LISTENER]))
            wait_until(
                lambda: "5001" in subprocess.run(["ss", "-N", rcv, "-ltnH"], capture_output=True, text=True).stdout,
                10,
                "the listener",
            )
            procs.append(subprocess.Popen(["ip", "netns", "exec", snd, sys.executable, "-c", SENDER]))
            wait_until(lambda: _send_q(snd) > 0, 10, "the sender's window to close with data unsent")
            before = _orphans()
            delete_netns(snd)
            wait_until(
                lambda: _orphans() <= before,
                5,
                "no orphaned socket of the deleted namespace",
                describe=lambda: f"{_orphans()} orphans, {before} before",
            )
        finally:
            for ns in (snd, rcv):
                if ns in list_netns():
                    delete_netns(ns)
            for p in procs:
                p.wait(10)


KILLED = """\
name: killed
fabric: {spines: 1, leaves: 2, hosts_per_leaf: 1, host_link: {rate: 20Mbit, mtu: 9000}}
workload:
  - {kind: iperf, name: bulk, src: l1h1, dst: l2h1, duration: 30}
duration: 40s
telemetry: {queue_hz: 200}
"""


def test_killed_run_keeps_its_samples(tmp_path: Path) -> None:
    """SIGKILL a run mid-traffic, clean, and find its queue rows in the record it left."""
    from results.record import find_runs, load_run

    scenario = tmp_path / "killed.yaml"
    scenario.write_text(KILLED)
    out = tmp_path / "runs"
    with harness_run(scenario, out) as harness:
        wait_until(lambda: staged_rows(harness.pid) >= 200, 120, "1 s of queue rows staged by the running harness")
    (killed,) = find_runs([out])
    run_dir = killed.path
    assert not (run_dir / "queues.csv").exists(), "the rows were staged: the record has none before clean"
    cp = subprocess.run(
        [sys.executable, "-m", "testbed", "clean"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert cp.returncode == 0, cp.stderr
    assert "recovered " in cp.stdout and str(run_dir) in cp.stdout, cp.stdout
    assert not list(Path("/dev/shm").glob(f"tbstage-{harness.pid}-*"))
    run = load_run(run_dir)
    assert run.status == "incomplete"
    queues = run.table("queues")
    assert len(queues) >= 200, f"{len(queues)} queue rows recovered"
    assert "queues.csv" in run.manifest["recovered"][0]["files"]


DCTCP = """\
name: killed-dctcp
fabric: {spines: 1, leaves: 2, hosts_per_leaf: 1, host_link: {rate: 20Mbit, mtu: 9000}, transport: {cc: dctcp}}
workload:
  - {kind: iperf, name: bulk, src: l1h1, dst: l2h1, duration: 30}
duration: 40s
telemetry: {queue_hz: 200}
"""


def _state_struct_ops(pid: int) -> list[str]:
    import json

    for f in Path("/run/testbed").glob("tb*.json"):
        try:
            state = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if state.get("pid") == pid:
            return list(state.get("struct_ops") or [])
    return []


def test_killed_run_leaves_no_struct_ops_or_allowed_cc(tmp_path: Path) -> None:
    """The BPF DCTCP and the allowed-list words are in the state file before they exist, and clean finds
    the struct_ops by the name it registers. (Where the kernel has tcp_dctcp, nothing is registered: skipped.)"""
    from testbed.host import structops

    if "dctcp" in Path("/proc/sys/net/ipv4/tcp_available_congestion_control").read_text().split():
        pytest.skip("this kernel has tcp_dctcp: no BPF struct_ops is registered")
    allowed = Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text()
    scenario = tmp_path / "dctcp.yaml"
    scenario.write_text(DCTCP)
    with harness_run(scenario, tmp_path / "runs") as harness:
        wait_until(lambda: _state_struct_ops(harness.pid), 120, "the run to note its struct_ops DCTCP")
        (entry,) = _state_struct_ops(harness.pid)
        assert entry.startswith("cc dctcp_tb"), entry
        name = entry.split()[1]
        wait_until(lambda: name in structops.registered(), 60, f"{name} to be registered")
    cp = subprocess.run(
        [sys.executable, "-m", "testbed", "clean"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert cp.returncode == 0, cp.stderr
    assert "unregistered struct_ops id" in cp.stdout and name in cp.stdout, cp.stdout
    wait_until(lambda: name not in structops.registered(), 30, f"{name} to be gone")
    assert Path("/proc/sys/net/ipv4/tcp_allowed_congestion_control").read_text() == allowed


def test_ctrl_c_right_after_the_namespaces_are_attached_leaves_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C test once left `tbXXXX-l2`: the build named a namespace only after attaching it, so a SIGINT
    between the two left it to `testbed clean`. The build now writes every name down, then attaches them all in one
    `ip -batch`; here the interrupt comes right after that batch."""
    from testbed.fabric import build
    from testbed.fabric.build import Fabric
    from testbed.spec.fabric import FabricSpec

    attached: list[str] = []
    real = build.run_checked

    def attach_then_interrupt(argv: list[str], *args: object, **kwargs: object) -> object:
        out = real(argv, *args, **kwargs)
        lines = str(kwargs.get("input") or "").splitlines()
        if argv == ["ip", "-batch", "-"] and lines and all(ln.startswith("netns attach ") for ln in lines):
            attached.extend(ln.split()[2] for ln in lines)
            raise KeyboardInterrupt
        return out

    monkeypatch.setattr(build, "run_checked", attach_then_interrupt)
    fab = Fabric(FabricSpec.from_dict({"spines": 1, "leaves": 2, "hosts_per_leaf": 1}), lock_wait=300)
    with pytest.raises(KeyboardInterrupt):
        fab.build()
    assert len(attached) == 5
    left = set(attached) & set(list_netns())
    assert not left, f"namespaces left after the interrupted build: {sorted(left)}"


def test_ctrl_c_before_the_namespaces_are_attached_leaves_none(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C while the nodes are being made: some names are written down but not attached yet. The teardown
    deletes what exists, skips the names with no namespace, and leaves none of the run's."""
    from mininet.net import Mininet

    from testbed.fabric.build import Fabric
    from testbed.spec.fabric import FabricSpec

    made: list[str] = []
    real = Mininet.addHost

    def third_interrupts(self: Mininet, name: str, *args: object, **kwargs: object) -> object:
        if len(made) == 2:
            raise KeyboardInterrupt
        made.append(name)
        return real(self, name, *args, **kwargs)

    monkeypatch.setattr(Mininet, "addHost", third_interrupts)
    fab = Fabric(FabricSpec.from_dict({"spines": 1, "leaves": 2, "hosts_per_leaf": 1}), lock_wait=300)
    with pytest.raises(KeyboardInterrupt):
        fab.build()
    assert len(made) == 2
    prefix = fab.prefix
    assert prefix is not None and not [ns for ns in list_netns() if ns.startswith(f"{prefix}-")]
