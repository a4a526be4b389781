"""What a fabric spec needs of this machine and what each port gets, decided before anything is built
(``plan_fabric``): the qdiscs, tools and kernel features its links, routing and marking ask for, each missing one
as one line naming it, and every port's decisions (``testbed.fabric.portplan``). The marking is chosen here and
nowhere else."""

from __future__ import annotations

from testbed.fabric import tc
from testbed.fabric.pfc import PfcPlan, check_headroom, pfc_plan
from testbed.fabric.portplan import FabricPlan, Impl, PortPlan
from testbed.host.capabilities import Capabilities, CapabilityError
from testbed.spec.classes import TrafficClass, htb_plan
from testbed.spec.fabric import FabricSpec
from testbed.spec.link import ETH_HEADER
from testbed.spec.topology import Port, Topology

HOST_LAYERS = frozenset({"host"})


def check_spec(spec: FabricSpec, caps: Capabilities) -> Topology:
    """Everything that can be refused is refused here, before anything is built; the fabric's topology."""
    return plan_fabric(spec, caps).topo


def plan_fabric(spec: FabricSpec, caps: Capabilities, topo: Topology | None = None) -> FabricPlan:
    """Refuse what this machine cannot build, then decide every port (``topo``: the spec's, drawn already)."""
    topo = Topology(spec) if topo is None else topo
    ports = topo.ports()
    _require(spec, ports, caps)
    impls: dict[str, Impl] = {}
    classes: dict[str, tuple[tuple[str, Impl], ...]] = {}
    if any(p.link.marking.mode != "off" for p in ports) or spec.transport.cc == "dctcp":
        try:
            from testbed import ecn
        except ImportError as exc:
            raise CapabilityError(f"ECN marking / DCTCP need testbed.ecn, which failed to import: {exc}") from exc
        for p in ports:
            if p.link.marking.mode != "off" and not p.link.classes:
                impls[p.name] = ecn.choose_impl(p.link.marking, caps)
    classes = {p.name: _class_marking(p, caps) for p in ports if p.link.classes}
    pfc = PfcPlan((), ())
    if any(c.lossless for p in ports for c in p.link.classes):
        for key in ("btf", "qdisc.tbf"):
            caps.require(key, "lossless classes (PFC: a tbf leaf per class, watched by fexit BPF programs)")
        pfc = pfc_plan(ports)
        check_headroom(pfc)
    plans = tuple(_port_plan(spec, topo, p, impls.get(p.name, "off"), classes.get(p.name, ()), pfc) for p in ports)
    return FabricPlan(topo, plans, pfc)


def _require(spec: FabricSpec, ports: list[Port], caps: Capabilities) -> None:
    for key in ("qdisc.htb", "qdisc.bfifo", "mininet"):
        caps.require(key, "building a fabric")
    if any(p.link.delay_s > 0 for p in ports):
        caps.require("qdisc.netem", "link delay")
        caps.require("ifb", "link delay")
    if any(p.link.loss > 0 for p in ports):
        caps.require("nftables", "random loss on links")
    if spec.ecmp.mode == "spray":
        caps.require("nftables", "ecmp.mode spray (numgen marks)")
    if spec.ecmp.mode in ("flowlet", "adaptive"):
        for key in ("btf", "qdisc.clsact", "tool.bpftool"):
            caps.require(key, f"ecmp.mode {spec.ecmp.mode} (a BPF program per router)")
    if spec.ecmp.seed is not None:
        caps.require("ecmp.hash_seed", "ecmp.seed")
    caps.require("ecmp.hash_policy_3", "deterministic ECMP hashing")
    if spec.transport.cc != "dctcp":
        caps.require(f"cc.{spec.transport.cc}", f"transport.cc {spec.transport.cc}")


def _class_marking(port: Port, caps: Capabilities) -> tuple[tuple[str, Impl], ...]:
    """A traffic class marks ECN on its own queue: kernel RED as the class's leaf, or the eBPF marker reading the
    class's leaf backlog (a lossless class's queue is a tbf: the marker only); one line naming the port and class
    when neither can here. Each class's (name, impl), ``off`` where it does not mark."""
    out: list[tuple[str, Impl]] = []
    for c in port.link.classes:
        m = port.link.class_marking(c)
        if m.mode == "off":
            out.append((c.name, "off"))
            continue
        from testbed import ecn

        try:
            out.append((c.name, ecn.class_impl(m, caps, c.lossless is not None)))
        except ecn.EcnError as exc:
            raise CapabilityError(f"port {port.name} class {c.name}: per-class ECN marking: {exc}") from None
    return tuple(out)


def _port_plan(
    spec: FabricSpec, topo: Topology, p: Port, impl: Impl, classes: tuple[tuple[str, Impl], ...], pfc: PfcPlan
) -> PortPlan:
    marker: tuple[tuple[TrafficClass, int], ...] = ()
    if p.link.classes:
        plan = htb_plan(p.link.classes, p.link.mtu + ETH_HEADER)
        by_name = dict(classes)
        marker = tuple((c, h.minor) for c, h in zip(p.link.classes, plan, strict=True) if by_name[c.name] == "bpf")
        marks = [i for _, i in classes if i != "off"]
        impl = ("bpf" if marker else "kernel") if marks else "off"
        leaf = "htb classes"
    elif impl == "kernel":
        leaf = "red"
    else:
        leaf = tc.droptail_leaf(p.link)[0]
    watched = any(q.router == p.node and q.dev == p.dev for q in pfc.queues)
    paused = any(f.upstream == p.node and f.upstream_dev == p.dev for f in pfc.feeds)
    role = {(True, True): "watched and paused", (True, False): "watched", (False, True): "paused"}.get(
        (watched, paused), "none"
    )
    ecmp = any(p.dev == dev for r in topo.routes.get(p.node, []) if len(r.nexthops) > 1 for _, dev in r.nexthops)
    lb = spec.ecmp.mode if ecmp else "single path"
    return PortPlan(
        name=p.name,
        node=p.node,
        dev=p.dev,
        tier="host" if {p.layer, p.peer_layer} & HOST_LAYERS else "fabric",
        leaf=leaf,
        marking=impl,
        class_marking=classes,
        marker_classes=marker,
        sampler_leaf=tc.ROOT_HANDLE if p.link.classes else tc.LEAF_HANDLE,
        pfc=role,
        lb=lb,
    )
