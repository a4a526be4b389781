"""``testbed run SCENARIO --cluster ADDRESS``: every sweep point and repetition as one Dask task.

A task needs the ``fabric`` resource (a worker has one: one emulation at a time per worker) and is restricted to
the hosts whose workers have the capabilities it needs (judged here by the preflight, against each worker's
probe). Dask reruns a task whose worker died; a point that failed on every try, or that no worker can run, is
written as a failed record with the reason. A finished point comes back as its records, written under ``out``
exactly as a local run writes them (same names, same manifest) plus the worker that ran it; a record is moved
into place whole (one rename), so the client never leaves half of one.
"""

from __future__ import annotations

import io
import json
import os
import secrets
import shutil
import sys
import tarfile
import tempfile
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Any

from results.record import MANIFEST, RunRecord, write_json_atomic
from testbed.errors import TestbedError
from testbed.host.capabilities import Capabilities
from testbed.preflight.labels import variant_text
from testbed.run import RunOptions, RunResult, preflight
from testbed.spec.fields import SpecError
from testbed.spec.scenario import Scenario, ScenarioFile, resolved
from traffic.workload import make_generator

from .task import FABRIC, METRIC, run_point_task

CONNECT_TIMEOUT_S = 10.0
WORKER_WAIT_S = 60.0  # how long a sweep waits for its first worker to join
LOCK_WAIT_S = 6 * 3600.0  # a point waits this long for another run on its worker's machine (two workers take turns)


class ClusterError(TestbedError, RuntimeError):
    """The cluster cannot be reached, or has no worker."""


@dataclass(frozen=True)
class WorkerView:
    """A worker as the client sees it: its address, the host part of it, and what it told about itself."""

    address: str
    host: str
    name: str
    revision: str | None
    capabilities: Mapping[str, Any]
    calibration: Mapping[str, Any] | None

    @classmethod
    def from_info(cls, address: str, identity: Mapping[str, Any]) -> WorkerView | None:
        text = (identity.get("metrics") or {}).get(METRIC)
        if not isinstance(text, str):
            return None  # a plain Dask worker, not started by `testbed worker`: it gets no points
        info = json.loads(text)
        return cls(
            address,
            str(identity.get("host") or address),
            str(info.get("host")),
            info.get("revision"),
            info.get("capabilities") or {},
            info.get("calibration"),
        )


def connect(address: str, security: Any = None, timeout: float = CONNECT_TIMEOUT_S) -> Any:
    """A Dask client of the scheduler at ``address``; one line (the address and the reason) when it does not answer."""
    from distributed import Client
    from distributed.security import Security

    sec = security if security is not None else Security()
    if address.startswith("tls://") and sec.get_connection_args("client").get("ssl_context") is None:
        raise ClusterError(
            f"cluster scheduler {address} speaks TLS: give --tls-ca-file, --tls-cert and --tls-key "
            "(or Dask's distributed.comm.tls configuration)"
        )
    try:
        return Client(address, security=sec, timeout=timeout, set_as_default=False)
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ClusterError(f"cluster scheduler {address} did not answer: {reason}") from None


def testbed_workers(client: Any, timeout: float = WORKER_WAIT_S) -> dict[str, WorkerView]:
    """The testbed workers connected now, after waiting up to ``timeout`` s for the first one."""
    try:
        client.wait_for_workers(1, timeout=timeout)
    except (TimeoutError, OSError):
        raise ClusterError(
            f"no worker joined the cluster within {timeout:.0f} s: start one per machine with "
            "`python3 -m testbed worker ADDRESS`"
        ) from None
    views = {}
    for address, identity in client.scheduler_info()["workers"].items():
        view = WorkerView.from_info(address, identity)
        if view is not None:
            views[address] = view
    if not views:
        raise ClusterError(
            "the cluster's workers were not started by `python3 -m testbed worker`: none can run a point"
        )
    return views


def refusal(point: Scenario, capabilities: Mapping[str, Any]) -> str | None:
    """Why a worker with these capabilities cannot run ``point`` (None: it can). The CPU budget is the worker's
    own preflight's to judge, with its calibration."""
    caps = Capabilities.from_dict(capabilities)
    try:
        preflight(point, caps, budget=False)
        for i, job in enumerate(point.workload):
            make_generator(job, i).check(caps)
    except (SpecError, TestbedError) as exc:
        return str(exc)
    return None


