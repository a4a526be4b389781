"""The cluster client's logic without root or emulation: what a task carries, where a point may go, how a
returned record lands, the one-line errors, and a point no worker can run (an in-process Dask cluster)."""

from __future__ import annotations

import io
import json
import pickle
import tarfile
from pathlib import Path
from typing import Any

import pytest

from results.machines import calibration_caveat
from testbed.cluster import client as cl
from testbed.cluster.point import point_from_task, task_json
from testbed.cluster.records import land
from testbed.cluster.serve import security
from testbed.cluster.task import pack, run_point_task, worker_info, worker_options
from testbed.cluster.workers import ClusterError, WorkerView, placement
from testbed.host.capabilities import NEEDS
from testbed.spec.fields import SpecError
from testbed.spec.scenario import expand, resolved

DELAYED = {
    "name": "delayed",
    "fabric": {"spines": 1, "leaves": 2, "hosts_per_leaf": 1, "host_link": {"rate": "10Mbit", "delay": "1ms"}},
    "workload": [{"kind": "iperf", "name": "pair", "src": "l1h1", "dst": "l2h1", "duration": 1}],
    "duration": "2s",
    "sweep": {"fabric.ecmp": [{"hash": "l4", "seed": 1}, {"hash": "l3", "seed": 2}]},
    "repeat": 2,
}


def caps(**off: bool) -> dict[str, Any]:
    out: dict[str, Any] = {n.key: True for n in NEEDS}
    out.update({k.replace("_", "."): v for k, v in off.items()})
    return out


def test_a_task_is_json_and_rebuilds_the_same_point() -> None:
    sf = expand(DELAYED)
    assert len(sf.points) == 4
    for point in sf.points:
        text = task_json(point, 60.0, 1)
        task = json.loads(text)
        assert task["lock_wait"] == 60.0 and task["retake_unfaithful"] == 1
        (again,) = point_from_task(task).points
        assert resolved(again) == resolved(point)
        assert again.variant == point.variant and again.repeat_index == point.repeat_index
        assert again.raw == point.raw


def test_the_task_function_travels_by_reference() -> None:
    """The worker imports run_point_task from its own checkout: the pickle names it, it does not carry it."""
    blob = pickle.dumps(run_point_task)
    assert b"testbed.cluster.task" in blob and b"run_point_task" in blob and len(blob) < 100


def test_a_worker_without_netem_is_not_given_a_delayed_point() -> None:
    point = expand(DELAYED).points[0]
    info = {"metrics": {"testbed": worker_info(caps(qdisc_netem=False))}, "host": "10.0.0.2"}
    able = {"metrics": {"testbed": worker_info(caps())}, "host": "10.0.0.3"}
    views = {
        "tcp://10.0.0.2:1": WorkerView.from_info("tcp://10.0.0.2:1", info),
        "tcp://10.0.0.3:1": WorkerView.from_info("tcp://10.0.0.3:1", able),
    }
    workers = {k: v for k, v in views.items() if v is not None}
    hosts, refused = placement(point, workers)
    assert hosts == ["10.0.0.3"]
    ((who, why),) = refused.items()
    assert "tcp://10.0.0.2:1" in who and "netem" in why
    assert WorkerView.from_info("tcp://x:1", {"metrics": {}}) is None  # a plain Dask worker gets no points


def _record(tmp: Path, name: str) -> Path:
    rec = tmp / "src" / name
    (rec / "raw").mkdir(parents=True)
    (rec / "manifest.json").write_text(json.dumps({"run_id": name, "status": "complete"}))
    (rec / "raw" / "x.txt").write_text("data")
    return rec


def test_a_returned_record_lands_whole_under_a_free_name(tmp_path: Path) -> None:
    archive = pack(_record(tmp_path, "20261204T000000Z-a"))
    out = tmp_path / "runs"
    worker = {"address": "tcp://w:1", "host": "w"}
    first = land(archive, out, worker)
    second = land(archive, out, worker)  # the same name again: never over the first
    assert [first.name, second.name] == ["20261204T000000Z-a", "20261204T000000Z-a-2"]
    for path in (first, second):
        m = json.loads((path / "manifest.json").read_text())
        assert m["run_id"] == path.name and m["worker"] == worker
        assert (path / "raw" / "x.txt").read_text() == "data"
    assert sorted(p.name for p in out.iterdir()) == [first.name, second.name]  # no .incoming-* left


