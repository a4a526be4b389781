"""The PFC guardrail: the controller reacted within the time the lossless classes' headroom was sized for
(testbed.fabric.pfc.REACTION_BOUND_S), saw every event, and judged every packet. A slower reaction lets a queue
pass its buffer, so a lossless class's 0 drops would be luck, not the emulated fabric."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from results.checks import check
from testbed.fabric.pfc import REACTION_BOUND_S


def check_pfc(pfc: Mapping[str, Any]) -> dict[str, Any]:
    bound_us = REACTION_BOUND_S * 1e6
    reaction = pfc.get("reaction_us") or {}
    p99 = reaction.get("p99")
    problems = []
    if p99 is not None and p99 > bound_us:
        problems.append(f"reaction p99 {p99:g} us is over the {bound_us:g} us the headroom was sized for")
    for key, what in (("lost_events", "events the ring had no room for"), ("unjudged_packets", "packets whose "
                      "class queue was not found")):  # fmt: skip
        if pfc.get(key):
            problems.append(f"{pfc[key]} {what}")
    if pfc.get("errors"):
        problems.append(f"{len(pfc['errors'])} failed pause changes ({pfc['errors'][0]})")
    if problems:
        return check("pfc", False, p99, bound_us, "; ".join(problems))
    if p99 is None:
        return check("pfc", None, None, bound_us, "no queue crossed XOFF: nothing paused")
    repaired = pfc.get("repaired_pauses") or 0
    return check(
        "pfc",
        True,
        p99,
        bound_us,
        f"{reaction['n']} pauses, reaction p50 {reaction['p50']:g} us, p99 {p99:g} us, max {reaction['max']:g} us "
        f"(headroom sized for {bound_us:g} us)"
        + (f"; {repaired} ended by the idle check, after a dequeue the program did not see" if repaired else ""),
    )
