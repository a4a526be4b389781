"""A queues/links table split by port: each port's rows in time order, as numpy arrays.

The guardrails and the fabric metrics walk every port's series; one stable sort and one split serve them all,
where filtering the frame once per port would cost a pass over the whole table per port.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from results.tables import numbers

PortRows = dict[str, np.ndarray]  # one port's rows in time order: column -> float array (NaN where empty)


def in_window(df: pd.DataFrame, col: str, window: tuple[float, float] | None) -> pd.DataFrame:
    """Rows whose ``col`` is a number inside ``window`` (any number when there is none), ``col`` made float."""
    t = numbers(df, col)
    keep = t.notna() if window is None else (t >= window[0]) & (t <= window[1])
    return df[keep].assign(**{col: t[keep]})


def split_ports(
    df: pd.DataFrame, cols: tuple[str, ...], window: tuple[float, float] | None = None
) -> dict[tuple[str, str], PortRows]:
    """``(node, dev)`` -> that port's rows with a time (inside ``window`` when given), sorted by time (stable), as
    arrays of ``t`` and ``cols``; ports in the order they first appear."""
    df = in_window(df, "t", window)
    if df.empty:
        return {}
    node_codes, nodes = pd.factorize(df["node"].astype(str))
    dev_codes, devs = pd.factorize(df["dev"].astype(str))
    codes, pairs = pd.factorize(node_codes.astype(np.int64) * len(devs) + dev_codes)  # first-seen order
    t = df["t"].to_numpy(float)
    order = np.lexsort((t, codes))  # by port, then time; ties keep the table's order
    arrays = {"t": t[order], **{c: numbers(df, c).to_numpy()[order] for c in cols}}
    cuts = np.flatnonzero(np.diff(codes[order])) + 1
    bounds = zip(np.concatenate(([0], cuts)), np.concatenate((cuts, [len(order)])), strict=True)
    out = {}
    for i, j in bounds:
        node, dev = divmod(int(pairs[codes[order[i]]]), len(devs))
        out[(str(nodes[node]), str(devs[dev]))] = {c: v[i:j] for c, v in arrays.items()}
    return out


def first_last(v: np.ndarray) -> tuple[float, float] | None:
    """The first and last numbers of a series (NaN skipped), None when it has none."""
    have = np.flatnonzero(~np.isnan(v))
    return (float(v[have[0]]), float(v[have[-1]])) if have.size else None
