"""The summary being built from a run's tables: every metric module writes into one ``Summary``.

A statistic of samples (a percentile, a median, a mean) says how many it rests on: ``put(name, value, n=...)``
records n under ``summary["samples"][name]``. A percentile the sample cannot support (``results.stats.
supported_quantile``: p99 from fewer than 100 values, p99.9 from fewer than 1,000) is not a number but null with
its reason in ``not_applicable``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from results.stats import supported_percentiles


class Summary(dict):  # type: ignore[type-arg]
    """The summary being built: ``put`` a value (with ``n``, the samples it rests on) or ``na`` a reason."""

    def __init__(self) -> None:
        super().__init__()
        self["samples"] = {}
        self["not_applicable"] = {}

    def put(self, name: str, value: Any, n: int | None = None) -> None:
        self[name] = value
        if n is not None:
            self["samples"][name] = int(n)

    def na(self, name: str, reason: str, n: int | None = None) -> None:
        self[name] = None
        self["not_applicable"][name] = reason
        if n is not None:
            self["samples"][name] = int(n)

    def percentiles(self, values: Sequence[float] | np.ndarray, named: Mapping[str, float]) -> int:
        """Put each percentile ``named`` (summary key -> percentile, 0..100) of ``values`` with its n, or null with
        the reason the sample cannot support it; returns n (NaN values are not counted)."""
        got, reasons, n = supported_percentiles(values, list(named.values()))
        for name, value, why in zip(named, got, reasons, strict=True):
            if why is None:
                self.put(name, value, n=n)
            else:
                self.na(name, why, n=n)
        return n

    def finished(self) -> dict[str, Any]:
        """The summary as a plain dict, ``samples`` and ``not_applicable`` last (readable JSON)."""
        out = dict(self)
        tail = {k: out.pop(k) for k in ("samples", "not_applicable")}
        return {**out, **tail}


def percentile_fields(values: Sequence[float] | np.ndarray, named: Mapping[str, float]) -> dict[str, Any]:
    """A nested summary entry (per job, per class): ``n`` and each percentile ``named`` (key -> 0..100), None where
    the sample cannot support it, with the reasons under ``not_applicable`` (only when there is one)."""
    got, reasons, n = supported_percentiles(values, list(named.values()))
    out: dict[str, Any] = {"n": n, **dict(zip(named, got, strict=True))}
    why = {k: r for k, r in zip(named, reasons, strict=True) if r is not None}
    if why:
        out["not_applicable"] = why
    return out
