"""The CSV tables of a run record: their columns and descriptions (schema ``testbed-run/1``), a writer, a reader.

The column lists (``testbed.spec.schemas``) are the contract with the samplers and generators;
docs/record-format.md describes every column. Cells are written with ``repr`` precision for floats so nothing
measured is rounded away; booleans are written as 0/1.
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from testbed.errors import TestbedError


class TableError(TestbedError, ValueError):
    """A row that does not fit its table's columns."""


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, float):
        return repr(value)
    return str(value)


class TableWriter:
    """Appends rows to one CSV file with a header; flushes at least every ``flush_interval`` seconds.

    A crash loses at most the rows of the last interval; ``flush()`` forces them out (callers flush at phase
    ends). Unknown or missing columns raise ``TableError`` instead of being dropped silently.
    """

    def __init__(self, path: Path, columns: Iterable[str], flush_interval: float = 0.25):
        self.path = path
        self.columns = tuple(columns)
        self.flush_interval = flush_interval
        self.rows_written = 0
        exists = path.exists() and path.stat().st_size > 0
        self._fh = open(path, "a", newline="", encoding="utf-8")  # noqa: SIM115 - held open for the run
        self._csv = csv.writer(self._fh, lineterminator="\n")
        if not exists:
            self._csv.writerow(self.columns)
            self._fh.flush()
        self._last_flush = time.monotonic()

    def write(self, row: Mapping[str, Any]) -> None:
        extra = set(row) - set(self.columns)
        if extra:
            raise TableError(
                f"{self.path.name}: unknown column(s) {sorted(extra)} (columns: {', '.join(self.columns)})"
            )
        self._csv.writerow([_cell(row.get(c)) for c in self.columns])
        self.rows_written += 1
        if time.monotonic() - self._last_flush >= self.flush_interval:
            self.flush()

    def write_many(self, rows: Iterable[Mapping[str, Any]]) -> None:
        for row in rows:
            self.write(row)

    def flush(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            self._last_flush = time.monotonic()

    def close(self) -> None:
        if not self._fh.closed:
            self._fh.flush()
            self._fh.close()

    def __enter__(self) -> TableWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def parse_cell(text: str) -> Any:
    """'' -> None, integers -> int, other numbers -> float, anything else stays a string."""
    if text == "":
        return None
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


class Table(list):  # type: ignore[type-arg]
    """Rows of one table (list of dicts with typed cells); ``reason`` says why it is empty or was cut short."""

    def __init__(self, rows: Iterable[dict[str, Any]] = (), columns: tuple[str, ...] = (), reason: str | None = None):
        super().__init__(rows)
        self.columns = columns
        self.reason = reason

    def column(self, name: str) -> np.ndarray:
        """One column as a numpy array (float with NaN for empty cells when numeric, else object)."""
        values = [r.get(name) for r in self]
        if all(v is None or isinstance(v, (int, float)) for v in values):
            return np.array([np.nan if v is None else float(v) for v in values], dtype=float)
        return np.array(values, dtype=object)


def read_table(path: Path) -> Table:
    """Read a CSV table; a missing file gives an empty table with a reason; a torn last row (crash) is dropped."""
    if not path.exists():
        return Table(reason=f"{path.name} was not recorded in this run")
    text = path.read_text(encoding="utf-8", errors="replace")
    torn = 0
    if text and not text.endswith("\n"):  # the writer always ends a row with a newline: the last one is torn
        text = text[: text.rfind("\n") + 1]
        torn = 1
    reader = csv.reader(io.StringIO(text))
    try:
        header = tuple(next(reader))
    except StopIteration:
        return Table(reason=f"{path.name} is empty (no header)")
    rows: list[dict[str, Any]] = []
    for fields in reader:
        if len(fields) != len(header):
            torn += 1
            continue
        rows.append({k: parse_cell(v) for k, v in zip(header, fields, strict=True)})
    reason = None
    if torn:
        reason = f"{path.name}: {torn} malformed row(s) dropped (torn write?)"
    elif not rows:
        reason = f"{path.name} has a header but no rows"
    return Table(rows, header, reason)
