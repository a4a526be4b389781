"""The records of a cluster sweep: those the workers return, landed whole under ``runs/``, and the failed records
the client writes for points that did not run."""

from __future__ import annotations

import io
import json
import os
import shutil
import tarfile
import tempfile
from collections.abc import Mapping
from pathlib import Path, PurePosixPath
from typing import Any

from results.handover import plan
from results.record import MANIFEST, RunRecord, write_json_atomic
from testbed.run import RunResult, point_record
from testbed.spec.scenario import Scenario

from .workers import ClusterError


def land(archive: bytes, out: Path, worker: Mapping[str, Any]) -> Path:
    """Write a record that came back from a worker under ``out``: unpacked beside it, its manifest given the
    worker, then renamed whole over a free name reserved as ``RunRecord.create`` reserves one (and handed to the
    user sudo ran this for, as a record made here is: ``results.handover``)."""
    handover = plan(out)
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
        if handover is not None:
            handover.give(target)
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
    record = point_record(point, out, **({"worker": dict(worker)} if worker else {}))
    record.finish("failed", error)
    return RunResult(record.path, "failed", None, error)