def test_an_archive_reaching_outside_its_record_is_refused(tmp_path: Path) -> None:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("../escape")
        tar.addfile(info, io.BytesIO(b""))
    with pytest.raises(ClusterError, match=r"stray member '\.\./escape'"):
        land(buf.getvalue(), tmp_path / "runs", {})
    assert not (tmp_path / "escape").exists()
    assert list((tmp_path / "runs").iterdir()) == []


def test_a_scheduler_that_does_not_answer_is_one_line() -> None:
    with pytest.raises(ClusterError, match=r"^cluster scheduler tcp://127\.0\.0\.1:9 did not answer: "):
        cl.connect("tcp://127.0.0.1:9", timeout=1)


def test_a_tls_scheduler_without_certificates_is_one_line() -> None:
    with pytest.raises(ClusterError, match=r"tls://127\.0\.0\.1:9 speaks TLS: give --tls-ca-file"):
        cl.connect("tls://127.0.0.1:9", timeout=1)


def test_tls_options_come_in_threes() -> None:
    with pytest.raises(SpecError, match="give all three"):
        security("ca.pem", "cert.pem", None)
    assert security(None, None, None).require_encryption in (False, None)


def _model(per_crossing: float, calibrated: bool = True) -> dict[str, Any]:
    return {
        "calibrated": calibrated,
        "per_crossing_s": per_crossing,
        "per_byte_s": 1e-9,
        "sampler_per_tick_s": 1e-4,
        "sampler_per_netns_s": 1e-5,
        "sampler_per_row_s": 1e-6,
    }


def test_the_report_flags_machines_calibrated_differently() -> None:
    a = {"hostname": "client", "worker": {"host": "a"}, "preflight": {"model": _model(2e-6)}}
    b = {"hostname": "client", "worker": {"host": "b"}, "preflight": {"model": _model(3e-6)}}
    a2 = {"hostname": "a", "preflight": {"model": _model(2e-6)}}
    assert calibration_caveat([a, a2]) is None
    text = calibration_caveat([a, b, a2])
    assert text is not None and "2 different calibrations" in text
    assert "a: 2.00 us/packet" in text and "b: 3.00 us/packet" in text


def in_process_cluster(tmp_path: Path, opts: dict[str, Any]) -> Any:
    """One worker thread in this process, its directory under ``tmp_path`` (not Dask's default in /tmp)."""
    from distributed import LocalCluster

    return LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        dashboard_address=None,
        local_directory=str(tmp_path / "dask"),
        **opts,
    )


def test_a_point_no_worker_can_run_is_a_failed_record(tmp_path: Path) -> None:
    """An in-process Dask cluster whose only worker has no netem: the delayed points are never submitted; each
    is written as a failed record naming the worker and the reason."""

    opts = worker_options(caps(qdisc_netem=False))
    opts.pop("nthreads")
    sf = expand({**DELAYED, "repeat": 1})
    out = tmp_path / "runs"
    with in_process_cluster(tmp_path, opts) as cluster:
        results = cl.run_cluster(sf, out, cluster.scheduler_address, stream=io.StringIO())
    assert [r.status for r in results] == ["failed", "failed"]
    for r in results:
        m = json.loads((r.path / "manifest.json").read_text())
        assert m["status"] == "failed" and m["error"].startswith("no worker can run this point: ")
        assert "link delay needs sch_netem" in m["error"]


def always_fails(task_json: str, cancel_event: str | None = None) -> dict[str, Any]:
    raise RuntimeError("the point's machine caught fire")


def test_a_point_that_failed_on_every_try_is_a_failed_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A task that errs (Dask's KilledWorker after the allowed failures takes the same path) leaves a failed record
    with the reason, and the sweep's other points still run."""

    monkeypatch.setattr(cl, "run_point_task", always_fails)
    opts = worker_options(caps())
    opts.pop("nthreads")
    sf = expand({**DELAYED, "repeat": 1})
    with in_process_cluster(tmp_path, opts) as cluster:
        results = cl.run_cluster(sf, tmp_path / "runs", cluster.scheduler_address, stream=io.StringIO())
    assert [r.status for r in results] == ["failed", "failed"]
    for r in results:
        error = json.loads((r.path / "manifest.json").read_text())["error"]
        assert error == "failed on the cluster: RuntimeError: the point's machine caught fire"
