"""Build a fabric from its spec with Mininet, configure it ourselves, and tear it down by ownership.

Mininet creates the nodes (one network namespace and shell per node, via mnexec) and the veth pairs between
them; nothing else of Mininet is used: its TCLink options fail silently on kernels without netem/RED, so every
address, route, qdisc and sysctl is set here with checked iproute2 batches. Each node's namespace is named
``<prefix>-<node>`` so that `ip netns exec`, tcpdump and pyroute2 can reach it.

Teardown runs in reverse order on success, exception, Ctrl-C and SIGTERM, and every step is attempted even when
an earlier one fails; the run's state file lets `testbed clean` finish the job after a SIGKILL.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from types import FrameType
from typing import TYPE_CHECKING, Any

from testbed.fabric import classstats, pathbytes, tc
from testbed.fabric.checks import plan_fabric
from testbed.fabric.flowlet import FlowletSet
from testbed.fabric.portplan import FabricPlan
from testbed.fabric.probe import probe
from testbed.fabric.routing import (
    downlinks,
    predict_path,
    route_commands,
    router_sysctls,
    spray_commands,
    spray_nft,
    spray_ways,
)
from testbed.host.capabilities import Capabilities
from testbed.host.mininet_compat import import_mininet
from testbed.host.netns import configure as configure_netns
from testbed.host.ownership import RunLock, RunState, delete_namespaces
from testbed.host.procs import ProcessGroup, run_checked
from testbed.spec.fabric import FabricSpec
from testbed.spec.placement import EPHEMERAL
from testbed.spec.topology import HostInfo, Port

if TYPE_CHECKING:  # testbed.ecn is imported where it is used: its import failing is reported as a CapabilityError
    from testbed.ecn import CongestionControl, MarkerSet

log = logging.getLogger(__name__)

HOST_SYSCTLS = {
    "net.ipv4.tcp_no_metrics_save": "1",  # no cached ssthresh/cwnd carried from one iteration's flow to the next
    "net.ipv4.tcp_reflect_tos": "1",  # a server answers with its client's DSCP: both directions in one class
    "net.ipv6.conf.all.disable_ipv6": "1",
    "net.ipv6.conf.default.disable_ipv6": "1",
    # the kernel's own picks (control connections, placement: kernel) stay clear of the placed source ports
    "net.ipv4.ip_local_port_range": f"{EPHEMERAL[0]} {EPHEMERAL[1]}",
}


class Fabric:
    """A built fabric. Use as a context manager::

    with Fabric(spec) as fab:
        fab.hosts["l1h1"].netns

    ``plan``: the fabric's decisions, made before (``testbed.fabric.checks.plan_fabric``; a run's comes from its
    point's plan); without one the fabric plans itself. The fabric applies the plan: it neither chooses a port's
    marking nor draws the topology again.
    """

    def __init__(
        self,
        spec: FabricSpec,
        caps: Capabilities | None = None,
        lock_wait: float = 0.0,
        extra_cc: frozenset[str] = frozenset(),
        path_bytes: bool = True,
        plan: FabricPlan | None = None,
    ):
        self.spec = spec
        self.extra_cc = extra_cc  # congestion controls that jobs set per socket, beyond the hosts' default
        self.caps = caps if caps is not None else probe()
        self.plan = plan if plan is not None else plan_fabric(spec, self.caps)
        self.topo = self.plan.topo
        self.lock_wait = lock_wait
        self.state: RunState | None = None
        self.prefix = ""
        self.hosts: dict[str, HostInfo] = {}
        self.procs = ProcessGroup(state_cb=self._record_pid)
        self.marking: dict[str, Any] = self.plan.marking()  # the manifest's marking (with the cc once prepared)
        self.spray: dict[str, int] = {}  # node -> the ways it sprays over (ecmp.mode: spray)
        self.path_bytes = path_bytes  # count each flow's bytes in the top-tier routers (testbed.fabric.pathbytes)
        self.path_nodes: list[str] = []  # the routers that count them
        self._ports: dict[str, list[Port]] = {}  # node -> its egress ports (set when configured)
        self.build_s = 0.0
        self._lock: RunLock | None = None
        self._net: Any = None  # the Mininet network (Mininet is untyped)
        self._markers: MarkerSet | None = None
        self._flowlets: FlowletSet | None = None
        self._closers: list[Callable[[], None]] = []  # run-time helpers to close first (on_teardown)
        self._cc: CongestionControl | None = None
        self._old_sigterm: Any = None

    # --- public ------------------------------------------------------------------------------------------------
    @property
    def host_link(self) -> Any:
        return self.spec.host_link

    def netns(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    def ports(self) -> list[Port]:
        return self.topo.ports()

    def predict_path(self, src: str, dst: str, proto: str = "tcp", sport: int = 0, dport: int = 0) -> list[str]:
        return predict_path(self.topo, self.netns, src, dst, proto, sport, dport, lambda n: self.spray.get(n, 0))

    @property
    def load_balancing(self) -> dict[str, Any]:
        """What spread traffic over equal-cost next hops (the manifest's ``load_balancing``)."""
        e = self.spec.ecmp
        if e.mode == "spray":
            return {"mode": "spray", "pick": e.pick, "ways": dict(sorted(self.spray.items()))}
        if e.mode in ("flowlet", "adaptive"):
            pick = "least-queued" if e.mode == "adaptive" else e.pick
            gap = self.topo.flowlet_gap()
            return {"mode": e.mode, "pick": pick, "gap_s": gap, "ways": dict(sorted(self.spray.items()))}
        return {"mode": "static", "hash": e.hash, "seed": e.seed}

    @property
    def mininet(self) -> Any:
        """The built fabric's Mininet network (for its CLI: ``testbed cli``)."""
        if self._net is None:
            raise RuntimeError("the fabric is not built")
        return self._net

    def read_marks(self) -> dict[tuple[str, str], dict[str, int]] | None:
        """The eBPF markers' counters per (namespace, device); None when no port of this fabric has the marker."""
        return None if self._markers is None else self._markers.read_marks()

    def __enter__(self) -> Fabric:
        self.build()
        return self

    def __exit__(self, *exc: object) -> None:
        self.teardown()

    # --- build -------------------------------------------------------------------------------------------------
    def build(self) -> None:
        t0 = time.monotonic()
        self._install_sigterm()
        self._lock = RunLock(self.lock_wait)
        try:
            self.state = self._lock.__enter__()
            self.prefix = self.state.prefix
            self._create_nodes()
            self._configure()
        except BaseException:
            self.teardown()
            raise
        self.build_s = time.monotonic() - t0
        log.info("built %s fabric %s in %.2f s", self.spec.topology, self.prefix, self.build_s)

    def _record_pid(self, pid: int) -> None:
        if self.state is not None:
            self.state.add("pids", pid)

    def _create_nodes(self) -> None:
        import_mininet()
        from mininet.log import setLogLevel
        from mininet.net import Mininet
        from mininet.node import Host

        setLogLevel("error")
        assert self.state is not None
        net = Mininet(topo=None, build=False, controller=None, autoSetMacs=False, autoStaticArp=False)
        self._net = net
        attach = []
        for name in self.topo.nodes:
            node = net.addHost(name, cls=Host)
            self.state.add("pids", node.pid)
            ns = self.netns(name)
            self.state.add("namespaces", ns)  # written down first: a Ctrl-C right after the attach still deletes it
            attach.append(f"netns attach {ns} {node.pid}")
        run_checked(["ip", "-batch", "-"], input="\n".join(attach) + "\n")  # one process names them all
        for lk in self.topo.links:
            net.addLink(lk.a, lk.b, intfName1=lk.a_dev, intfName2=lk.b_dev)
        self.hosts = {name: replace(h, netns=self.netns(name)) for name, h in self.topo.hosts.items()}

    def _configure(self) -> None:
        spec = self.spec
        ports_by_node = self._ports = self._ports_by_node()
        rsys = router_sysctls(spec.ecmp, bool(self.caps.ecmp_hash_seed))
        self._prepare_transport()
        for name, node in self.topo.nodes.items():
            ns = self.netns(name)
            ports = ports_by_node.get(name, [])
            ip_lines = ["link set dev lo up"]
            for p in ports:
                ip_lines += [
                    f"link set dev {p.dev} mtu {p.link.mtu} gso_max_segs {spec.transport.gso_max_segs}",
                    f"addr add {p.addr}/{p.prefixlen} dev {p.dev}",
                    f"link set dev {p.dev} up",
                ]
            # its addresses, then its routes (their next hops are on its own links): one `ip` process per node
            ip_lines += route_commands(self.topo.routes.get(name, []))
            run_checked(["ip", "-n", ns, "-batch", "-"], input="\n".join(ip_lines) + "\n")
            sysctls = rsys if node.is_router else {**HOST_SYSCTLS, **self._host_cc()}
            # GRO would glue forwarded packets into super-packets in the next queue: offloads off on every port
            configure_netns(ns, sysctls, [p.dev for p in ports])
            tc_lines = [line for p in ports for line in tc.port_tc_lines(p, self._leaf_builder(p))]
            if tc_lines:
                run_checked(["tc", "-n", ns, "-batch", "-"], input="\n".join(tc_lines) + "\n")
            lossy = [p for p in ports if p.link.loss > 0]
            if lossy:
                run_checked(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=tc.loss_nft_rules("testbed", lossy))
        if spec.ecmp.mode != "static":
            self._way_tables()
        self._apply_delay()
        self._attach_markers()
        if spec.ecmp.mode in ("flowlet", "adaptive"):
            self._attach_flowlets()
        if self.path_bytes and self.caps.has("nftables"):
            self.path_nodes = pathbytes.top_tier(self.topo)
            for name in self.path_nodes:
                pathbytes.attach(self.netns(name))

    def _ports_by_node(self) -> dict[str, list[Port]]:
        out: dict[str, list[Port]] = {}
        for p in self.topo.ports():
            out.setdefault(p.node, []).append(p)
        return out

    def _way_tables(self) -> None:
        """The rules and way tables of per-packet or per-flowlet next hops at every node with ECMP routes
        (testbed.fabric.routing); spraying's nftables marks."""
        ports_by_node = self._ports
        for name, routes in self.topo.routes.items():
            ways = spray_ways(routes)
            if not ways:
                continue
            ns, ports = self.netns(name), ports_by_node[name]
            run_checked(["ip", "-n", ns, "-batch", "-"], input="\n".join(spray_commands(routes, ports)) + "\n")
            if self.spec.ecmp.mode == "spray":
                nft = spray_nft(routes, ports, self.spec.ecmp.pick)
                run_checked(["ip", "netns", "exec", ns, "nft", "-f", "-"], input=nft)
            self.spray[name] = ways

    def _attach_flowlets(self) -> None:
        from testbed.bpf.build import DEFAULT_OUT

        assert self.state is not None
        pick = str(self.load_balancing["pick"])
        flowlets = self._flowlets = FlowletSet(self.prefix, DEFAULT_OUT)
        self.state.add("bpf_pins", str(flowlets.root))
        ports_by_node = self._ports
        for name, ways in self.spray.items():
            routes, ports = self.topo.routes[name], ports_by_node[name]
            down = downlinks(routes, ports)
            up = [p.dev for p in ports if p.dev not in down]
            flowlets.attach(self.netns(name), down, up, self.topo.flowlet_gap(), ways, pick)

    def on_teardown(self, close: Callable[[], None]) -> None:
        """Call ``close`` first when the fabric is torn down (e.g. netlink sockets held in its namespaces, which
        would keep a deleted namespace and its devices alive)."""
        self._closers.append(close)

    def read_flowlets(self) -> dict[str, dict[str, int]] | None:
        """node -> its flowlet program's counters (testbed.fabric.flowlet); None unless flowlet or adaptive."""
        if self._flowlets is None:
            return None
        node = {self.netns(n): n for n in self.topo.nodes}
        return {node[ns]: c for ns, c in sorted(self._flowlets.read().items())}

    def read_classes(self) -> list[dict[str, Any]]:
        """classes.csv rows: every traffic class of every port with classes, its counters now."""
        return [row for p in self.topo.ports() if p.link.classes for row in classstats.read(self.netns(p.node), p)]

    def read_path_bytes(self) -> dict[str, dict[pathbytes.Key, pathbytes.Counted]] | None:
        """Top-tier router -> its bytes per 5-tuple so far; None when nothing counted them (turned off, or no
        nftables)."""
        if not (self.path_bytes and self.caps.has("nftables")):
            return None
        return {name: pathbytes.read(self.netns(name)) for name in self.path_nodes}

    def _apply_delay(self) -> None:
        for i, p in enumerate(p for p in self.topo.ports() if p.link.delay_s > 0):
            ifb = f"ifb{i}"
            ns = self.netns(p.peer)
            run_checked(["ip", "-n", ns, "link", "add", ifb, "type", "ifb"])
            run_checked(["ip", "-n", ns, "link", "set", ifb, "up"])
            run_checked(["tc", "-n", ns, "-batch", "-"], input="\n".join(tc.delay_tc_lines(p, ifb)) + "\n")

    # --- ECN marking and congestion control (testbed.ecn) -------------------------------------------------------
    def _leaf_builder(self, port: Port) -> Callable[[Any], list[str]]:
        """The port's leaf qdisc (or each class's: ``link`` is then the class's queue), as its plan says: kernel
        RED where the kernel marks, else drop-tail (under the eBPF marker too)."""
        plan = self.plan.port(port.name)
        if plan.marking == "off":
            return tc.droptail_leaf
        from testbed import ecn

        by_class = [(port.link.class_link(c), plan.class_impl(c.name)) for c in port.link.classes]

        def leaf(link: Any) -> list[str]:
            impl = next((i for lk, i in by_class if lk == link), "off") if by_class else plan.marking
            if link.marking.mode != "off" and impl == "kernel":
                return list(ecn.leaf_qdisc_args(link.marking, link, "kernel"))
            return tc.droptail_leaf(link)

        return leaf

    def _attach_markers(self) -> None:
        plans = {p.name: p for p in self.plan.ports}
        bpf_ports = [p for p in self.topo.ports() if plans[p.name].marking == "bpf"]
        if not bpf_ports:
            return
        from testbed import ecn
        from testbed.bpf.build import DEFAULT_OUT

        assert self.state is not None
        markers = self._markers = ecn.MarkerSet(self.prefix, DEFAULT_OUT)
        self.state.add("bpf_pins", str(markers.root))
        for p in bpf_ports:
            markers.attach(self.netns(p.node), p.dev, p.link.marking, p.link, plans[p.name].marker_classes)

    def _prepare_transport(self) -> None:
        """Make the hosts' congestion control usable (kernel module, or BPF struct_ops DCTCP), recorded for clean."""
        from testbed import ecn
        from testbed.bpf.build import DEFAULT_OUT

        assert self.state is not None
        # the state file hears of each global change before it is made: `testbed clean` after a crash takes out
        # what this run added (its words in the allowed list, its struct_ops DCTCP by name), nothing else
        cc = self._cc = ecn.CongestionControl(self.prefix, DEFAULT_OUT, intent=self.state.add)
        wanted = {self.spec.transport.cc, *self.extra_cc}
        self.marking["cc"] = cc.prepare(wanted)

    def cc_name(self, cc: str) -> str:
        """The kernel's name for ``cc`` in this run (the BPF DCTCP registers under a per-run name)."""
        if self._cc is None:
            raise RuntimeError("the fabric is not built")
        return self._cc.kernel_name(cc)

    def _host_cc(self) -> dict[str, str]:
        """A host namespace's congestion control and ECN sysctls."""
        assert self._cc is not None
        return self._cc.namespace_defaults(self.spec.transport.cc, self.spec.transport.ecn)

    # --- teardown ----------------------------------------------------------------------------------------------
    def teardown(self) -> None:
        errors: list[str] = []

        def step(what: str, fn: Callable[[], None]) -> None:
            try:
                fn()
            except Exception as exc:  # every step runs; the first failures are reported together
                errors.append(f"{what}: {exc}")

        step("stop processes", self.procs.stop_all)
        while self._closers:
            step("close run-time helpers", self._closers.pop())
        if self._markers is not None:
            step("detach ECN markers", self._markers.close)
            self._markers = None
        if self._flowlets is not None:
            step("detach flowlet programs", self._flowlets.close)
            self._flowlets = None
        if self._net is not None:
            net, self._net = self._net, None
            step("stop Mininet nodes", lambda: _terminate_all(net.hosts))
        if self.state is not None:
            names = list(reversed(self.state.namespaces))
            step("delete namespaces", lambda: delete_namespaces(names))
        if self._cc is not None:
            step("restore congestion control", self._cc.close)
            self._cc = None
        if self._lock is not None:
            lock, self._lock = self._lock, None
            step("release run lock", lambda: lock.__exit__(None, None, None))
        self.state = None
        self._restore_sigterm()
        if errors:
            raise RuntimeError("teardown incomplete (run `python3 -m testbed clean`): " + "; ".join(errors))

    def _install_sigterm(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return

        def on_term(signum: int, frame: FrameType | None) -> None:
            raise SystemExit(128 + signum)

        self._old_sigterm = signal.signal(signal.SIGTERM, on_term)

    def _restore_sigterm(self) -> None:
        if self._old_sigterm is not None:
            signal.signal(signal.SIGTERM, self._old_sigterm)
            self._old_sigterm = None


def _terminate_all(nodes: list[Any]) -> None:
    for node in nodes:
        node.terminate()
