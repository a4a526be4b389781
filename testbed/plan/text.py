"""A scenario point's plan as text: what `testbed validate` prints for each point before anything is built.

The fabric (topology, hosts, spines, oversubscription), each port tier's rate, buffer and marking (host links,
fabric links, and every group of ports an override changes, read from the address plan's ports so that what is
printed is what would be built), routing and transport, and the jobs (kind, ranks or hosts, sizes); then, from the
point's plan (``testbed.plan.point.PointPlan``), what each group of ports gets: its leaf qdisc, who marks it, its
part in PFC and the load balancing over it. Pure: reads the spec and the plan, builds nothing.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from testbed.plan.flows import resolve_ranks
from testbed.spec import fields as f
from testbed.spec.fields import declared
from testbed.spec.link import LinkSpec
from testbed.spec.scaling import describe as describe_scale
from testbed.spec.scenario import Scenario
from testbed.spec.topology import Port, Topology
from testbed.spec.units import format_bytes, format_rate

if TYPE_CHECKING:
    from testbed.plan.point import PointPlan

HOST_LAYERS = frozenset({"host"})


def _bytes(n: float) -> str:
    """A size in tc's units, with the count of bytes it is (``300KB (307,200 B)``)."""
    text = format_bytes(n)
    return f"{n:,.0f} B" if text.removesuffix("B").isdigit() else f"{text} ({n:,.0f} B)"


def _rate(bps: float) -> str:
    return format_rate(bps) + "/s"


def _seconds(s: float) -> str:
    if s == 0 or s >= 1:
        return f"{s:g} s"
    if s >= 1e-3:
        return f"{s * 1e3:g} ms"
    return f"{s * 1e6:g} us"


def describe_link(link: LinkSpec) -> str:
    """One port's queue: rate, buffer (as given and in bytes), MTU, marking, and delay, loss and classes if any."""
    parts = [
        _rate(link.rate_bps),
        f"buffer {_bytes(link.buffer_bytes) if link.buffer.unit == 'bytes' else link.buffer}",
        f"MTU {link.mtu}",
        link.marking.describe() + ("" if link.marking.impl == "auto" else f" (impl {link.marking.impl})"),
    ]
    if link.delay_s:
        parts.append(f"delay {_seconds(link.delay_s)}")
    if link.loss:
        parts.append(f"loss {link.loss:g}")
    if link.classes:
        parts.append(f"{len(link.classes)} traffic classes ({', '.join(c.name for c in link.classes)})")
    return ", ".join(parts)


def _tier(port: Port) -> str:
    return "host links" if {port.layer, port.peer_layer} & HOST_LAYERS else "fabric links"


def fabric_lines(point: Scenario, topo: Topology) -> list[str]:
    spec = point.fabric
    if spec.topology == "fat-tree":
        shape = f"fat-tree k={spec.k}: {len(topo.hosts)} hosts"
    else:
        shape = (
            f"spine-leaf: {spec.spines} spines, {spec.leaves} leaves, {spec.hosts_per_leaf} hosts per leaf "
            f"({len(topo.hosts)} hosts)"
        )
    over = spec.oversubscription
    lines = [f"fabric   {shape}, {spec.node_count} nodes; oversubscription {float(over):g}:1"]
    base = {"host links": spec.host_link, "fabric links": spec.fabric_link}
    changed: dict[tuple[str, LinkSpec], list[str]] = {}
    for port in topo.ports():
        tier = _tier(port)
        if port.link != base[tier]:
            changed.setdefault((tier, port.link), []).append(port.name)
    for tier, link in base.items():
        lines.append(f"  {tier + ':':13s} {describe_link(link)}")
    for (tier, link), names in changed.items():
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        lines.append(f"  override ({tier}, {len(names)} port{'s' * (len(names) > 1)}: {shown}): {describe_link(link)}")
    e, t = spec.ecmp, spec.transport
    lines.append(f"  routing:      {_fields(e)}")
    lines.append(f"  transport:    {_fields(t)}")
    lines += [f"  {line}" for line in describe_scale(point.scale or {})]
    return lines


def _fields(obj: Any) -> str:
    return ", ".join(f"{k} {v}" for k, v in dataclasses.asdict(obj).items() if v is not None)