def placement(point: Scenario, workers: Mapping[str, WorkerView]) -> tuple[list[str], dict[str, str]]:
    """The hosts whose workers can run ``point`` (Dask restrictions by host: a restarted worker keeps its points),
    and why each other worker cannot."""
    hosts: set[str] = set()
    refused: dict[str, str] = {}
    for view in workers.values():
        why = refusal(point, view.capabilities)
        if why is None:
            hosts.add(view.host)
        else:
            refused[f"{view.name} ({view.address})"] = why
    return sorted(hosts), refused


def task_json(point: Scenario, lock_wait: float, retake_unfaithful: int) -> str:
    """A task's only data: the point's scenario dict (as a local sweep builds it), its variant and repetition."""
    return json.dumps(
        {
            "scenario": point.raw,
            "variant": [[k, v] for k, v in point.variant],
            "repeat_index": point.repeat_index,
            "lock_wait": lock_wait,
            "retake_unfaithful": retake_unfaithful,
        }
    )


def land(archive: bytes, out: Path, worker: Mapping[str, Any]) -> Path:
    """Write a record that came back from a worker under ``out``: unpacked beside it, its manifest given the
    worker, then renamed whole over a free name reserved as ``RunRecord.create`` reserves one."""
    out.mkdir(parents=True, exist_ok=True)
    incoming = Path(tempfile.mkdtemp(prefix=".incoming-", dir=out))
    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
            tar.extractall(incoming, members=record_members(tar))
        (src,) = [p for p in incoming.iterdir() if p.is_dir()]
        target = RunRecord.reserve(out, src.name)
        manifest = json.loads((src / MANIFEST).read_text())
        manifest.update({"run_id": target.name, "worker": dict(worker)})
        write_json_atomic(src / MANIFEST, manifest)
        os.rename(src, target)  # over the empty reservation: the record appears whole
        return target
    finally:
        shutil.rmtree(incoming, ignore_errors=True)


def record_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """The archive's members, refused unless each is a file or directory under one top directory (Debian 12's
    Python 3.11.2 has no ``extractall(filter="data")``)."""
    members = tar.getmembers()
    tops = {PurePosixPath(m.name).parts[0] for m in members if m.name}
    for m in members:
        parts = PurePosixPath(m.name).parts
        if not (m.isfile() or m.isdir()) or PurePosixPath(m.name).is_absolute() or ".." in parts or len(tops) != 1:
            raise ClusterError(f"a worker returned a record archive with a stray member {m.name!r}")
    return members


def failed_record(point: Scenario, out: Path, error: str, worker: Mapping[str, Any] | None = None) -> RunResult:
    """A point that did not run (no capable worker, every try failed, interrupted): a failed record that says why."""
    record = RunRecord.create(
        out,
        point.name,
        dict(point.variant),
        scenario=resolved(point),
        repeat_index=point.repeat_index,
        seed=point.seed,
        extra={
            "description": point.description,
            "scale": point.scale,
            "scenario_file": point.raw,
            **({"worker": dict(worker)} if worker else {}),
        },
    )
    record.finish("failed", error)
    return RunResult(record.path, "failed", None, error)


