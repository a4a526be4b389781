"""Comparison on the recorded sample runs in tests/data/runs (see tests/data/make_sample_runs.py)."""

from __future__ import annotations

import copy
import csv
from pathlib import Path

import pytest

from results.compare import (
    COLUMNS,
    _cell,
    compare,
    detect_variants,
    flatten,
    table_cells,
    to_markdown,
    to_text,
    write_csv,
)
from results.metrics import summarize
from results.metrics.tcp import KINDS
from results.record import find_runs
from results.stats import t_quantile_975
from results.tables import reason

DATA = Path(__file__).resolve().parents[1] / "data" / "runs"


@pytest.fixture(scope="module")
def runs():  # type: ignore[no-untyped-def]
    return find_runs([DATA])


def test_sample_data_is_there(runs) -> None:  # type: ignore[no-untyped-def]
    assert len(runs) == 7
    assert sorted(r.status for r in runs).count("complete") == 6


def test_variant_is_the_buffer_only(runs) -> None:  # type: ignore[no-untyped-def]
    sweep = [r for r in runs if "sweep-buffer" in str(r.path)]
    # seeds differ between every run, and manifest variant/repeat_index are not read: only the scenario counts
    assert len({r.manifest["scenario"]["seed"] for r in sweep}) == 6
    v = detect_variants(sweep)
    assert v.keys == ["links.buffer"]
    assert sorted(set(v.labels.values())) == ["buffer=200KB", "buffer=50KB"]


def test_variant_ignores_typed_variant_and_detects_other_keys(runs) -> None:  # type: ignore[no-untyped-def]
    a, b = copy.deepcopy(runs[0]), copy.deepcopy(runs[0])
    b.manifest["run_id"] = "other"
    b.manifest["variant"] = {"something": "typed"}
    b.manifest["scenario"]["ecmp"]["hash_policy"] = 1
    b.manifest["scenario"]["started_at"] = "later"
    v = detect_variants([a, b])
    assert v.keys == ["ecmp.hash_policy"]
    assert v.labels["other"] == "hash_policy=1"


def test_flatten() -> None:
    assert flatten({"a": {"b": 1, "c": [1, {"d": 2}]}, "e": {}}) == {"a.b": 1, "a.c[0]": 1, "a.c[1].d": 2, "e": {}}


def test_rows_repetitions_mean_and_ci(runs) -> None:  # type: ignore[no-untyped-def]
    cmp = compare(runs)
    assert [(r.variant, r.status, len(r.runs)) for r in cmp.rows] == [
        ("buffer=50KB", "complete", 3),
        ("buffer=50KB", "incomplete", 1),
        ("buffer=200KB", "complete", 3),
    ]
    deep = cmp.rows[2]
    vals = [summarize(r)["rtt_p99_s"] for r in deep.runs]
    mean = sum(vals) / 3
    sd = (sum((v - mean) ** 2 for v in vals) / 2) ** 0.5
    cell = deep.cells["rtt_p99_s"]
    assert cell.n == 3 and cell.mean == pytest.approx(mean)
    assert cell.ci95 == pytest.approx(t_quantile_975(2) * sd / 3**0.5)
    # the physics of the sample: a deeper buffer queues more and drops less
    assert deep.cells["queue_backlog_max_bytes"].mean > 3 * cmp.rows[0].cells["queue_backlog_max_bytes"].mean
    assert deep.cells["drops_total"].mean < cmp.rows[0].cells["drops_total"].mean


def test_every_column_filled_or_reasoned(runs) -> None:  # type: ignore[no-untyped-def]
    cmp = compare(runs)
    keys = [c[0] for c in cmp.columns]
    assert [k for k, _, _ in COLUMNS if k not in keys] == []
    assert "goodput[bulk]" in keys
    for row in cmp.rows:
        for key in keys:
            cell = row.cells[key]
            assert cell.mean is not None or cell.reason, (row.label, key)
            if key in KINDS and row.status == "complete":  # the sample records predate these counters: n/a
                assert cell.mean is None and "netstat.csv has no start and end value of TcpExt." in (cell.reason or "")
            elif key == "machine_stalled_share" and row.status == "complete":  # and the canary: n/a
                assert cell.mean is None and "no machine_stalls check" in (cell.reason or "")
            elif row.status == "complete" and "samples, have" not in (cell.reason or ""):  # not a refused quantile
                assert cell.mean is not None, (row.label, key, cell.reason)
    killed = cmp.rows[1]
    assert killed.cells["fct_p99_s"].mean is None and "fct.csv" in (killed.cells["fct_p99_s"].reason or "")
    assert killed.cells["drops_total"].mean is not None  # what was measured before the kill is kept


