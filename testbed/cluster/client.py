"""``testbed run SCENARIO --cluster ADDRESS``: every sweep point and repetition as one Dask task.

A task needs the ``fabric`` resource (a worker has one: one emulation at a time per worker) and is restricted to
the hosts whose workers have the capabilities it needs (judged here by the preflight, against each worker's
probe). Dask reruns a task whose worker died; a point that failed on every try, or that no worker can run, is
written as a failed record with the reason. A finished point comes back as its records, written under ``out``
exactly as a local run writes them (same names, same manifest) plus the worker that ran it; a record is moved
into place whole (one rename), so the client never leaves half of one.
"""

from __future__ import annotations

import secrets
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from testbed.plan.labels import variant_text
from testbed.run import RunOptions, RunResult
from testbed.spec.fields import SpecError
from testbed.spec.scenario import Scenario, ScenarioFile

from .point import task_json
from .records import failed_record, land
from .task import FABRIC, REPO, run_point_task
from .workers import ClusterError, WorkerView, placement

CONNECT_TIMEOUT_S = 10.0
WORKER_WAIT_S = 60.0  # how long a sweep waits for its first worker to join
LOCK_WAIT_S = 6 * 3600.0  # a point waits this long for another run on its worker's machine (two workers take turns)


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
    if future.status == "cancelled":  # by another client, or the scheduler
        return failed_record(point, out, "cancelled on the cluster before it finished"), None
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


def _announce(workers: Mapping[str, WorkerView], progress: ClusterProgress) -> None:
    """One line per worker: its revision (flagged when it is not this checkout's) and whether it is calibrated."""
    from results.record import git_revision

    here = git_revision(REPO)
    for v in sorted(workers.values(), key=lambda v: v.address):
        cal = "calibrated" if (v.calibration or {}).get("status") == "calibrated" else "not calibrated"
        other = f" (NOT this checkout's {here})" if here and v.revision != here else ""
        progress.say(f"worker {v.name} ({v.address}): revision {v.revision or 'unknown'}{other}, {cal}")


@dataclass
class _Sweep:
    """One sweep's submission: its points' futures, the results so far, and the event its tasks watch."""

    client: Any
    sf: ScenarioFile
    out: Path
    progress: ClusterProgress
    token: str = field(default_factory=lambda: secrets.token_hex(4))  # names this sweep's tasks and cancel event
    futures: dict[Any, int] = field(default_factory=dict)
    results: dict[int, RunResult] = field(default_factory=dict)

    @property
    def cancel(self) -> str:
        return f"testbed-cancel-{self.token}"

    def submit(self, workers: Mapping[str, WorkerView], lock_wait: float, retake_unfaithful: int) -> None:
        """Every point as a task on the hosts that can run it; a failed record for a point no worker can run."""
        for i, point in enumerate(self.sf.points):
            hosts, refused = placement(point, workers)
            if not hosts:
                why = "; ".join(f"{w}: {r}" for w, r in refused.items())
                self.results[i] = failed_record(point, self.out, f"no worker can run this point: {why}")
                self.progress.finished(point, "failed (no capable worker)", None)
                continue
            future = self.client.submit(
                run_point_task,
                task_json(point, max(lock_wait, LOCK_WAIT_S), retake_unfaithful),
                self.cancel,
                key=f"testbed-point-{self.token}-{i}",
                resources={FABRIC: 1},
                workers=hosts,
                allow_other_workers=False,
                pure=False,
            )
            self.futures[future] = i

    def collect(self) -> None:
        """Each point's records written as its task finishes, with the progress line."""
        from distributed import as_completed

        for future in as_completed(list(self.futures), loop=self.client.loop):
            i = self.futures[future]
            ran_on = None
            if future.status == "finished":
                ran_on = (self.client.who_has([future]).get(future.key) or [None])[0]
            self.results[i], label = _collect(future, self.sf.points[i], self.out, ran_on)
            self.progress.finished(self.sf.points[i], self.results[i].status, label)
            future.release()

    def interrupt(self) -> None:
        """Ctrl-C: the running points' workers stop them (their fabrics torn down), the rest are cancelled, and
        each point that was running is a failed record that says so."""
        from distributed import Event

        running = {k for keys in self.client.processing().values() for k in keys}
        Event(self.cancel, client=self.client).set()
        self.client.cancel(list(self.futures))
        for future, i in self.futures.items():
            if i not in self.results and future.key in running:
                failed_record(self.sf.points[i], self.out, "interrupted (Ctrl-C on the cluster client)")


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
    client = connect(address, security)
    progress = ClusterProgress(len(sf.points), stream)
    try:
        workers = testbed_workers(client)
        _announce(workers, progress)
        sweep = _Sweep(client, sf, out, progress)
        sweep.submit(workers, lock_wait, retake_unfaithful)
        progress.say(f"{len(sweep.futures)} point(s) submitted to {len(workers)} worker(s) at {address}")
        try:
            sweep.collect()
        except KeyboardInterrupt:
            sweep.interrupt()
            raise
        progress.say(f"points per worker: {progress.counts()}")
        return [sweep.results[i] for i in range(len(sf.points))]
    finally:
        client.close()


def run_on_cluster(sf: ScenarioFile, opts: RunOptions) -> list[RunResult]:
    """``run_main``'s points runner for ``--cluster`` (or ``TESTBED_CLUSTER``)."""
    from .serve import security

    if opts.kernel or sf.base.kernel == "stock":
        raise SpecError("kernel", "a pinned stock kernel runs on this machine only: run it without --cluster")
    assert opts.cluster is not None
    return run_cluster(sf, opts.out, opts.cluster, security(*opts.tls), opts.lock_wait, opts.retake_unfaithful)
