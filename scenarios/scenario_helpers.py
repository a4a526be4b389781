"""Helpers the scenario tests share: a scenario file's data, what a point's resolved setting implies (payload rate,
frame size, marking threshold, a link's RTT, its TCP flows), queue percentiles from queues.csv, max-min fair rates
over predicted paths, and the reversed-setting switch.

``REVERSED`` (``TESTBED_REVERSED=1``) is the one switch of the test of the test: every test module names the
overrides that undo its setting in ``REVERSED_OVERRIDES`` (scenario name -> overrides, applied by the ``judged``
fixture), so that its assertion must fail; a judge that must pick its points differently then reads ``REVERSED``."""

from __future__ import annotations

import itertools
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import yaml

REVERSED = os.environ.get("TESTBED_REVERSED") == "1"
HERE = Path(__file__).resolve().parent

IP_TCP_HEADERS = 52  # IPv4 20 + TCP 20 + timestamps 12
ETHERNET_HEADER = 14


def scenario_data(name: str) -> dict[str, Any]:
    """scenarios/<name>.yaml as a dict (what the ``experiment`` fixture runs when given no data)."""
    from testbed.spec.scenario import resolve_paths

    data = yaml.safe_load((HERE / f"{name}.yaml").read_text())
    assert isinstance(data, dict)
    return resolve_paths(data, HERE)


def drop_tail(ecn: Any) -> bool:
    """A value of ``fabric.host_link.ecn`` that means no marking: YAML's ``off`` reads as False, an override's as "off"."""
    return ecn is False or ecn == "off"


def frame_bytes(link: dict[str, Any]) -> int:
    """A full frame on a link or port (``mtu`` as in the resolved scenario or the manifest's ports): MTU + L2 header."""
    return int(link["mtu"]) + ETHERNET_HEADER


def payload_bps(link: dict[str, Any]) -> float:
    """The TCP payload rate of a link or port (``rate_bps``, ``mtu``) with full frames."""
    mtu = link["mtu"]
    return link["rate_bps"] * (mtu - IP_TCP_HEADERS) / (mtu + ETHERNET_HEADER)


def host_k_bytes(point: Any) -> int:
    """The step-marking threshold K of the point's host links, in bytes."""
    from testbed.spec.units import parse_size

    link = point.param("fabric.host_link")
    return parse_size(link["marking"]["k"]).to_bytes(link["mtu"])


def link_rtt_s(point: Any, port: str) -> float:
    """The delay the link of ``port`` (``node:dev``) adds to a round trip: its delay both ways, as built."""
    there = point.port(port)
    back = point.hop(there["peer"], there["node"])
    return float(there["delay_s"] + back["delay_s"])


def tcp_flows(point: Any) -> int:
    """How many long TCP flows the point's iperf jobs run (their ``parallel`` streams counted)."""
    jobs = point.param("workload")
    return sum(int(j.get("parallel") or 1) for j in jobs if j["kind"] == "iperf" and j.get("proto", "tcp") == "tcp")


def marks_received_gap(point: Any) -> tuple[float, float, float]:
    """(marks_total, the receivers' CE packets (IpExt.InCEPkts), drops at the marking ports).

    The eBPF marker counts a mark before the packet is enqueued, so a packet marked and then dropped by the full
    queue counts as a mark no receiver sees: marks_total - InCEPkts lies between 0 and the marking ports' drops.
    """
    marking = {f"{r['node']}:{r['dev']}" for r in point.table("marks") if float(r["marks"] or 0) > 0}
    queues = point.summary.get("queues") or {}
    drops = sum(float(queues[k].get("drops") or 0) for k in marking if k in queues)
    return float(point["marks_total"]), float(point["ce_received_pkts_total"]), drops


def port_rows(rows: Any, port: str) -> list[dict[str, Any]]:
    """The rows of one port (``node:dev``) of a queues/links table (a DataFrame or row dicts), in time order."""
    node, dev = port.split(":", 1)
    if isinstance(rows, pd.DataFrame):
        from results.tables import records

        rows = records(rows[(rows["node"] == node) & (rows["dev"] == dev)]) if len(rows) else []
    return sorted((r for r in rows if r.get("node") == node and r.get("dev") == dev), key=lambda r: r["t"])


def backlog_percentiles(
    path: Any, queue: str, pcts: list[float], window: tuple[float, float] | None = None
) -> list[float]:
    """Time-weighted percentiles of one egress queue's backlog (bytes) over ``window`` (default: the traffic window)
    of the run at ``path``: results.timeweighted's quantiles (a row holds its value until the port's next row)."""
    from results.metrics import load_window
    from results.record import load_run
    from results.timeweighted import Held

    run = load_run(path)
    win = window or load_window(run)
    rows = port_rows(run.table("queues"), queue)
    held = Held.of([float(r["t"]) for r in rows], [float(r["backlog_bytes"] or 0) for r in rows], window=win)
    if held.total_s <= 0:
        raise ValueError(f"{queue}: no queue sample holds any time in the window {win}")
    return held.quantiles([p / 100.0 for p in pcts])


