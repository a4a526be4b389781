"""``results.sweep``: a sweep's records as one table (load_sweep) and its per-key statistic (sweep_table), on
synthetic records written with the real writer and on the stored sample sweep, with known answers."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from results.record import RecordError, RunRecord, write_json_atomic
from results.sweep import ID_COLUMNS, load_sweep, sweep_table

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "runs"


def record(
    parent: Path,
    variant: dict[str, Any],
    repeat: int,
    summary: dict[str, Any] | None,
    placement_seed: int | None = None,
    status: str = "complete",
) -> Path:
    """One finished run record with the given variant, repeat and summary.json (None: no summary)."""
    extra: dict[str, Any] = {"fidelity": {"faithful": True, "checks": []}}
    if placement_seed is not None:
        extra["placement"] = {"mode": "per-repeat", "seed": placement_seed}
    scenario: dict[str, Any] = {"name": "s", "fabric": {"host_link": {"buffer": "50KB"}}}
    for key, value in variant.items():  # the resolved scenario holds the point's values, as a sweep writes it
        *parents, last = key.split(".")
        node = scenario
        for k in parents:
            node = node.setdefault(k, {})
        node[last] = value
    rec = RunRecord.create(parent, "s", variant, scenario=scenario, repeat_index=repeat, seed=1, extra=extra)
    rec.finish(status, None if status == "complete" else "BuildError: no")
    if summary is not None:
        write_json_atomic(
            rec.path / "summary.json", {"schema": "testbed-summary/4", "run_id": rec.path.name, **summary}
        )
    return rec.path


@pytest.fixture
def sweep(tmp_path: Path) -> Path:
    """A 2x2 sweep (buffer x cc) with 3 repeats of one point and 1 of the others, written out of order."""
    for buf, cc, goodputs in (
        ("200KB", "cubic", [7.0]),
        ("50KB", "dctcp", [1.0, 2.0, 3.0]),
        ("50KB", "cubic", [4.0]),
        ("200KB", "dctcp", [5.0]),
    ):
        for i, g in enumerate(goodputs):
            summary = {"status": "complete", "goodput_bps": g, "queues": {"l1:x": {"drops": 1}}, "fct_p99_s": None}
            record(tmp_path, {"fabric.host_link.buffer": buf, "cc": cc}, i, summary, placement_seed=100 + i)
    return tmp_path


def test_one_row_per_run_with_a_column_per_swept_key(sweep: Path) -> None:
    df = load_sweep(sweep)
    assert len(df) == 6
    assert list(df.columns[: len(ID_COLUMNS)]) == list(ID_COLUMNS)
    assert list(df.columns[len(ID_COLUMNS) : len(ID_COLUMNS) + 2]) == ["fabric.host_link.buffer", "cc"]
    assert df.attrs["swept_keys"] == ["fabric.host_link.buffer", "cc"]
    # ordered by the swept values (50KB before 200KB, by size), then the repeat
    assert list(zip(df["fabric.host_link.buffer"], df["cc"], df["repeat"], strict=True)) == [
        ("50KB", "cubic", 0),
        ("50KB", "dctcp", 0),
        ("50KB", "dctcp", 1),
        ("50KB", "dctcp", 2),
        ("200KB", "cubic", 0),
        ("200KB", "dctcp", 0),
    ]
    assert list(df["goodput_bps"]) == [4.0, 1.0, 2.0, 3.0, 7.0, 5.0]
    assert list(df["placement_seed"]) == [100, 100, 101, 102, 100, 100]
    assert set(df["status"]) == {"complete"} and set(df["faithful"]) == {True}
    assert df.loc[1, "variant"] == "cc=dctcp, buffer=50KB"  # the report's label


def test_only_scalar_metrics_become_columns(sweep: Path) -> None:
    df = load_sweep(sweep)
    assert "queues" not in df.columns  # per-port detail stays in the run's summary
    assert "schema" not in df.columns
    assert df["fct_p99_s"].isna().all()  # null in the summary: missing, not 0
    assert df["run_id"].is_unique


def test_a_run_without_summary_keeps_its_row(tmp_path: Path) -> None:
    record(tmp_path, {"links.buffer": "50KB"}, 0, {"goodput_bps": 3.0})
    record(tmp_path, {"links.buffer": "50KB"}, 1, None, status="failed")
    df = load_sweep(tmp_path)
    assert list(df["status"]) == ["complete", "failed"]
    assert df["goodput_bps"].iloc[0] == 3.0 and math.isnan(df["goodput_bps"].iloc[1])
    assert df["placement_seed"].isna().all()  # not recorded


def test_runs_without_a_variant_fall_back_to_what_differs(tmp_path: Path) -> None:
    for buf in ("1MB", "100KB"):
        path = record(tmp_path, {}, 0, {"goodput_bps": 1.0})
        manifest = json.loads((path / "manifest.json").read_text())
        manifest["scenario"]["fabric"]["host_link"]["buffer"] = buf
        write_json_atomic(path / "manifest.json", manifest)
    df = load_sweep(tmp_path)
    assert list(df["fabric.host_link.buffer"]) == ["100KB", "1MB"]


def test_a_mapping_value_is_its_json_text(tmp_path: Path) -> None:
    record(tmp_path, {"fabric.host_link.marking": {"kind": "red", "k": "30KB"}}, 0, {"goodput_bps": 1.0})
    df = load_sweep(tmp_path)
    assert df["fabric.host_link.marking"].iloc[0] == '{"k": "30KB", "kind": "red"}'


def test_recompute_reads_the_tables_not_the_stored_summary(tmp_path: Path) -> None:
    record(tmp_path, {"links.buffer": "50KB"}, 0, {"goodput_bps": 123.0})
    assert load_sweep(tmp_path)["goodput_bps"].iloc[0] == 123.0
    assert load_sweep(tmp_path, recompute=True)["goodput_bps"].isna().all()  # no flows recorded


def test_no_records_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RecordError, match="no run records"):
        load_sweep(tmp_path)


def test_sweep_table_mean_interval_and_count(sweep: Path) -> None:
    table = sweep_table(load_sweep(sweep), ["fabric.host_link.buffer", "cc"], ["goodput_bps", "fct_p99_s"])
    assert list(table.columns) == [
        "fabric.host_link.buffer",
        "cc",
        "goodput_bps",
        "goodput_bps_ci95",
        "goodput_bps_n",
        "fct_p99_s",
        "fct_p99_s_ci95",
        "fct_p99_s_n",
    ]
    row = table[(table["fabric.host_link.buffer"] == "50KB") & (table["cc"] == "dctcp")].iloc[0]
    # mean of 1, 2, 3 is 2; sd 1; t(0.975, 2) = 4.3027 over sqrt(3)
    assert row["goodput_bps"] == 2.0 and row["goodput_bps_n"] == 3
    assert row["goodput_bps_ci95"] == pytest.approx(4.302653 / math.sqrt(3), rel=1e-5)
    assert row["fct_p99_s_n"] == 0 and math.isnan(row["fct_p99_s"])
    single = table[(table["fabric.host_link.buffer"] == "200KB") & (table["cc"] == "cubic")].iloc[0]
    assert single["goodput_bps"] == 7.0 and math.isnan(single["goodput_bps_ci95"])
    by_buffer = sweep_table(load_sweep(sweep), "fabric.host_link.buffer", ["goodput_bps"])
    assert list(by_buffer["fabric.host_link.buffer"]) == ["50KB", "200KB"]
    assert list(by_buffer["goodput_bps"]) == [2.5, 6.0] and list(by_buffer["goodput_bps_n"]) == [4, 2]


def test_sweep_table_names_a_missing_column(sweep: Path) -> None:
    with pytest.raises(KeyError, match=r"'links\.bufer'"):
        sweep_table(load_sweep(sweep), "links.bufer", ["goodput_bps"])


def test_the_stored_sample_sweep() -> None:
    df = load_sweep(SAMPLE)
    assert len(df) == 7  # the six runs of sweep-buffer and the killed one
    assert list(df["links.buffer"]) == ["50KB"] * 4 + ["200KB"] * 3
    assert sorted(df["status"]) == ["complete"] * 6 + ["incomplete"]
    complete = df[df["status"] == "complete"]
    assert list(complete["repeat"]) == [0, 1, 2, 0, 1, 2]
    assert set(df["variant"]) == {"buffer=50KB", "buffer=200KB"}
    table = sweep_table(df, "links.buffer", ["goodput_bps"])
    assert list(table["goodput_bps_n"]) == [3, 3]  # the incomplete run is left out
    assert list(table["goodput_bps"]) == [89239996.0, 93060000.0]
