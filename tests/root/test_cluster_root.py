"""Sweeps on a Dask cluster, as root: a LocalCluster of two testbed worker processes on this machine.

Both workers are on one machine, so the run lock serialises them: each holds one point at a time and the other
waits for the lock (the records' traffic windows never overlap). The client is the README's command with
``--cluster``; its records must read like a local run's, a worker killed mid-point must cost nothing but a rerun,
and the same must work over TLS with self-signed certificates.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from testbed.cluster.task import worker_options
from testbed.host.waiting import wait_until

pytestmark = [pytest.mark.root, pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, tc)")]
REPO = Path(__file__).resolve().parents[2]
PY = "/usr/bin/python3"

TINY = """\
name: cluster-tiny
description: the smallest routed fabric and one short flow, swept over the buffer (tests/root/test_cluster_root.py)
fabric:
  topology: spine-leaf
  spines: 1
  leaves: 2
  hosts_per_leaf: 1
  host_link: {rate: 50Mbit, buffer: 100KB, mtu: 9000}
workload:
  - {kind: iperf, name: pair, src: l1h1, dst: l2h1, duration: 2}
duration: 15s
"""


def scenario(tmp_path: Path, buffers: list[str], repeat: int = 1) -> Path:
    path = tmp_path / "tiny.yaml"
    sweep = f"sweep:\n  fabric.host_link.buffer: [{', '.join(buffers)}]\nrepeat: {repeat}\n" if buffers else ""
    path.write_text(TINY + sweep)
    return path


def _testbed(*argv: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PY, "-m", "testbed", *argv], cwd=REPO, capture_output=True, text=True, timeout=timeout)


# `python3 -m testbed` with SIGINT as a terminal's Ctrl-C finds it: a shell without job control (CI's) starts its
# background commands with SIGINT ignored, and Python then never raises KeyboardInterrupt (CI19's client ignored
# the test's Ctrl-C and finished its sweep). An ignored signal stays ignored across exec, so the child resets it.
WITH_CTRL_C = (
    "import runpy, signal; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "runpy.run_module('testbed', run_name='__main__', alter_sys=True)"
)


def start_cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PY, "-c", WITH_CTRL_C, *argv],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, **(env or {})},
    )


def stop(proc: subprocess.Popen[str], sig: int = signal.SIGTERM, timeout: float = 60) -> str:
    """Its output after ``sig``; killed (and the test failed) if it does not exit within ``timeout`` s."""
    proc.send_signal(sig)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise AssertionError(f"{proc.args} did not exit {timeout:g} s after signal {sig}:\n{out[-2000:]}") from None
    return out or ""


@pytest.fixture(scope="module")
def caps() -> dict[str, Any]:
    from testbed.machine import probe

    return probe().to_dict()


def local_cluster(caps: dict[str, Any], workdir: Path, **kw: Any) -> Any:
    from distributed import LocalCluster

    opts = worker_options(caps)
    opts.pop("nthreads")
    return LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
        local_directory=str(workdir),
        **opts,
        **kw,
    )


@pytest.fixture
def cluster(caps: dict[str, Any], tmp_path: Path) -> Iterator[Any]:
    with local_cluster(caps, tmp_path / "dask") as c:
        yield c


def manifests(out: Path) -> list[dict[str, Any]]:
    return [json.loads(m.read_text()) for m in sorted(out.glob("*/manifest.json"))]


def nothing_left() -> str:
    cp = _testbed("clean", timeout=120)
    return cp.stdout.strip() + cp.stderr.strip()


def test_sweep_on_two_workers_reads_like_a_local_run(cluster: Any, tmp_path: Path) -> None:
    path = scenario(tmp_path, ["100KB", "300KB"], repeat=2)
    out = tmp_path / "runs"
    cp = _testbed("run", str(path), "-o", str(out), "--cluster", cluster.scheduler_address)
    tail = f"\nstdout:\n{cp.stdout[-3000:]}\nstderr:\n{cp.stderr[-3000:]}"
    assert cp.returncode == 0, tail
    got = manifests(out)
    assert len(got) == 4, tail
    assert all(m["status"] == "complete" and m["fidelity"]["faithful"] for m in got), tail
    assert sorted((m["variant"]["fabric.host_link.buffer"], m["repeat_index"]) for m in got) == [
        ("100KB", 0),
        ("100KB", 1),
        ("300KB", 0),
        ("300KB", 1),
    ]
    workers = {m["worker"]["address"] for m in got}
    assert workers <= set(cluster.scheduler_info["workers"]) and len(workers) == 2, workers
    for m in got:
        assert m["run_id"] == Path(m["run_id"]).name and (out / m["run_id"]).is_dir()
        assert m["worker"]["revision"] == m["git_revision"]
    # one machine, two workers: the run lock lets one point run at a time, so no two traffic windows overlap
    windows = sorted(tuple(m["traffic_window"]) for m in got)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(windows)), windows
    assert "points per worker:" in cp.stdout and "HTML report:" in cp.stdout, tail
    # the same point run here: the same files and the same manifest keys, plus the worker
    local = tmp_path / "local"
    one = scenario(tmp_path, [])
    lp = _testbed("run", str(one), "-o", str(local), "--no-report")
    assert lp.returncode == 0, lp.stdout[-2000:] + lp.stderr[-2000:]
    (lm,) = manifests(local)
    cm = got[0]
    assert set(cm) == set(lm) | {"worker"}
    files = {str(p.relative_to(out / cm["run_id"])) for p in (out / cm["run_id"]).rglob("*") if p.is_file()}
    local_files = {str(p.relative_to(local / lm["run_id"])) for p in (local / lm["run_id"]).rglob("*") if p.is_file()}
    assert files == local_files
    report = _testbed("report", str(out), "-o", str(tmp_path / "report"), "--no-plots")
    assert report.returncode == 0 and "4 run(s)" in report.stdout, report.stdout + report.stderr
    assert "different calibrations" not in report.stdout  # one machine, one calibration
    assert nothing_left() == "nothing to clean"


def _descendants(pid: int) -> list[int]:
    import psutil

    try:
        return [c.pid for c in psutil.Process(pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _busy_worker(pids: dict[str, int]) -> tuple[str, int] | None:
    """A worker whose point has built its fabric: a run's state file names a process under the worker's."""
    for state in Path("/run/testbed").glob("tb*.json"):
        try:
            owner = json.loads(state.read_text())["pid"]
        except (OSError, ValueError, KeyError):
            continue
        for addr, pid in pids.items():
            if owner in _descendants(pid):
                return addr, pid
    return None


@contextmanager
def sweep_until_a_point_is_built(
    cluster: Any, tmp_path: Path
) -> Iterator[tuple[subprocess.Popen[str], Any, dict[str, int], int]]:
    """A 2-point sweep through the client (records in tmp_path/runs), once a worker's point has built its fabric:
    the client's process, a Dask client, the workers' processes (address -> pid) and the busy worker's. The client's
    process is killed if it is still running at the end."""
    from distributed import Client

    path = scenario(tmp_path, ["100KB", "300KB"])
    cli = start_cli(
        "run", str(path), "-o", str(tmp_path / "runs"), "--no-report", "--cluster", cluster.scheduler_address
    )
    try:
        with Client(cluster.scheduler_address) as client:
            pids = client.run(os.getpid)
            _addr, pid = wait_until(
                lambda: _busy_worker(pids), 120, "a worker's point to build its fabric", interval=0.2
            )
            yield cli, client, pids, pid
    finally:
        if cli.poll() is None:
            cli.kill()


def test_a_worker_killed_mid_point_costs_a_rerun(cluster: Any, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    with sweep_until_a_point_is_built(cluster, tmp_path) as (cli, _client, _pids, pid):
        children = _descendants(pid)
        os.kill(pid, signal.SIGKILL)
        stdout, _ = cli.communicate(timeout=600)
    assert cli.returncode == 0, stdout[-4000:]
    got = manifests(out)
    assert len(got) == 2 and all(m["status"] == "complete" for m in got), stdout[-4000:]
    assert sorted(m["variant"]["fabric.host_link.buffer"] for m in got) == ["100KB", "300KB"]
    # the killed worker's point process was told (PR_SET_PDEATHSIG), tore its fabric down and removed its scratch
    import psutil

    wait_until(lambda: not any(psutil.pid_exists(c) for c in children), 120, "the killed worker's children to exit")
    assert not list((tmp_path / "dask").rglob("tbpoint-*")), "a point's scratch was left in the worker's directory"
    assert nothing_left() == "nothing to clean"
    assert not list(out.glob(".incoming-*"))


def _self_signed(d: Path) -> tuple[str, str, str]:
    """A CA and a certificate for localhost signed by it (openssl)."""
    ca_key, ca, key, csr, cert = (str(d / n) for n in ("ca.key", "ca.pem", "tb.key", "tb.csr", "tb.pem"))
    ssl = ["openssl"]
    for argv in (
        ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", ca_key, "-out", ca, "-days", "2",
         "-subj", "/CN=testbed-test-ca"],
        ["req", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", csr, "-subj", "/CN=localhost"],
        ["x509", "-req", "-in", csr, "-CA", ca, "-CAkey", ca_key, "-CAcreateserial", "-out", cert, "-days", "2"],
    ):  # fmt: skip
        subprocess.run(ssl + argv, check=True, capture_output=True)
    return ca, cert, key


def test_tls_cluster_on_localhost(caps: dict[str, Any], tmp_path: Path) -> None:
    from testbed.cluster.serve import security

    ca, cert, key = _self_signed(tmp_path)
    sec = security(ca, cert, key)
    path = scenario(tmp_path, [])
    out = tmp_path / "runs"
    with local_cluster(caps, tmp_path / "dask", security=sec, protocol="tls://") as c:
        assert c.scheduler_address.startswith("tls://")
        tls = ["--tls-ca-file", ca, "--tls-cert", cert, "--tls-key", key]
        cp = _testbed("run", str(path), "-o", str(out), "--no-report", "--cluster", c.scheduler_address, *tls)
        assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
        (m,) = manifests(out)
        assert m["status"] == "complete" and m["worker"]["address"].startswith("tls://")
        # without the certificates the client cannot join: one line, naming the address
        plain = _testbed("run", str(path), "-o", str(tmp_path / "no"), "--cluster", c.scheduler_address)
        assert plain.returncode != 0
        lines = plain.stderr.strip().splitlines()
        assert len(lines) == 1 and c.scheduler_address in lines[0], plain.stderr
    assert not (tmp_path / "no").exists() or not manifests(tmp_path / "no")


def test_ctrl_c_on_the_client_tears_the_points_down(cluster: Any, tmp_path: Path) -> None:
    out = tmp_path / "runs"
    with sweep_until_a_point_is_built(cluster, tmp_path) as (cli, client, pids, _pid):
        cli.send_signal(signal.SIGINT)
        stdout, _ = cli.communicate(timeout=120)
        assert cli.returncode == 130, stdout[-3000:]
        # the worker stopped its point: the fabric is torn down and the worker takes no more of the sweep
        wait_until(lambda: _busy_worker(pids) is None, 120, "the interrupted point to tear its fabric down")
        wait_until(lambda: not client.processing() or not any(client.processing().values()), 60, "idle workers")
    # a record for each point a worker had taken (one building its fabric, maybe one waiting for the run lock)
    errors = [m["error"] for m in manifests(out)]
    assert 1 <= len(errors) <= 2 and set(errors) == {"interrupted (Ctrl-C on the cluster client)"}, errors
    assert nothing_left() == "nothing to clean"


def test_scheduler_and_worker_commands(tmp_path: Path) -> None:
    """The README's cluster recipe on one machine: `testbed scheduler`, `testbed worker ADDRESS`, `run --cluster`."""
    import re

    sched = start_cli("scheduler", "--port", "0")
    worker = None
    try:
        assert sched.stdout is not None
        out_ = sched.stdout
        address = wait_until(
            lambda: re.search(r"scheduler at (tcp://127\.0\.0\.1:\d+)", out_.readline()),
            60,
            "the scheduler's address line",
        )
        # the worker's directory under tmp_path, not Dask's default (/tmp/dask-worker-space keeps its lock files)
        worker = start_cli("worker", address[1], env={"DASK_TEMPORARY_DIRECTORY": str(tmp_path / "dask")})
        path = scenario(tmp_path, [])
        out = tmp_path / "runs"
        cp = _testbed("run", str(path), "-o", str(out), "--no-report", "--cluster", address[1])
        assert cp.returncode == 0, cp.stdout[-3000:] + cp.stderr[-3000:]
        (m,) = manifests(out)
        assert m["status"] == "complete" and m["worker"]["calibration"] is not None
    finally:  # stopped as a service manager stops them
        for p in (worker, sched):
            if p is not None:
                stop(p)
    assert nothing_left() == "nothing to clean"