def max_min_fair(paths: dict[str, list[str]], capacity: dict[tuple[str, str], float]) -> dict[str, float]:
    """Max-min fair rate of every flow (water-filling) given each flow's node path and each hop's capacity."""
    hops = {f: list(itertools.pairwise(p)) for f, p in paths.items()}
    rate: dict[str, float] = {}
    left = dict(capacity)
    active = set(paths)
    while active:
        users: dict[tuple[str, str], list[str]] = defaultdict(list)
        for f in active:
            for h in hops[f]:
                users[h].append(f)
        share, link = min((left[h] / len(fs), h) for h, fs in users.items())
        for f in users[link]:
            rate[f] = share
            active.discard(f)
            for h in hops[f]:
                left[h] -= share
    return rate


def shared_hops(paths: dict[str, list[str]]) -> dict[tuple[str, str], list[str]]:
    """Hops (node, next node) that carry two or more of the flows: where they collided."""
    users: dict[tuple[str, str], list[str]] = defaultdict(list)
    for f, p in paths.items():
        for h in itertools.pairwise(p):
            users[h].append(f)
    return {h: fs for h, fs in sorted(users.items()) if len(fs) > 1}


def steady_window(path: Any, skip_s: float) -> tuple[float, float]:
    """From ``skip_s`` after the last flow started to the first flow's end (every flow running, slow start over)."""
    from results.record import load_run

    flows = load_run(path).rows("flows")
    if not flows:
        raise ValueError(f"{path}: no flows recorded")
    t0 = max(float(f["t_start"]) for f in flows) + skip_s
    t1 = min(float(f["t_end"]) for f in flows)
    if t1 - t0 < 1.0:
        raise ValueError(f"{path}: every flow ran together for under {skip_s + 1:g} s; lengthen the flows")
    return t0, t1


def port_utilization(path: Any, port: str, window: tuple[float, float]) -> float:
    """Bytes an egress port (``node:dev``) sent over ``window``, over what its shaped rate could send (wire bytes,
    the L2 header included, as HTB counts them); from links.csv, interpolated at the window's ends."""
    from results.record import load_run

    run = load_run(path)
    rows = port_rows(run.table("links"), port)
    t = np.array([r["t"] for r in rows], float)
    tx = np.array([r["tx_bytes"] for r in rows], float)
    if t.size < 2 or t[0] > window[0] or t[-1] < window[1]:
        raise ValueError(f"{port}: the link samples do not cover {window}")
    rate = float(run.summary["links"][port]["rate_bps"])
    sent = float(np.interp(window[1], t, tx) - np.interp(window[0], t, tx))
    return sent * 8 / rate / (window[1] - window[0])


def queue_empty_share(path: Any, port: str, window: tuple[float, float]) -> float:
    """The share of ``window`` an egress queue (``node:dev``) held no packet: queues.csv's backlog, time-weighted
    (a row holds until the port's next one)."""
    from results.record import load_run
    from results.timeweighted import share_above

    rows = port_rows(load_run(path).table("queues"), port)
    t = [float(r["t"]) for r in rows]
    backlog = [float(r["backlog_bytes"] or 0) for r in rows]
    return 1.0 - share_above(t, backlog, 0.0, window=window)


def srtt_min_s(path: Any) -> float:
    """The smallest smoothed RTT any flow reported (flow_samples.csv): the path's base RTT plus what queue the
    flow never saw drain."""
    from results.record import load_run

    rtts = [float(r["rtt_us"]) for r in load_run(path).rows("flow_samples") if r.get("rtt_us")]
    if not rtts:
        raise ValueError(f"{path}: no RTT samples in flow_samples.csv")
    return min(rtts) / 1e6


def drops_in_window(path: Any, port: str, window: tuple[float, float]) -> float:
    """Packets an egress port (``node:dev``) dropped within ``window`` (queues.csv's cumulative counter at its ends)."""
    from results.record import load_run

    rows = port_rows(load_run(path).table("queues"), port)
    before = [float(r["drops"] or 0) for r in rows if r["t"] <= window[0]]
    upto = [float(r["drops"] or 0) for r in rows if r["t"] <= window[1]]
    if not upto:
        raise ValueError(f"{port}: no queue samples before {window[1]}")
    return upto[-1] - (before[-1] if before else 0.0)
