"""The run record (schema ``testbed-run/1``): write it as the run goes, read it back.

Writer: ``RunRecord.create`` makes ``<parent>/<UTC timestamp>-<name>[-<variant slug>]/`` (never reusing a
directory: ``os.mkdir`` is atomic, a clash gets ``-2``, ``-3``...), writes ``manifest.json`` at once with status
``running`` and the pid, and rewrites it atomically (tmp + fsync + rename) on every ``set``/``update``.
Reader: ``load_run`` gives a ``Run`` whose ``status`` reads a ``running`` record whose process is gone as
``incomplete``; ``find_runs`` accepts run directories and parents of sweeps. See docs/record-format.md.
Under sudo in a user's directory, a finished record is handed to that user (``results.handover``).
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from results.handover import Handover, keep_owner, plan
from results.tables import TableError, TableWriter, read_table, records
from testbed.errors import TestbedError
from testbed.spec.schemas import SCHEMAS, TEXT

SCHEMA = "testbed-run/1"
MANIFEST = "manifest.json"
SUMMARY = "summary.json"
NCCL_TESTS = "nccl_tests.txt"  # the collective jobs in nccl-tests' layout (results.nccl_tests)
STATUSES = ("running", "complete", "failed", "incomplete")


class RecordError(TestbedError, RuntimeError):
    """A record that cannot be written or read (names the path and the reason)."""


def utc_now() -> datetime:
    return datetime.now(timezone.utc)


def iso(ts: datetime) -> str:
    return ts.astimezone(timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def variant_slug(variant: Mapping[str, Any], limit: int = 60) -> str:
    """``{"link.buffer": "50KB", "ecn": True}`` -> ``buffer50KB_ecntrue`` (last key segment + value, sanitised)."""
    parts = []
    for key in sorted(variant):
        value = variant[key]
        text = str(value).lower() if isinstance(value, bool) else str(value)
        parts.append(re.sub(r"[^A-Za-z0-9.]+", "", key.split(".")[-1]) + re.sub(r"[^A-Za-z0-9.=]+", "", text))
    return "_".join(p for p in parts if p)[:limit]


def _process_start(pid: int) -> int | None:
    """Start time of ``pid`` in clock ticks since boot (field 22 of /proc/<pid>/stat), None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


def git_revision(repo: Path | None = None) -> str | None:
    """``<sha>`` or ``<sha>-dirty`` of the code's checkout, None when it is not a git checkout."""
    cwd = repo or Path(__file__).resolve().parent.parent
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
        if sha.returncode != 0:
            return None
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd, capture_output=True, text=True, timeout=5
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=2, sort_keys=False, default=str)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    keep_owner(tmp, path)
    os.replace(tmp, path)


class RunRecord:
    """A run directory being written. Use ``create``; ``finish`` (or the context manager) closes it."""

    def __init__(self, path: Path, manifest: dict[str, Any]):
        self.path = path
        self.manifest = manifest
        self._tables: dict[str, TableWriter] = {}
        self.handover: Handover | None = None  # set by ``create``: the record's owner when sudo made it

    @classmethod
    def create(
        cls,
        parent: Path,
        scenario_name: str,
        variant: Mapping[str, Any] | None = None,
        *,
        scenario: Mapping[str, Any] | None = None,
        repeat_index: int = 0,
        seed: int | None = None,
        prefix: str | None = None,
        extra: Mapping[str, Any] | None = None,
        now: datetime | None = None,
    ) -> RunRecord:
        started = now or utc_now()
        variant = dict(variant or {})
        parent = Path(parent)
        handover = plan(parent)
        parent.mkdir(parents=True, exist_ok=True)
        slug = variant_slug(variant)
        safe_name = re.sub(r"[^A-Za-z0-9._-]+", "-", scenario_name).strip("-") or "run"
        path = cls.reserve(parent, f"{started.strftime('%Y%m%dT%H%M%S')}Z-{safe_name}" + (f"-{slug}" if slug else ""))
        (path / "raw").mkdir()
        manifest: dict[str, Any] = {
            "schema": SCHEMA,
            "run_id": path.name,
            "prefix": prefix,
            "status": "running",
            "pid": os.getpid(),
            "pid_start": _process_start(os.getpid()),
            "scenario_name": scenario_name,
            "scenario": dict(scenario or {}),
            "variant": variant,
            "repeat_index": repeat_index,
            "seed": seed,
            "started_at": iso(started),
            "ended_at": None,
            "git_revision": git_revision(),
            "kernel": os.uname().release,
            "hostname": socket.gethostname(),
            "cpus": os.cpu_count(),
            "tables": {},
        }
        manifest.update(extra or {})
        record = cls(path, manifest)
        record.handover = handover
        record._write_manifest()
        return record

    @staticmethod
    def reserve(parent: Path, base: str) -> Path:
        """A new, empty directory ``parent/base`` (or ``base-2``, ``base-3``, ... when taken): never an existing one."""
        path = parent / base
        for n in range(2, 10_000):
            try:
                path.mkdir()
                return path
            except FileExistsError:
                path = parent / f"{base}-{n}"
        raise RecordError(f"{parent}: no free directory name for {base}")

    def _write_manifest(self) -> None:
        write_json_atomic(self.path / MANIFEST, self.manifest)

    def set(self, key: str, value: Any) -> None:
        self.manifest[key] = value
        self._write_manifest()

    def update(self, values: Mapping[str, Any]) -> None:
        self.manifest.update(values)
        self._write_manifest()

    @property
    def raw_dir(self) -> Path:
        return self.path / "raw"

    def table(self, name: str, columns: Iterable[str] | None = None, description: str | None = None) -> TableWriter:
        """The writer of ``<name>.csv`` (one per name; the schema's columns unless ``columns`` names a new table)."""
        if name in self._tables:
            return self._tables[name]
        if name in SCHEMAS:
            cols, desc = SCHEMAS[name]
            if columns is not None and tuple(columns) != cols:
                raise TableError(f"{name}.csv has the fixed columns {cols}, got {tuple(columns)}")
        elif columns is None:
            raise TableError(f"{name}.csv is not a schema table ({', '.join(SCHEMAS)}): give its columns")
        else:
            cols, desc = tuple(columns), description or ""
        writer = TableWriter(self.path / f"{name}.csv", cols)
        self._tables[name] = writer
        self.manifest["tables"][name] = description or desc
        self._write_manifest()
        return writer

    def event(self, kind: str, detail: str = "", t: float | None = None) -> None:
        import time

        w = self.table("events")
        w.write({"t": time.time() if t is None else t, "kind": kind, "detail": detail})
        w.flush()

    def flush(self) -> None:
        """Write every table's buffered rows to disk (a reader of the files, e.g. the guardrails, sees them all)."""
        for w in self._tables.values():
            w.flush()

    def finish(self, status: str = "complete", error: str | None = None) -> None:
        """Close the tables and stamp ``ended_at``/``status`` (``results.metrics.finish_run`` adds the summary)."""
        if status not in ("complete", "failed"):
            raise RecordError(f"finish status must be complete or failed, got {status!r}")
        for w in self._tables.values():
            w.close()
        self.manifest.update({"status": status, "ended_at": iso(utc_now())})
        if error is not None:
            self.manifest["error"] = error
        self._write_manifest()
        self.hand_over()

    def hand_over(self) -> None:
        """Give the record, and the directories made for it, to the user sudo ran this for (``results.handover``);
        nothing otherwise. ``finish`` calls it, and so does whatever writes into the record after that."""
        if self.handover is not None:
            self.handover.give(self.path)

    def __enter__(self) -> RunRecord:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if self.manifest.get("status") == "running":
            if exc is None:
                self.finish("complete")
            else:
                self.finish("failed", f"{type(exc).__name__}: {exc}")