class ClusterProgress:
    """One line per finished point, with the points each worker has run so far."""

    def __init__(self, total: int, stream: IO[str] | None = None):
        self.total, self.done = total, 0
        self.stream = stream or sys.stdout
        self.per_worker: Counter[str] = Counter()

    def say(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def finished(self, point: Scenario, status: str, worker: str | None) -> None:
        self.done += 1
        if worker:
            self.per_worker[worker] += 1
        where = f" on {worker}" if worker else ""
        label = variant_text(point) or point.name
        if point.repeat > 1:
            label += f" r{point.repeat_index}"
        self.say(f"[{self.done}/{self.total}] {label}: {status}{where} | per worker: {self.counts()}")

    def counts(self) -> str:
        return ", ".join(f"{w} {n}" for w, n in sorted(self.per_worker.items())) or "none yet"


def _collect(future: Any, point: Scenario, out: Path, ran_on: str | None) -> tuple[RunResult, str | None]:
    """The finished task's records written under ``out``, the point's result (a failed record when it failed) and
    the worker that ran it."""
    if future.status != "finished":
        exc = future.exception()
        return failed_record(point, out, f"failed on the cluster: {type(exc).__name__}: {exc}"), None
    value = future.result()
    worker = {"address": ran_on, **value["worker"]}
    label = f"{worker['host']} ({ran_on})"
    result = value["result"]
    if "results" not in result:  # refused by the worker's own preflight, or its process died
        reason = result.get("refused") or result.get("error") or "no result"
        return failed_record(point, out, f"worker {label}: {reason}", worker), label
    landed = {rec["name"]: land(rec["archive"], out, worker) for rec in value["records"]}
    (entry,) = result["results"]
    retaken = tuple(landed[n] for n in entry["retaken"])
    return RunResult(landed[entry["name"]], entry["status"], entry["faithful"], entry["error"], retaken), label


def run_cluster(
    sf: ScenarioFile,
    out: Path,
    address: str,
    security: Any = None,
    lock_wait: float = 0.0,
    retake_unfaithful: int = 0,
    stream: IO[str] | None = None,
) -> list[RunResult]:
    """Run every point of ``sf`` on the cluster at ``address``; one result per point, in the sweep's order."""
    from distributed import Event, as_completed

    client = connect(address, security)
    progress = ClusterProgress(len(sf.points), stream)
    try:
        workers = testbed_workers(client)
        for v in sorted(workers.values(), key=lambda v: v.address):
            cal = "calibrated" if (v.calibration or {}).get("status") == "calibrated" else "not calibrated"
            progress.say(f"worker {v.name} ({v.address}): revision {v.revision or 'unknown'}, {cal}")
        token = secrets.token_hex(4)
        cancel = f"testbed-cancel-{token}"
        results: dict[int, RunResult] = {}
        futures: dict[Any, int] = {}
        task_wait = max(lock_wait, LOCK_WAIT_S)
        for i, point in enumerate(sf.points):
            hosts, refused = placement(point, workers)
            if not hosts:
                why = "; ".join(f"{w}: {r}" for w, r in refused.items())
                results[i] = failed_record(point, out, f"no worker can run this point: {why}")
                progress.finished(point, "failed (no capable worker)", None)
                continue
            future = client.submit(
                run_point_task,
                task_json(point, task_wait, retake_unfaithful),
                cancel,
                key=f"testbed-point-{token}-{i}",
                resources={FABRIC: 1},
                workers=hosts,
                allow_other_workers=False,
                pure=False,
            )
            futures[future] = i
        progress.say(f"{len(futures)} point(s) submitted to {len(workers)} worker(s) at {address}")
        try:
            for future in as_completed(list(futures), loop=client.loop):
                i = futures[future]
                ran_on = (
                    (client.who_has([future]).get(future.key) or [None])[0] if future.status == "finished" else None
                )
                results[i], label = _collect(future, sf.points[i], out, ran_on)
                progress.finished(sf.points[i], results[i].status, label)
                future.release()
        except KeyboardInterrupt:
            running = {k for keys in client.processing().values() for k in keys}
            Event(cancel, client=client).set()  # the running points' workers stop them (their fabrics torn down)
            client.cancel(list(futures))
            for future, i in futures.items():
                if i not in results and future.key in running:
                    failed_record(sf.points[i], out, "interrupted (Ctrl-C on the cluster client)")
            raise
        progress.say(f"points per worker: {progress.counts()}")
        return [results[i] for i in range(len(sf.points))]
    finally:
        client.close()


def run_on_cluster(sf: ScenarioFile, opts: RunOptions) -> list[RunResult]:
    """``run_main``'s points runner for ``--cluster`` (or ``TESTBED_CLUSTER``)."""
    from .serve import security

    if opts.kernel or sf.base.kernel == "stock":
        raise SpecError("kernel", "a pinned stock kernel runs on this machine only: run it without --cluster")
    assert opts.cluster is not None
    return run_cluster(sf, opts.out, opts.cluster, security(*opts.tls), opts.lock_wait, opts.retake_unfaithful)
