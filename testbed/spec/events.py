"""Scheduled link events in a scenario (``events:``): a link down, up, flapping, degraded or restored at a time
after traffic starts. Pure: parsed and checked against the fabric before anything is built.

    events:
      - {at: 2s, action: down, link: s1-l2, detection: 100ms}   # routing reconverges 100 ms later
      - {at: 4s, action: up, link: s1-l2}
      - {at: 1s, action: flap, link: s2-l3, count: 3, period: 400ms}   # down, up after period/2, 3 times
      - {at: 1s, action: degrade, link: s1-l1, rate: 50Mbit, loss: 0.001}   # both directions
      - {at: 5s, action: restore, link: s1-l1}   # rate, loss and MTU back
      - {at: 0s, action: mtu, link: s1-l2, end: l2, mtu: 1500}   # l2's side only: a mismatch; bigger frames drop
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, cast

from testbed.spec.fields import SpecError, check_keys, choice, integer, number, sub, unit
from testbed.spec.reroute import find_link
from testbed.spec.topology import Topology
from testbed.spec.units import parse_duration, parse_rate

Action = Literal["down", "up", "flap", "degrade", "restore", "mtu"]
ACTIONS = ("down", "up", "flap", "degrade", "restore", "mtu")
DETECTION_S = 0.1  # BFD's common 3 x 33 ms, rounded: what a routing protocol needs to notice a dead link


@dataclass(frozen=True)
class LinkEvent:
    at_s: float
    action: Action
    link: str
    detection_s: float = DETECTION_S
    count: int = 1  # flap: how many down/up cycles
    period_s: float = 1.0  # flap: one cycle (down for half of it)
    rate_bps: int | None = None  # degrade: the link's new rate, both directions
    loss: float | None = None  # degrade: random loss, both directions
    end: str = ""  # mtu: the node whose side of the link changes
    mtu: int | None = None  # mtu: its interface's new MTU (it drops received frames above it, as a switch port does)

    def steps(self) -> list[tuple[float, str]]:
        """(time after traffic starts, down|up|degrade|restore): a flap is ``count`` downs and ups."""
        if self.action != "flap":
            return [(self.at_s, self.action)]
        out = []
        for i in range(self.count):
            t = self.at_s + i * self.period_s
            out += [(t, "down"), (t + self.period_s / 2, "up")]
        return out

    @property
    def end_s(self) -> float:
        return max(t for t, _ in self.steps())


def parse_event(data: Any, path: str, topo: Topology) -> LinkEvent:
    check_keys(
        data,
        {"at", "action", "link", "detection", "count", "period", "rate", "loss", "end", "mtu"},
        path,
        {"at", "action", "link"},
    )
    action = cast(Action, choice(sub(path, "action"), data["action"], ACTIONS))
    link = data["link"]
    if not isinstance(link, str):
        raise SpecError(sub(path, "link"), f"expected a link name like s1-l2, got {link!r}")
    lk = find_link(topo, link, sub(path, "link"))
    if not (topo.nodes[lk.a].is_router and topo.nodes[lk.b].is_router):
        raise SpecError(sub(path, "link"), f"{link} is a host link: only links between switches fail here")
    allowed = {"flap": {"count", "period"}, "degrade": {"rate", "loss"}, "mtu": {"end", "mtu"}}.get(action, set())
    if action in ("down", "up", "flap"):
        allowed |= {"detection"}
    for key in ("detection", "count", "period", "rate", "loss", "end", "mtu"):
        if key in data and key not in allowed:
            raise SpecError(sub(path, key), f"not a setting of action {action}")
    ev = LinkEvent(
        at_s=unit(sub(path, "at"), parse_duration, data["at"]),
        action=action,
        link=f"{lk.a}-{lk.b}",
        detection_s=unit(sub(path, "detection"), parse_duration, data.get("detection", DETECTION_S)),
        count=integer(sub(path, "count"), data.get("count", 1), 1, 1000),
        period_s=unit(sub(path, "period"), parse_duration, data.get("period", 1.0)),
        rate_bps=int(unit(sub(path, "rate"), parse_rate, data["rate"])) if "rate" in data else None,
        loss=number(sub(path, "loss"), data["loss"], 0.0, 0.999) if "loss" in data else None,
        end=str(data.get("end", "")),
        mtu=integer(sub(path, "mtu"), data["mtu"], 68, 65535) if "mtu" in data else None,
    )
    if action == "mtu" and (ev.mtu is None or ev.end not in (lk.a, lk.b)):
        raise SpecError(path, f"an mtu event needs mtu and end (one of {lk.a}, {lk.b}: the side that changes)")
    if action == "degrade":
        if ev.rate_bps is None and ev.loss is None:
            raise SpecError(path, "a degrade needs a rate, a loss, or both")
        own = lk.a_spec.rate_bps
        if ev.rate_bps is not None and not 0 < ev.rate_bps <= own:
            raise SpecError(sub(path, "rate"), f"must be above 0 and at most the link's {own} bit/s")
    if ev.period_s <= 0:
        raise SpecError(sub(path, "period"), "must be above 0")
    return ev


def parse_events(data: Any, path: str, topo: Topology, duration_s: float) -> tuple[LinkEvent, ...]:
    """The scenario's ``events:``; each must end within the run's duration."""
    if data is None:
        return ()
    if not isinstance(data, list):
        raise SpecError(path, "expected a list of events ({at, action, link, ...})")
    events = tuple(parse_event(d, f"{path}[{i}]", topo) for i, d in enumerate(data))
    for i, ev in enumerate(events):
        if ev.end_s >= duration_s:
            raise SpecError(f"{path}[{i}].at", f"the event ends at {ev.end_s:g} s, after the run's {duration_s:g} s")
    if events and topo.spec.ecmp.mode != "static":
        raise SpecError(path, "link events need ecmp.mode static: spraying's and flowlets' way tables are not rerouted")
    return events