@dataclass
class Run:
    """A run record read back from disk. Each table is read once, as a DataFrame, when first asked for, and kept
    until ``forget``: the fidelity evaluation, the summary and the report share that one reading."""

    path: Path
    manifest: dict[str, Any]
    _cache: dict[str, pd.DataFrame] = field(default_factory=dict, repr=False)

    @property
    def run_id(self) -> str:
        return str(self.manifest.get("run_id") or self.path.name)

    @property
    def status(self) -> str:
        status = str(self.manifest.get("status", "incomplete"))
        if status == "running" and not self._alive():
            return "incomplete"
        return status

    def _alive(self) -> bool:
        pid = self.manifest.get("pid")
        if not isinstance(pid, int) or self.manifest.get("hostname") != socket.gethostname():
            return False
        start = _process_start(pid)
        recorded = self.manifest.get("pid_start")
        return start is not None and (recorded is None or start == recorded)

    def table(self, name: str) -> pd.DataFrame:
        """``<name>.csv`` as columns (``results.tables.read_table``); callers must not change it in place."""
        if name not in self._cache:
            columns = SCHEMAS[name][0] if name in SCHEMAS else ()
            self._cache[name] = read_table(self.path / f"{name}.csv", TEXT.get(name, ()), columns)
        return self._cache[name]

    def rows(self, name: str) -> list[dict[str, Any]]:
        """``<name>.csv`` as a list of row dicts (``results.tables.records``), for small tables read row by row."""
        return records(self.table(name))

    def has(self, name: str) -> bool:
        return len(self.table(name)) > 0

    def forget(self, *names: str) -> None:
        """Drop these tables, or every table read so far (a report over many runs keeps one run's large tables,
        queues.csv and links.csv, at a time)."""
        for name in names or tuple(self._cache):
            self._cache.pop(name, None)

    @property
    def summary(self) -> dict[str, Any] | None:
        p = self.path / SUMMARY
        return json.loads(p.read_text()) if p.exists() else None


def load_run(path: Path) -> Run:
    path = Path(path)
    mf = path / MANIFEST
    if not mf.exists():
        raise RecordError(f"{path}: not a run record (no {MANIFEST})")
    try:
        manifest = json.loads(mf.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise RecordError(f"{mf}: unreadable manifest: {exc}") from None
    schema = manifest.get("schema")
    if schema != SCHEMA:
        raise RecordError(f"{mf}: schema {schema!r} is not {SCHEMA!r}")
    return Run(path, manifest)


def find_runs(paths: Iterable[Path]) -> list[Run]:
    """Run records at or below each path (a run directory, or any parent such as a sweep), sorted by start time."""
    found: dict[Path, Run] = {}
    for p in paths:
        p = Path(p)
        if not p.exists():
            raise RecordError(f"{p}: no such file or directory")
        candidates = [p / MANIFEST] if (p / MANIFEST).exists() else sorted(p.rglob(MANIFEST))
        for mf in candidates:
            found.setdefault(mf.parent.resolve(), load_run(mf.parent))
    if not found:
        raise RecordError(f"no run records under {', '.join(map(str, paths))}")
    return sorted(found.values(), key=lambda r: (str(r.manifest.get("started_at")), r.run_id))
