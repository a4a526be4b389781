"""The kernel-telemetry figures' own logic (no root): which burst the microburst figure shows."""

from __future__ import annotations

import pandas as pd

from results.plots.kernel import _largest_rise


def _slots(port: str, t0: float, backlogs: list[tuple[int, int]]) -> list[dict[str, object]]:
    node, dev = port.split(":")
    return [
        {"t": t0 + i * 100e-6, "node": node, "dev": dev, "backlog_max": hi, "backlog_min": lo}
        for i, (hi, lo) in enumerate(backlogs)
    ]


def test_the_largest_rise_within_a_millisecond_not_the_highest_queue() -> None:
    standing = _slots("s1:s1-l2", 10.0, [(150_000, 148_000)] * 50)  # high but flat
    burst = _slots("l1:l1-l1h1", 10.0, [(0, 0)] * 20 + [(9_000, 0), (60_000, 9_000), (58_000, 55_000)])
    slow = _slots("l2:l2-l2h1", 10.0, [(i * 2_000, i * 2_000) for i in range(60)])  # 118 KB over 6 ms
    tab = pd.DataFrame(standing + burst + slow)
    node, dev, t, rise = _largest_rise(tab)
    assert (node, dev) == ("l1", "l1-l1h1") and rise == 60_000 and abs(t - (10.0 + 21 * 100e-6)) < 1e-9
