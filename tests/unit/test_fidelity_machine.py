"""Machine stalls as figures and as a guardrail (results.fidelity.machine), and the canary's steal time, without
root: per-CPU stalls merged into events, the share of the window, the steps a stall outlasted."""

from __future__ import annotations

from typing import Any

import pytest

from results.checks import Thresholds
from results.fidelity import evaluate
from results.fidelity.machine import check_machine_stalls, stall_events, stall_figures
from testbed.telemetry.canary import steal_s

T0 = 1000.0
WINDOW = (T0, T0 + 10.0)
PORTS = [
    {"node": "h1", "dev": "h1-l1", "layer": "host", "rate_bps": 100e6, "mtu": 1500},
    {"node": "l1", "dev": "l1-h1", "layer": "leaf", "rate_bps": 100e6, "mtu": 1500},
]


def stall(cpu: int, start: float, seconds: float, waited: float = 0.0) -> dict[str, Any]:
    """A canary row for a CPU that did not run from ``start`` for ``seconds`` (woke at their end)."""
    late = seconds + waited
    return {"t": start + seconds - late, "cpu": cpu, "late_s": late, "waited_s": waited, "stalled_s": seconds}


def health(cpus: int = 2, wall: float = 10.0, steal: float | None = None) -> dict[str, Any]:
    per = {
        str(c): {"ticks": 1000, "stalls": 0, **({"steal_s": steal} if steal is not None else {})} for c in range(cpus)
    }
    return {"period_s": 0.01, "min_stall_s": 0.01, "wall_s": wall, "per_cpu": per}


def test_overlapping_stalls_of_two_cpus_are_one_event_with_the_time_both_stopped() -> None:
    rows = [stall(0, T0 + 1.0, 0.012), stall(1, T0 + 1.005, 0.012), stall(1, T0 + 3.0, 0.02, waited=0.005)]
    ev = stall_events(rows, 2, WINDOW)
    assert [(e.cpus, round(e.duration_s, 6), round(e.all_s, 6)) for e in ev] == [
        ((0, 1), 0.017, 0.007),  # 1.000-1.017, both from 1.005 to 1.012
        ((1,), 0.02, 0.0),  # only the unexplained part (the run delay is contention, not a stall)
    ]
    assert ev[1].t_start == pytest.approx(T0 + 3.0)


def test_a_stall_is_clipped_to_the_traffic_window() -> None:
    ev = stall_events([stall(0, T0 - 0.01, 0.02), stall(0, T0 + 9.995, 0.02)], 2, WINDOW)
    assert [round(e.duration_s, 6) for e in ev] == [0.01, 0.005]


def test_the_stalled_share_is_judged_against_what_the_rate_guardrail_allows_a_port() -> None:
    limit = 1 - Thresholds().rate_min  # a stopped CPU forwards nothing: the window's figures short by that share
    under = [stall(0, T0 + 1, 0.9 * limit)]  # 0.09 x limit of the 10 s window
    over = [stall(0, T0 + i, 1.1 * limit * 10 / 5) for i in range(5)]  # 1.1 x limit of the window
    ok = check_machine_stalls(under, health(), WINDOW)
    bad = check_machine_stalls(over, health(), WINDOW)
    assert ok["ok"] is True and ok["value"] == pytest.approx(0.09 * limit, abs=1e-5)
    assert bad["ok"] is False and bad["value"] == pytest.approx(1.1 * limit, abs=1e-5)
    assert "over 5%" in bad["reason"] and len(bad["details"]["events"]) == 5


def test_the_kernels_steal_share_counts_where_the_canary_saw_less() -> None:
    limit = 1 - Thresholds().rate_min
    c = check_machine_stalls([], health(wall=10.0, steal=10.0 * 1.2 * limit), WINDOW)
    assert c["ok"] is False and c["details"]["steal_share"]["0"] == pytest.approx(1.2 * limit)
    assert check_machine_stalls([], health(wall=10.0, steal=10.0 * 0.8 * limit), WINDOW)["ok"] is True


def steps(nbytes: int, t0: float, t1: float) -> list[dict[str, Any]]:
    return [{"job": "ar", "iter": 3, "rank": "h1", "step": 2, "op": "send", "peer": "h2", "t_start": t0,
             "t_end": t1, "bytes": nbytes}]  # fmt: skip


def test_a_stall_longer_than_a_step_it_overlaps_makes_the_run_unfaithful() -> None:
    rows = [stall(0, T0 + 2.0, 0.012)]
    short = steps(64_000, T0 + 1.995, T0 + 2.02)  # 5.1 ms at 100 Mbit/s: the 12 ms stall at least doubled it
    long = steps(1_000_000, T0 + 1.95, T0 + 2.05)  # 80 ms: the stall lengthens it by 15% at most
    apart = steps(64_000, T0 + 5.0, T0 + 5.01)  # the same step, nowhere near the stall
    bad = check_machine_stalls(rows, health(), WINDOW, short, PORTS)
    assert bad["ok"] is False
    assert bad["details"]["steps_outlasted"] == [
        {"stall_s": 0.012, "cpus": [0], "job": "ar", "iter": 3, "step": 2, "rank": "h1", "expected_s": 0.00512}
    ]
    assert "job ar iter 3 step 2" in bad["reason"]
    assert check_machine_stalls(rows, health(), WINDOW, long, PORTS)["ok"] is True
    assert check_machine_stalls(rows, health(), WINDOW, apart, PORTS)["ok"] is True


def test_a_record_without_the_canary_is_not_judged_and_evaluate_runs_the_check() -> None:
    assert check_machine_stalls([], None, WINDOW)["ok"] is None
    v = evaluate([], [], [], PORTS, window=WINDOW, machine_stalls=health(), cpu_stalls=[stall(0, T0 + 1, 0.9)])
    (c,) = [c for c in v["checks"] if c["name"] == "machine_stalls"]
    assert c["ok"] is False and v["faithful"] is False


def test_figures_count_events_from_the_windows_start() -> None:
    fig = stall_figures(stall_events([stall(1, T0 + 4.0, 0.015)], 2, WINDOW), health(), WINDOW)
    assert fig["events"] == [{"t": 4.0, "duration_s": 0.015, "cpus": [1], "all_cpus_s": 0.0}]
    assert fig["stalled_share"] == pytest.approx(0.0015) and fig["longest_s"] == pytest.approx(0.015)


STAT = """cpu  2184066 245 951176 4385938 37400 0 129409 31049 0 0
cpu0 1000 0 0 0 0 0 0 200 0 0
cpu1 1000 0 0 0 0 0 0 150 0 0
intr 1 2 3
"""


def test_steal_is_read_per_cpu_in_seconds_and_absent_where_the_kernel_has_no_field() -> None:
    assert steal_s(STAT, (0, 1), 100.0) == {0: 2.0, 1: 1.5}
    assert steal_s(STAT, (1,), 100.0) == {1: 1.5}
    assert steal_s("cpu0 1 2 3 4 5 6 7\n", (0,), 100.0) == {}
