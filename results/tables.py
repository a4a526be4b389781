"""The CSV tables of a run record: a row writer for the run, a columnar reader for everything after it.

The column lists (``testbed.spec.schemas``) are the contract with the samplers and generators;
docs/record-format.md describes every column. Cells are written with ``repr`` precision for floats so nothing
measured is rounded away; booleans are written as 0/1. A table is read back as one pandas DataFrame (pandas' C
parser reads a 120,000-row queues.csv in a small fraction of a second); ``reason(df)`` says why a table is empty or
was cut short, and ``records(df)`` gives the rows as plain dicts for the few readers that want rows.
"""

from __future__ import annotations

import csv
import io
import math
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

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


def reason(df: pd.DataFrame) -> str | None:
    """Why a table read by ``read_table`` is empty or was cut short (None when it is whole and has rows)."""
    value = df.attrs.get("reason")
    return None if value is None else str(value)


def _empty(why: str, columns: Iterable[str] = ()) -> pd.DataFrame:
    df = pd.DataFrame(columns=list(columns))
    df.attrs["reason"] = why
    return df


def _count_rows(data: bytes) -> int:
    """Data rows as the csv module counts them (quoted cells may hold newlines), for the dropped-row count."""
    return sum(1 for _ in csv.reader(io.StringIO(data.decode("utf-8", errors="replace")))) - 1


def read_table(path: Path, text: Iterable[str] = (), columns: Iterable[str] = ()) -> pd.DataFrame:
    """Read a CSV table as columns; ``text`` names columns read as strings whatever they hold (the others are typed
    by what they hold, NaN for an empty cell). A missing file gives an empty frame (with ``columns``) and a reason;
    a torn last row (a crash mid-write: the writer always ends a row with a newline) and malformed rows are dropped,
    with a reason."""
    if not path.exists():
        return _empty(f"{path.name} was not recorded in this run", columns)
    data = path.read_bytes()
    torn = 0
    if data and not data.endswith(b"\n"):
        data = data[: data.rfind(b"\n") + 1]
        torn = 1
    first = data.split(b"\n", 1)[0].decode("utf-8", errors="replace")
    if not first:
        return _empty(f"{path.name} is empty (no header)", columns)
    header = next(csv.reader([first]))
    texts = set(text) & set(header)
    df = pd.read_csv(
        io.BytesIO(data),
        dtype={c: object for c in texts},
        keep_default_na=False,
        na_values={c: [""] for c in header},
        on_bad_lines="skip",
        float_precision="round_trip",  # the writer writes repr(float): read back the very same float
        encoding="utf-8",
        encoding_errors="replace",
    )
    lines = data.count(b"\n") - 1
    if len(df) != lines:  # rows skipped for too many cells, or quoted newlines: count as the csv module would
        torn += max(0, _count_rows(data) - len(df))
    df.attrs["text"] = sorted(texts)
    if torn:
        df.attrs["reason"] = f"{path.name}: {torn} malformed row(s) dropped (torn write?)"
    elif df.empty:
        df.attrs["reason"] = f"{path.name} has a header but no rows"
    return df


def _plain(v: Any, parse: bool) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    if isinstance(v, np.generic):
        v = v.item()
    if parse and isinstance(v, str):
        return parse_cell(v)
    return v


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """The rows of a table as dicts of plain Python values: None for an empty cell, int/float/str as the old
    row reader typed each cell (a mixed column's numbers are numbers again)."""
    text = set(df.attrs.get("text") or ())
    cols = list(df.columns)
    parse = [c not in text and df[c].dtype == object for c in cols]
    out = []
    for values in zip(*(df[c].tolist() for c in cols), strict=True):
        out.append({c: _plain(v, p) for c, v, p in zip(cols, values, parse, strict=True)})
    return out


def numbers(df: pd.DataFrame, col: str) -> pd.Series:
    """One column as floats (NaN where empty, missing or not a number): what arithmetic on a column wants."""
    if col not in df.columns:
        return pd.Series(np.nan, index=df.index, dtype=float)
    s = df[col]
    if s.dtype.kind in "fiub":
        return s.astype(float)
    return pd.to_numeric(s, errors="coerce").astype(float)
