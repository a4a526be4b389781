"""Fidelity guardrails: did the emulator keep up? Pure functions over a run's recorded tables.

``evaluate(queues, links, cpu, ports, sampler_health=None)`` -> ``{"faithful": bool, "checks": [...]}`` where each
check is ``{"name", "ok", "value", "threshold", "reason"}`` (plus ``details``). ``ok`` is True, False, or None
(could not be judged: the reason says why; None never makes a run unfaithful). Inputs are the rows of queues.csv,
links.csv and cpu.csv as dicts (typed as ``results.record`` reads them, or strings) and ``manifest["fabric"]
["ports"]`` (``node``, ``dev``, ``rate_bps``, ``mtu``). ``evaluate_run(run)`` does it for a loaded record.

Checks (thresholds in ``Thresholds``):
- ``bottleneck_rate``: a port is *busy* in a window of ``window_s`` when its queue was non-empty
  (``backlog_pkts > 0``, sample-and-hold between rows, time-weighted) for at least ``busy_share`` of the window.
  Sample-and-hold is only trusted between rows at most ``hold_max_s`` apart: over a longer gap (coarse sampling,
  e.g. 50 Hz in the TCG guest) a queue seen non-empty may have drained and idled in between, so the interval counts
  busy only for as long as the backlog seen at its start takes to drain at the port's rate (a lower bound).
  Over each port's busy windows, delivered = (tx_bytes delta) x 8 / busy time, compared with ``rate_bps``
  directly (HTB and the qdisc's tx_bytes both count the 14-byte Ethernet header). A busy port delivering less
  than ``rate_min`` of its rate means the machine, not the link, was the bottleneck. Time a port spent paused by
  PFC (pauses.csv) is not busy time: it holds its queue by design.
- ``cpu_saturation``: share of cpu.csv samples in which every core was at least ``cpu_busy`` busy.
- ``sampler``: achieved queue-sampling rate against the target and the longest gap (from sampler_health.json when
  given; otherwise only the gap between rows, which the sampler writes at least every keyframe).
- ``sender_backlog``: a backlogged iperf3 sender whose socket ran out of data, or was held by its receive window
  or send buffer, was short of CPU (``results.fidelity.senders``).
- ``gso_superpackets``: a queue whose backlog_bytes / backlog_pkts exceeds one frame (MTU + 14, plus
  ``GSO_SLACK`` for header accounting) held packets bigger than a frame (GSO/GRO super-packets), so per-packet queue
  figures are meaningless.
- ``dequeue_gap`` (runs with ``telemetry.bpf_queues``): packets left a busy port when the link would have sent them
  (``results.fidelity.gaps``, Mininet-HiFi's direct check). When it passes, a failed ``cpu_saturation`` stays in
  the verdict as a warning (``waived_by``, listed in ``warnings``) and does not make the run unfaithful.
- ``pfc`` (runs with lossless classes): the PFC controller reacted within the time the headroom was sized for
  (``results.fidelity.pfc``).
- ``machine_stalls`` (runs with the per-CPU canary): the run's stall figures (each event, the share of the window
  stalled, the steal share), and no stall that could have moved its figures (``results.fidelity.machine``).
- ``stalls`` and ``slow_iterations`` (runs whose rank workers had the stall watchdog, stalls.csv): every flow that
  went two RTOs without progress has a cause in the record, and the experiment made it; every iteration over
  ``slow_iter_factor`` x its job's median has a cause (``results.fidelity.stalls``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from results.checks import Rows, Thresholds, as_frame, check, verdict, waive
from results.fidelity.gaps import check_dequeue_gaps
from results.fidelity.machine import check_machine_stalls, stall_events
from results.fidelity.pfc import check_pfc
from results.fidelity.senders import check_senders
from results.fidelity.stalls import check_slow_iterations, check_stalls
from results.ports import PortRows, in_window, split_ports
from results.record import load_run
from results.stall_causes import StallTables, judge_stalls
from results.tables import numbers
from testbed.plan import guestfit
from testbed.spec.link import ETH_HEADER

# A one-segment TCP skb is accounted with one more header set (seen here: 9080 B for one 9000-MTU frame, +66 B);
# a real super-packet adds at least one more MSS, so an average above frame + 128 B is one.
GSO_SLACK = 128
# The kernel's qdisc dump (tc_fill_qdisc) reads qlen before it copies the backlog, without the qdisc lock, so a dump
# can count one packet more in bytes than in packets (more often in the TCG guest, whose dumps are slow; the
# samples seen: docs/bench.md, "Reading a queue's bytes apart"). A super-packet queue is one whose bytes exceed
# (packets + 1) frames; real GSO skbs (up to 64 KB) exceed that many times over.
READ_APART = "backlog_bytes > (backlog_pkts + 1) x frame"


def _tx_series(q: PortRows, lk: PortRows | None) -> np.ndarray | None:
    """tx_bytes at each queue row: the qdisc's own counter, else the interface counter interpolated."""
    tx = q["tx_bytes"]
    if not np.isnan(tx).any():
        return tx
    if lk is None or not len(lk["t"]):
        return None
    return np.interp(q["t"], lk["t"], np.nan_to_num(lk["tx_bytes"], nan=0.0))