def test_incomplete_run_is_labelled(runs) -> None:  # type: ignore[no-untyped-def]
    killed = next(r for r in runs if "killed" in str(r.path))
    assert killed.manifest["status"] == "running" and killed.status == "incomplete"
    assert "torn" in (reason(killed.table("queues")) or "")
    text = to_text(compare(runs), width=120)
    assert "incomplete" in text


def test_outputs_csv_markdown_text(runs, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    cmp = compare(runs)
    write_csv(cmp, tmp_path / "c.csv")
    with open(tmp_path / "c.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["variant"] for r in rows] == ["buffer=50KB", "buffer=50KB", "buffer=200KB"]
    assert float(rows[2]["queue_backlog_max_bytes"]) > 150_000 and rows[2]["queue_backlog_max_bytes_ci95"]
    assert rows[1]["fct_p99_s"] == "n/a" and "fct_p99_s:" in rows[1]["not_applicable"]
    md = to_markdown(cmp)
    assert md.count("\n| buffer=") == 3 and "`links.buffer`" in md
    text = to_text(cmp, width=100)
    assert all(len(line) <= 100 for line in text.splitlines() if not line.startswith("["))


def test_failed_run_row(runs) -> None:  # type: ignore[no-untyped-def]
    failed = copy.deepcopy(runs[0])
    failed.manifest.update({"status": "failed", "error": "iperf3 exited 1", "run_id": "f"})
    failed.manifest["fidelity"] = {"faithful": False}
    cmp = compare([*runs[:4], failed])  # 3 x 50KB + 1 x 200KB: the buffer differs
    row = next(r for r in cmp.rows if r.status.startswith("failed"))
    assert row.status == "failed: iperf3 exited 1" and row.fidelity.startswith("NOT FAITHFUL")
    assert row.label == "buffer=50KB [failed]"


def test_labels_leave_out_keys_that_move_in_lockstep_and_unset_values():
    from results.compare import label_keys

    values = {
        "a": {
            "fabric.host_link.marking.k": "30KB",
            "fabric.fabric_link.marking.k": "30KB",
            "fabric.host_link.marking.mode": "step",
        },
        "b": {
            "fabric.host_link.marking.k": None,
            "fabric.fabric_link.marking.k": None,
            "fabric.host_link.marking.mode": "off",
        },
    }
    keys = ["fabric.host_link.marking.k", "fabric.fabric_link.marking.k", "fabric.host_link.marking.mode"]
    assert label_keys(keys, values) == ["fabric.host_link.marking.k", "fabric.host_link.marking.mode"]
    values["b"]["fabric.fabric_link.marking.k"] = "60KB"  # no longer in lockstep: both are named
    assert len(label_keys(keys, values)) == 3


def test_a_faithful_run_with_a_warning_says_so(runs) -> None:  # type: ignore[no-untyped-def]
    warned = copy.deepcopy(runs[4])  # the 200KB point alone: one run of its variant
    warned.manifest["fidelity"] = {
        "faithful": True,
        "warnings": ["cpu_saturation: ... (a warning: dequeue_gap passed)"],
    }
    cmp = compare([*runs[:3], warned])
    row = next(r for r in cmp.rows if r.variant == "buffer=200KB")
    assert row.fidelity == "ok (1/1 with a warning)"


def test_a_refused_quantile_is_na_with_its_reason(runs) -> None:  # type: ignore[no-untyped-def]
    """The sample runs have 20 measured iterations each: the table's coll p99 is n/a, and its footnote says why."""
    cmp = compare(runs)
    row = cmp.rows[0]
    assert row.cells["coll_iter_p99_s"].mean is None and row.cells["coll_iter_p50_s"].mean is not None
    headers, body, notes = table_cells(cmp)
    cell = body[0][headers.index("coll p99 (ms)")]
    assert cell.startswith("n/a [")
    assert notes[int(cell[5:-1]) - 1] == f"{row.label} / coll_iter_p99_s: p99 needs >= 100 samples, have 20"


def test_a_cell_some_runs_could_not_compute_names_why() -> None:
    ok = {"x": 1.0, "not_applicable": {}}
    refused = {"x": None, "not_applicable": {"x": "p99 needs >= 100 samples, have 80"}}
    cell = _cell("x", [ok, dict(ok), refused])
    assert cell.mean == 1.0 and cell.n == 2
    assert cell.reason == "1 of 3 runs could not compute it: p99 needs >= 100 samples, have 80"
