"""The RTT CDF counts every probe sent under load, as the summary does: a lost probe keeps the curve below 1."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np
import pandas as pd

from results.plots import _rtts, cdf_rtt
from results.style import StyleRegistry


class _Run:
    """A record with an rtt table and no traffic tables (so every probe is 'under load')."""

    def __init__(self, rtt: pd.DataFrame):
        self._rtt = rtt

    def table(self, name: str) -> pd.DataFrame:
        return self._rtt if name == "rtt" else pd.DataFrame()


def _row(label: str, rtts_s: list[float | None]) -> Any:
    tab = pd.DataFrame({"t_send": np.arange(len(rtts_s), dtype=float), "rtt_s": rtts_s})
    return SimpleNamespace(label=label, runs=[_Run(tab)])


def test_a_lost_probe_is_an_infinite_round_trip() -> None:
    got = _rtts(_row("a", [0.001, None, 0.003, 0.002]))
    assert sorted(got.tolist()) == [0.001, 0.002, 0.003, np.inf]


def test_the_curve_ends_at_the_share_answered_and_the_legend_says_how_many_were_lost() -> None:
    rows = [_row("ecn", [0.001, 0.002, 0.003, 0.004]), _row("droptail", [0.001, None, 0.003, None])]
    fig = cdf_rtt(SimpleNamespace(rows=rows), StyleRegistry())
    steps = {line.get_label(): line for line in fig.axes[0].get_lines() if not line.get_label().startswith("_")}
    assert set(steps) == {"ecn", "droptail (2 of 4 lost)"}
    assert steps["ecn"].get_ydata()[-1] == 1.0
    assert steps["droptail (2 of 4 lost)"].get_ydata()[-1] == 0.5
    assert "2 never answered" in fig.axes[0].get_title()