# How a declared field's value is shown, by the reader that reads it.
_SHOW: dict[Callable[[str, Any], Any], Callable[[Any], str]] = {
    f.bytes_: _bytes,
    f.duration: _seconds,
    f.rate: _rate,
    f.size_sweep: lambda v: ", ".join(_bytes(x) for x in v),
    f.size_distribution: lambda v: ", ".join(_bytes(s) + (f" (weight {w:g})" if len(v) > 1 else "") for s, w in v),
    f.host_pairs: lambda v: ", ".join(f"{a}->{b}" for a, b in v),
}
HOST_KEYS = ("src", "dst", "senders", "receiver", "workers", "servers", "stages", "pairs")


def job_line(job: Any, given: Any, topo: Topology) -> str:
    """One job: kind and name, the hosts it runs on (ranks resolved), and every other key the scenario gave
    (``given``: the job's mapping as written), read as the spec reads it: sizes in bytes, times in seconds."""
    decl = declared(type(job))
    given = given if isinstance(given, dict) else {}
    leave_out: frozenset[str] = getattr(job, "LEAVE_OUT", frozenset())
    by_key = {d.key or attr: (attr, d) for attr, d in decl.items() if (d.key or attr) not in leave_out}
    who = []
    if getattr(job, "ranks", None) is not None and "ranks" in by_key:
        hosts = resolve_ranks(job.ranks, topo)
        order = job.ranks if isinstance(job.ranks, str) else "listed"
        who.append(f"{len(hosts)} ranks ({order}: {_hosts(hosts)})")
    for key in HOST_KEYS:
        if key in by_key:
            attr, d = by_key[key]
            who.append(f"{key} {_SHOW.get(d.reader, _hosts)(getattr(job, attr))}")
    settings = []
    for key in given:
        if key in ("name", "kind", "ranks", *HOST_KEYS) or key not in by_key:
            continue
        attr, d = by_key[key]
        settings.append(f"{key} {_SHOW.get(d.reader, str)(getattr(job, attr))}")
    return f"job {job.name}: {job.kind}, {'; '.join(who)}" + (f"; {', '.join(settings)}" if settings else "")


def _hosts(hosts: Any) -> str:
    names = [h if isinstance(h, str) else "->".join(h) for h in (hosts if isinstance(hosts, tuple | list) else [hosts])]
    return ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")


def plan_lines(point: Scenario, topo: Topology | None = None) -> list[str]:
    """The point's plan: fabric, port tiers, routing, transport, jobs, duration and telemetry (``topo``: the
    point's, drawn already)."""
    topo = Topology(point.fabric) if topo is None else topo
    lines = fabric_lines(point, topo)
    given = point.raw.get("workload") or []
    jobs = [job_line(job, given[i] if i < len(given) else {}, topo) for i, job in enumerate(point.workload)]
    lines += [f"  {line}" for line in jobs] or ["  no jobs"]
    tele = point.telemetry
    lines.append(
        f"  run for at most {_seconds(point.duration_s)}; queues sampled at {tele.queue_hz:g} Hz, links at "
        f"{tele.link_hz:g} Hz" + (", kernel queue telemetry" if tele.bpf_queues else "")
    )
    return lines


def port_lines(plan: PointPlan) -> list[str]:
    """What each group of ports gets, as the plan decided: per tier, the ports that share a leaf qdisc, a marking,
    a PFC role and a load balancing (with the classes the eBPF marker marks, if any)."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for p in plan.ports:
        marker = ",".join(c.name for c, _ in p.marker_classes)
        key = (p.tier, p.leaf, p.marking, marker, p.pfc, p.lb)
        groups.setdefault(key, []).append(p.name)
    lines = ["ports as planned (leaf qdisc, ECN marking, PFC role, load balancing):"]
    for (tier, leaf, marking, marker, pfc, lb), names in groups.items():
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        classes = f" (marker on classes {marker})" if marker else ""
        lines.append(
            f"  {tier} tier, {len(names)} port{'s' * (len(names) > 1)} ({shown}): leaf {leaf}, marking {marking}"
            f"{classes}, PFC {pfc}, LB {lb}"
        )
    return lines