def paused_time(t: np.ndarray, pauses: np.ndarray) -> np.ndarray:
    """Seconds of each interval between consecutive times ``t`` that fall in a pause ((start, end) rows, one port's:
    they do not overlap)."""
    if not len(pauses):
        return np.zeros(max(len(t) - 1, 0))
    order = np.argsort(pauses[:, 0])
    starts, ends = pauses[order, 0], pauses[order, 1]
    done = np.concatenate(([0.0], np.cumsum(ends - starts)))  # paused seconds before each pause
    xs = np.column_stack((starts, ends)).ravel()
    ys = np.column_stack((done[:-1], done[1:])).ravel()
    acc = np.interp(t, xs, ys, left=0.0, right=float(done[-1]))
    return np.diff(acc)


def port_windows(
    q: PortRows, tx: np.ndarray, rate_bps: float, th: Thresholds, pauses: np.ndarray | None = None
) -> list[dict[str, float]]:
    """Per window of ``th.window_s``: covered time, busy time, delivered bytes, and their rate over the busy time as a
    fraction of ``rate_bps`` (``ratio``). Time in ``pauses`` (PFC pauses of the port, (start, end) rows) is not
    busy: a paused port holds its queue by design."""
    t = q["t"]
    if len(t) < 2:
        return []
    pkts, nbytes = np.nan_to_num(q["backlog_pkts"], nan=0.0), np.nan_to_num(q["backlog_bytes"], nan=0.0)
    busy = (pkts > 0) | (nbytes > 0)
    dt = np.diff(t)
    drain = nbytes[:-1] * 8 / rate_bps if rate_bps > 0 else np.zeros_like(dt)
    # busy time of each interval: sample-and-hold when rows are close, else what the seen backlog guarantees
    busy_dt = np.where(dt <= th.hold_max_s, np.where(busy[:-1], dt, 0.0), np.minimum(dt, drain))
    if pauses is not None:
        busy_dt = np.maximum(busy_dt - paused_time(t, pauses), 0.0)
    db = np.diff(tx)
    valid = (dt > 0) & (db >= 0)  # a negative delta is a counter reset
    win = ((t[:-1] - t[0]) // th.window_s).astype(int)
    spans = np.bincount(win, weights=np.where(valid, dt, 0.0))
    busy_s = np.bincount(win, weights=np.where(valid, busy_dt, 0.0))
    sent = np.bincount(win, weights=np.where(valid, db, 0.0))
    out = []
    for w in np.unique(win):
        span, busy_t, nb = float(spans[w]), float(busy_s[w]), float(sent[w])
        if span < 0.5 * th.window_s:
            continue
        out.append(
            {
                "t": float(t[0] + w * th.window_s),
                "span_s": span,
                "busy_s": busy_t,
                "bytes": nb,
                "ratio": nb * 8 / busy_t / rate_bps if rate_bps > 0 and busy_t > 0 else float("nan"),
            }
        )
    return out


def _rate_floor(busy_s: float, th: Thresholds) -> float:
    return th.rate_min if busy_s >= th.short_busy_s else th.rate_min_short


def check_bottlenecks(
    queues: Rows,
    ports: list[Mapping[str, Any]],
    links: Rows = (),
    th: Thresholds = Thresholds(),
    window: tuple[float, float] | None = None,
    pauses: Mapping[tuple[str, str], np.ndarray] | None = None,
) -> dict[str, Any]:
    """Each busy port's delivered rate against its own; ``pauses``: PFC pause intervals by (node, dev), not busy."""
    qby = split_ports(as_frame(queues), ("backlog_pkts", "backlog_bytes", "tx_bytes"), window)
    lby = split_ports(as_frame(links), ("tx_bytes",), window)
    per: dict[str, dict[str, Any]] = {}
    skipped = []
    for p in ports:
        key = (str(p["node"]), str(p["dev"]))
        rows = qby.get(key)
        name = f"{key[0]}:{key[1]}"
        if rows is None:
            continue
        tx = _tx_series(rows, lby.get(key))
        if tx is None:
            skipped.append(f"{name} (no tx_bytes)")
            continue
        rate = float(p["rate_bps"])
        wins = [
            w
            for w in port_windows(rows, tx, rate, th, (pauses or {}).get(key))
            if w["busy_s"] >= th.busy_share * w["span_s"]
        ]
        if not wins:
            continue
        busy_t = sum(w["busy_s"] for w in wins)
        ratio = sum(w["bytes"] for w in wins) * 8 / busy_t / rate
        per[name] = {
            "rate_bps": rate,
            "busy_s": round(busy_t, 3),
            "busy_windows": len(wins),
            "ratio": round(ratio, 4),
            "worst_window": round(min(w["ratio"] for w in wins), 4),
        }
    if not per:
        why = "no queue was non-empty for a whole window, so no saturated bottleneck to check"
        return check(
            "bottleneck_rate", None, None, th.rate_min, why + (f"; skipped {', '.join(skipped)}" if skipped else "")
        )
    bad = {n: d for n, d in per.items() if d["ratio"] < _rate_floor(d["busy_s"], th)}
    worst = min(per, key=lambda n: per[n]["ratio"])
    if bad:
        parts = [
            f"{n} delivered {d['ratio']:.2f} of {d['rate_bps'] / 1e6:g} Mbit/s over {d['busy_s']:g} s busy"
            for n, d in sorted(bad.items(), key=lambda kv: kv[1]["ratio"])
        ]
        reason = f"{len(bad)} of {len(per)} busy ports fell short (CPU-bound emulation): " + "; ".join(parts[:5])
    else:
        reason = (
            f"{len(per)} busy ports delivered >= {th.rate_min} of their rate (worst {worst}: {per[worst]['ratio']:.3f})"
        )
    return check("bottleneck_rate", not bad, per[worst]["ratio"], th.rate_min, reason, per)


def check_cpu(cpu: Rows, th: Thresholds = Thresholds(), window: tuple[float, float] | None = None) -> dict[str, Any]:
    df = in_window(as_frame(cpu), "t", window)
    busy = numbers(df, "busy")
    df = df[busy.notna()].assign(busy=busy[busy.notna()])
    is_all = df["cpu"].astype(str) == "all" if not df.empty else pd.Series(dtype=bool)
    alls = df[is_all].groupby("t", sort=False)["busy"].last()  # one reading per time; a repeat overwrites
    per_core = df[~is_all].groupby("t", sort=False)["busy"]
    cores = per_core.size()
    samples = per_core.min() if not cores.empty else alls
    if samples.empty:
        return check("cpu_saturation", None, None, th.cpu_share_max, "cpu.csv has no samples in the run window")
    share = float((samples >= th.cpu_busy).sum()) / len(samples)
    mean_all = float(np.mean(alls.to_numpy())) if not alls.empty else float(np.mean(samples.to_numpy()))
    ncores = int(cores.max()) if not cores.empty else 1
    ok = share <= th.cpu_share_max
    reason = (
        f"all {ncores} cores >= {th.cpu_busy:.0%} busy in {share:.0%} of {len(samples)} samples "
        f"(mean {mean_all:.0%})" + ("" if ok else ": the machine ran out of CPU, results are the emulator's limit")
    )
    return check(
        "cpu_saturation",
        ok,
        round(share, 4),
        th.cpu_share_max,
        reason,
        {"mean_busy": round(mean_all, 4), "samples": len(samples)},
    )


def check_sampler(
    health: Mapping[str, Any] | None,
    queues: Rows = (),
    th: Thresholds = Thresholds(),
    window: tuple[float, float] | None = None,
) -> dict[str, Any]:
    if health and health.get("target_hz"):
        target = float(health["target_hz"])
        rate = float(health.get("rate_hz_min") or 0.0)
        gaps = [float(s.get("gap_max_ms", 0.0)) / 1e3 for s in (health.get("per_netns") or {}).values()]
        gap = max(gaps, default=0.0)
        missing = health.get("missing_samples") or {}
        ratio = rate / target
        ok = ratio >= th.sampler_rate_min and gap <= th.sampler_gap_max_s and not missing
        reason = f"{rate:.0f} of {target:.0f} Hz ({ratio:.2f}), longest gap {gap * 1e3:.1f} ms"
        if missing:
            reason += f", samples missing on {', '.join(sorted(missing))[:200]}"
        return check(
            "sampler",
            ok,
            round(ratio, 4),
            th.sampler_rate_min,
            reason,
            {"gap_max_s": gap, "gap_threshold_s": th.sampler_gap_max_s},
        )
    # Without the health file: rows are written on change or every keyframe, so only a gap can be judged.
    rows = in_window(as_frame(queues), "t", window)
    if rows.empty:
        return check("sampler", None, None, th.sampler_rate_min, "no sampler health and no queues.csv rows")
    times = rows[["t"]].assign(node=rows["node"].astype(str)).drop_duplicates().sort_values(["node", "t"])
    gaps = times.groupby("node", sort=False)["t"].diff()
    gap = float(gaps.max()) if gaps.notna().any() else 0.0
    limit = th.keyframe_s * 1.5
    ok = gap <= limit
    return check(
        "sampler",
        None if ok else False,
        None,
        th.sampler_rate_min,
        f"no sampler_health.json: rate not judged; longest gap between a node's rows {gap * 1e3:.1f} ms (limit {limit * 1e3:.0f} ms)",
        {"gap_max_s": gap},
    )


def check_gso(
    queues: Rows, ports: list[Mapping[str, Any]], packet_level: bool = True, share_max: float = 0.001
) -> dict[str, Any]:
    frames = {(str(p["node"]), str(p["dev"])): int(p.get("mtu") or 1500) + ETH_HEADER for p in ports}
    default = max(frames.values(), default=1500 + ETH_HEADER)
    q = as_frame(queues)
    pk, by = numbers(q, "backlog_pkts"), numbers(q, "backlog_bytes")
    held = (pk > 0) & by.notna()
    q, pk, by = q[held], pk[held], by[held]
    nonempty = len(q)
    keys = q["node"].astype(str) + ":" + q["dev"].astype(str) if nonempty else pd.Series(dtype=object)
    frame_of = {f"{n}:{d}": f for (n, d), f in frames.items()}
    frame = keys.map(frame_of).fillna(default) if nonempty else pd.Series(dtype=float)
    avg = by / pk
    worst = float(avg.max()) if nonempty else 0.0
    big = by > (pk + 1) * frame + GSO_SLACK  # one packet of slack: qlen and backlog are read apart (READ_APART)
    seen: dict[str, dict[str, Any]] = {}
    if big.any():
        over = pd.DataFrame({"key": keys[big], "avg": avg[big], "frame": frame[big]})
        for key, g in over.groupby("key", sort=False):
            seen[str(key)] = {
                "samples": len(g),
                "max_avg_bytes": round(float(g["avg"].max()), 1),
                "frame": int(g["frame"].iloc[0]),
            }
    if nonempty == 0:
        return check("gso_superpackets", None, None, default, "no non-empty queue sample to judge")
    if not seen:
        return check(
            "gso_superpackets",
            True,
            round(worst, 1),
            default,
            f"average queued packet <= one frame ({default} B) in all {nonempty} non-empty samples",
        )
    n = sum(d["samples"] for d in seen.values())
    share = n / nonempty
    reason = (
        f"{len(seen)} queues held packets bigger than a frame (max average {max(d['max_avg_bytes'] for d in seen.values()):.0f} B "
        f"> {default} B) in {n} of {nonempty} non-empty samples ({share:.3%}, tolerated up to {share_max:.1%} or one sample)"
    )
    ok = n <= max(1.0, share_max * nonempty)  # one stray sample is tolerated however coarse the sampling
    if not ok:
        reason += ": GSO/GRO super-packets, so per-packet queue figures are not packet-level"
    if not packet_level:
        reason += " (allowed: this run did not ask for packet-level queues)"
    return check("gso_superpackets", ok or not packet_level, round(worst, 1), default, reason, seen)


def evaluate(
    queues: Rows,
    links: Rows,
    cpu: Rows,
    ports: list[Mapping[str, Any]],
    sampler_health: Mapping[str, Any] | None = None,
    th: Thresholds = Thresholds(),
    window: tuple[float, float] | None = None,
    packet_level: bool = True,
    senders: Rows | None = None,
    flows: Rows = (),
    senders_watched: bool = False,
    qtelem_health: Mapping[str, Any] | None = None,
    pauses: Rows = (),
    pfc: Mapping[str, Any] | None = None,
    stall_tables: StallTables | None = None,
    machine_stalls: Mapping[str, Any] | None = None,
    cpu_stalls: Rows = (),
    steps: Rows = (),
    qslots: Rows = (),
) -> dict[str, Any]:
    """Every guardrail over one run's tables; ``window`` (t0, t1) limits them to the traffic's time span.
    ``pauses`` (pauses.csv): PFC pauses, not busy time for bottleneck_rate; ``pfc`` (manifest ``pfc``): its check.
    ``senders`` (senders.csv) and ``flows``: the sender_backlog check, left out when ``senders`` is None.
    ``qtelem_health`` (the kernel telemetry's, manifest ``qtelem_health``): the dequeue_gap check, which, when it
    passes, turns a failed cpu_saturation into a warning: the packets left on time although the cores were busy.
    ``stall_tables`` (a record with stalls.csv): the stalls and slow_iterations checks. ``machine_stalls`` (the
    canary's health, manifest ``machine_stalls``) with ``cpu_stalls`` and ``steps``: the machine_stalls check; with
    ``qslots`` (the kernel telemetry's slots) too, the dequeue_gap check sets apart the late gaps of its stalls."""
    q, lk, c = as_frame(queues), as_frame(links), as_frame(cpu)
    cpu_check = check_cpu(c, th, window)
    checks = [
        check_bottlenecks(q, ports, lk, th, window, pause_intervals(pauses)),
        cpu_check,
        check_sampler(sampler_health, q, th, window),
        check_gso(q, ports, packet_level, th.gso_share_max),
    ]
    if machine_stalls is not None:
        checks.append(check_machine_stalls(cpu_stalls, machine_stalls, window, steps, ports, th))
    if senders is not None:
        checks.append(check_senders(senders, flows, th, senders_watched))
    if pfc is not None:
        checks.append(check_pfc(pfc))
    if stall_tables is not None:
        judged = judge_stalls(stall_tables, q, lk, c, th)
        checks.append(check_stalls(stall_tables, th=th, judged=judged))
        checks.append(check_slow_iterations(stall_tables, q, th, judged))
    if qtelem_health is not None:
        per_cpu = (machine_stalls or {}).get("per_cpu") or {}
        stalls = stall_events(cpu_stalls, len(per_cpu)) if per_cpu else []
        gaps = check_dequeue_gaps(qtelem_health, ports, th, qslots, stalls)
        checks.append(gaps)
        if gaps["ok"] is True and cpu_check["ok"] is False:
            waive(cpu_check, gaps["name"])
    return verdict(checks)


def evaluate_run(run: Any, sampler_health: Mapping[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
    """``evaluate`` on a run record: a directory path, or a ``results.record.Run`` (``.manifest``, ``.table``).

    Ports come from ``manifest.fabric.ports``; the sampler's health from ``sampler_health`` if given, else the
    manifest's ``sampler_health``, else ``sampler_health.json`` in the run directory or its ``raw/``.
    ``packet_level`` defaults to the scenario's ``transport.gso_max_segs == 1``.
    """
    if isinstance(run, (str, Path)):
        run = load_run(Path(run))
    manifest = run.manifest
    if sampler_health is None:
        sampler_health = manifest.get("sampler_health")
    if sampler_health is None and getattr(run, "path", None) is not None:
        for cand in (Path(run.path) / "sampler_health.json", Path(run.path) / "raw" / "sampler_health.json"):
            if cand.exists():
                sampler_health = json.loads(cand.read_text())
                break
    changed = _rate_changed(manifest)
    ports = [p for p in (manifest.get("fabric") or {}).get("ports") or [] if (p["node"], p["dev"]) not in changed]
    transport = ((manifest.get("scenario") or {}).get("fabric") or {}).get("transport") or {}
    kw.setdefault("packet_level", int(transport.get("gso_max_segs", 1)) == 1)
    kw.setdefault("qtelem_health", manifest.get("qtelem_health"))
    watched = bool(((sampler_health or {}).get("config") or {}).get("senders"))
    if watched:
        kw.setdefault("senders", run.table("senders"))
        kw.setdefault("flows", run.table("flows"))
        kw.setdefault("senders_watched", True)
    if manifest.get("pfc") is not None:  # lossless classes: PFC's pauses and its check
        kw.setdefault("pauses", run.table("pauses"))
        kw.setdefault("pfc", manifest["pfc"])
    if manifest.get("machine_stalls") is not None:  # the canary watched the CPUs
        kw.setdefault("machine_stalls", manifest["machine_stalls"])
        kw.setdefault("cpu_stalls", run.table("cpu_stalls"))
        kw.setdefault("steps", run.table("steps"))
        if manifest.get("qtelem_health") is not None and len(kw["cpu_stalls"]):  # late gaps of those stalls
            kw.setdefault("qslots", run.table("qslots"))
    if "stalls" in (manifest.get("tables") or {}):  # the rank workers had the stall watchdog
        kw.setdefault("stall_tables", stall_tables(run))
    verdict = evaluate(run.table("queues"), run.table("links"), run.table("cpu"), ports, sampler_health, **kw)
    if changed:
        names = ", ".join(f"{n}:{d}" for n, d in sorted(changed))
        for c in verdict["checks"]:
            if c["name"] == "bottleneck_rate":
                c["reason"] += f" (not judged: {names}, whose rate a link event changed)"
    return verdict


def stall_tables(run: Any) -> StallTables:
    """What the stall guardrails read of a record (every fabric port: a degraded link's too)."""
    return StallTables(
        stalls=run.table("stalls"),
        iterations=run.table("iterations"),
        flows=run.table("flows"),
        fct=run.table("fct"),
        link_events=run.table("link_events"),
        pauses=run.table("pauses"),
        netstat=run.table("netstat"),
        cpu_stalls=run.table("cpu_stalls"),
        ports=(run.manifest.get("fabric") or {}).get("ports") or (),
    )


def pause_intervals(pauses: Rows) -> dict[tuple[str, str], np.ndarray]:
    """pauses.csv's rows as (start, end) arrays by paused port (node, dev)."""
    df = as_frame(pauses)
    if df.empty:
        return {}
    return {
        (str(n), str(d)): g[["t_start", "t_end"]].to_numpy(dtype=float) for (n, d), g in df.groupby(["node", "dev"])
    }


def _rate_changed(manifest: Mapping[str, Any]) -> set[tuple[str, str]]:
    """Both ports of every link whose rate a scheduled ``degrade`` event changed: judged against their own rate,
    they would look short for the whole of the degrade."""
    out = set()
    for ev in (manifest.get("scenario") or {}).get("events") or []:
        if ev.get("action") == "degrade" and ev.get("rate_bps") is not None:
            a, b = str(ev["link"]).split("-", 1)
            out |= {(a, f"{a}-{b}"), (b, f"{b}-{a}")}
    return out


def format_verdict(v: Mapping[str, Any]) -> str:
    lines = ["faithful" if v["faithful"] else "NOT FAITHFUL"]
    for c in v["checks"]:
        mark = "warn" if c.get("waived_by") else {True: "ok  ", False: "FAIL", None: "n/a "}[c["ok"]]
        lines.append(f"  {mark} {c['name']}: {c['reason']}")
    return "\n".join(lines)


def guest_thresholds(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Keyword arguments for ``evaluate_run``: the TCG guest's sampler allowance (``testbed.plan.guestfit``) when
    the record ran in a software-emulated guest, else empty. Read from the record's manifest (``guest``: the
    ``TESTBED_GUEST*`` variables of the process that ran it), never from the reader's environment, so a record is
    judged the same wherever it is read."""
    if not guestfit.under_tcg(manifest.get("guest") or {}):
        return {}
    return {
        "th": Thresholds(sampler_gap_max_s=guestfit.TCG_SAMPLER_GAP_S, sampler_rate_min=guestfit.TCG_SAMPLER_RATE_MIN)
    }
