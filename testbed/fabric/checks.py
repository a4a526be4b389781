"""What a fabric spec needs of this machine, refused before anything is built (``check_spec``): the qdiscs, tools
and kernel features its links, routing and marking ask for, each missing one as one line naming it."""

from __future__ import annotations

from testbed.fabric.pfc import check_headroom, pfc_plan
from testbed.host.capabilities import Capabilities, CapabilityError
from testbed.spec.fabric import FabricSpec
from testbed.spec.topology import Port, Topology


def check_spec(spec: FabricSpec, caps: Capabilities) -> Topology:
    """Everything that can be refused is refused here, before anything is built."""
    topo = Topology(spec)
    for key in ("qdisc.htb", "qdisc.bfifo", "mininet"):
        caps.require(key, "building a fabric")
    ports = topo.ports()
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
    if any(p.link.marking.mode != "off" for p in ports) or spec.transport.cc == "dctcp":
        try:
            from testbed import ecn
        except ImportError as exc:
            raise CapabilityError(f"ECN marking / DCTCP need testbed.ecn, which failed to import: {exc}") from exc
        for p in ports:
            if p.link.marking.mode != "off" and not p.link.classes:
                ecn.choose_impl(p.link.marking, caps)
    _check_class_marking(ports, caps)
    if any(c.lossless for p in ports for c in p.link.classes):
        for key in ("btf", "qdisc.tbf"):
            caps.require(key, "lossless classes (PFC: a tbf leaf per class, watched by fexit BPF programs)")
        check_headroom(pfc_plan(ports))
    return topo


def _check_class_marking(ports: list[Port], caps: Capabilities) -> None:
    """A traffic class marks ECN on its own queue: kernel RED as the class's leaf, or the eBPF marker reading the
    class's leaf backlog (a lossless class's queue is a tbf: the marker only); one line naming the port and class
    when neither can here."""
    from testbed import ecn

    for p in ports:
        for c in p.link.classes:
            m = p.link.class_marking(c)
            if m.mode == "off":
                continue
            try:
                ecn.class_impl(m, caps, c.lossless is not None)
            except ecn.EcnError as exc:
                raise CapabilityError(f"port {p.name} class {c.name}: per-class ECN marking: {exc}") from None
