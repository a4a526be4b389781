"""Run record writer and reader (results.record, results.tables): no root, tmp dirs only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest

from results.metrics import finish_run
from results.record import RecordError, RunRecord, find_runs, load_run, variant_slug
from results.tables import TableError, reason

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def test_create_names_dir_and_writes_running_manifest(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "incast", {"links.buffer": "50KB"}, scenario={"a": 1}, now=NOW)
    assert rec.path.name == "20250102T030405Z-incast-buffer50KB"
    m = json.loads((rec.path / "manifest.json").read_text())
    assert m["schema"] == "testbed-run/1" and m["status"] == "running" and m["pid"] == os.getpid()
    assert m["scenario"] == {"a": 1} and m["started_at"] == "2025-01-02T03:04:05.000Z"
    assert (rec.path / "raw").is_dir()
    assert load_run(rec.path).status == "running"  # this process is alive


def test_never_overwrites_a_clash(tmp_path: Path) -> None:
    paths = [RunRecord.create(tmp_path, "x", {}, now=NOW).path for _ in range(3)]
    assert [p.name for p in paths] == ["20250102T030405Z-x", "20250102T030405Z-x-2", "20250102T030405Z-x-3"]


def test_set_and_update_rewrite_manifest_atomically(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "x", now=NOW)
    rec.set("kernel", "k1")
    rec.update({"fabric": {"ports": []}, "seed": 7})
    m = load_run(rec.path).manifest
    assert m["kernel"] == "k1" and m["seed"] == 7 and m["fabric"] == {"ports": []}
    assert not [p for p in rec.path.iterdir() if p.name.startswith(".")]  # no tmp file left


def test_table_roundtrip_typed(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "x", now=NOW)
    w = rec.table("rtt")
    w.write({"job": "p", "src": "h1", "dst": "h2", "seq": 1, "t_send": 1.5, "rtt_s": 0.000123})
    w.write({"job": "p", "src": "h1", "dst": "h2", "seq": 2, "t_send": 1.6, "rtt_s": None})
    rec.finish("complete")
    run = load_run(rec.path)
    rows = run.rows("rtt")
    want = {"job": "p", "src": "h1", "dst": "h2", "seq": 1, "t_send": 1.5, "rtt_s": 0.000123, "send_late_s": None}
    assert rows[0] == want  # a column the writer was not given: empty
    assert rows[1]["rtt_s"] is None
    assert all(type(v) is int for v in (rows[0]["seq"], rows[1]["seq"]))
    arr = run.table("rtt")["rtt_s"].to_numpy()
    assert arr.dtype == float and arr[0] == 0.000123 and np.isnan(arr[1])
    assert run.status == "complete" and run.manifest["ended_at"]
    assert "rtt" in run.manifest["tables"]


def test_unknown_column_and_unknown_table_raise(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "x", now=NOW)
    with pytest.raises(TableError, match="unknown column"):
        rec.table("rtt").write({"job": "p", "rtt_ms": 1})
    with pytest.raises(TableError, match="give its columns"):
        rec.table("mystery")
    custom = rec.table("mystery", columns=["a", "b"], description="two numbers")
    custom.write({"a": 1, "b": 2})
    custom.close()
    assert load_run(rec.path).rows("mystery") == [{"a": 1, "b": 2}]


def test_missing_table_is_empty_with_reason(tmp_path: Path) -> None:
    run = load_run(RunRecord.create(tmp_path, "x", now=NOW).path)
    t = run.table("flows")
    assert t.empty and run.rows("flows") == [] and "not recorded" in (reason(t) or "")


def test_torn_last_row_is_dropped_with_reason(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "x", now=NOW)
    rec.table("cpu").write({"t": 1.0, "cpu": "all", "busy": 0.5})
    rec.table("cpu").flush()
    with open(rec.path / "cpu.csv", "a") as fh:
        fh.write("2.0,all,0.")
    t = load_run(rec.path).table("cpu")
    assert len(t) == 1 and "torn" in (reason(t) or "")


def test_flush_keeps_rows_when_the_writer_is_killed(tmp_path: Path) -> None:
    """A child process writes rows then dies by SIGKILL: the record reads back as incomplete with its rows."""
    code = f"""
import os, signal, sys, time
sys.path.insert(0, {str(Path(__file__).resolve().parents[2])!r})
from results.record import RunRecord
rec = RunRecord.create({str(tmp_path)!r}, "killed")
w = rec.table("cpu")
for i in range(50):
    w.write({{"t": float(i), "cpu": "all", "busy": 0.1}})
w.flush()
print(rec.path, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == -9, proc.stderr
    run = load_run(Path(proc.stdout.strip()))
    assert run.manifest["status"] == "running"
    assert run.status == "incomplete"
    assert len(run.table("cpu")) == 50


def test_failed_and_context_manager(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError), RunRecord.create(tmp_path, "boom", now=NOW) as rec:
        raise RuntimeError("generator crashed")
    run = load_run(rec.path)
    assert run.status == "failed" and "generator crashed" in run.manifest["error"]
    with pytest.raises(RecordError):
        RunRecord.create(tmp_path, "x").finish("incomplete")


def test_finish_writes_summary(tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path, "x", now=NOW)
    finish_run(rec)
    s = json.loads((rec.path / "summary.json").read_text())
    assert s["status"] == "complete" and s["goodput_bps"] is None and "goodput_bps" in s["not_applicable"]


def test_find_runs_recursive_and_direct(tmp_path: Path) -> None:
    a = RunRecord.create(tmp_path / "sweep" / "p1", "x", now=NOW).path
    b = RunRecord.create(tmp_path / "sweep" / "p2", "x", now=NOW).path
    assert {r.path for r in find_runs([tmp_path])} == {a, b}
    assert [r.path for r in find_runs([a])] == [a]
    assert len(find_runs([a, tmp_path / "sweep"])) == 2  # no duplicates
    with pytest.raises(RecordError):
        find_runs([tmp_path / "nothing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(RecordError, match="no run records"):
        find_runs([tmp_path / "empty"])


def test_load_rejects_other_schema(tmp_path: Path) -> None:
    (tmp_path / "manifest.json").write_text(json.dumps({"schema": "flent/1"}))
    with pytest.raises(RecordError, match="schema"):
        load_run(tmp_path)


def test_variant_slug() -> None:
    assert variant_slug({"links.buffer": "50KB", "ecn.enabled": True}) == "enabledtrue_buffer50KB"
    assert variant_slug({}) == ""
    assert len(variant_slug({"k": "x" * 200})) == 60
    assert variant_slug({"description": "a b/c*d"}) == "descriptionabcd"  # safe in a path


def test_flush_puts_every_buffered_row_on_disk(tmp_path: Path) -> None:
    """The guardrails read flows.csv from disk before finish() closes it: flush() must have written every row."""
    rec = RunRecord.create(tmp_path, "s")
    w = rec.table("flows")
    w.write({c: 1 for c in w.columns})
    rec.flush()
    assert len((rec.path / "flows.csv").read_text().splitlines()) == 2
