"""Every scenario key outside the jobs, declared once for the reference (testbed.spec.reference): its type, default,
bounds or choices, and meaning. The jobs' keys are declared with their fields (``spec_field``, testbed.spec.workload).

The parsers (``from_dict`` of each spec) stay the judges of a value; tests/unit/test_scenario_reference.py checks
that each section here names exactly the keys its parser accepts, and tests/unit/test_scenario_keys.py that each
default, bound and choice is what the parser does. Where a parser names its value (a default, bounds, choices),
the declaration reads it from there.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.spec.events import ACTIONS, DETECTION_S
from testbed.spec.fabric import MAX_NODES, FabricSpec
from testbed.spec.link import CCS, ECMP_MODES, HASHES, MARK_IMPLS, MARK_MODES, MAX_LOSS, MTU_RANGE, PICKS, LinkSpec
from testbed.spec.units import format_rate


@dataclass(frozen=True)
class Key:
    """One key of a section. ``type``: integer, number, boolean, string, choice, rate, size, duration, ratio,
    hosts, sweep, any; or ``section:NAME`` (a mapping of that section's keys) or ``list:NAME`` (a list of them).
    ``default`` as a scenario would write it ("" when there is none). ``lo`` and ``hi`` are accepted, unless
    ``lo_open`` (then only values above ``lo``)."""

    key: str
    type: str
    default: str
    doc: str
    choices: tuple[str, ...] = ()
    lo: float | None = None
    hi: float | None = None
    required: bool = False
    also: tuple[str, ...] = ()  # further types the value may take (e.g. scale: a number, or a mapping)
    lo_open: bool = False


LINK = LinkSpec()
MTU_LO, MTU_HI = MTU_RANGE
# The largest even k of a fat-tree the harness builds: its parser's 16 is 1,344 nodes, above MAX_NODES.
FAT_TREE_MAX_K = max(k for k in range(2, 17, 2) if FabricSpec(topology="fat-tree", k=k).node_count <= MAX_NODES)

SECTIONS: dict[str, tuple[Key, ...]] = {
    "scenario": (
        Key("name", "string", "", "a short identifier: letters, digits, - _ .", required=True),
        Key("description", "string", "", "what the experiment shows, in a sentence or two"),
        Key("label", "string", "", "a name for the setting that changes nothing in the run (A/A sweeps)"),
        Key("fabric", "section:fabric", "", "the fabric: topology, links, routing, transport", required=True),
        Key("workload", "list:job", "[]", "the jobs, run together"),
        Key("events", "list:event", "[]", "scheduled link events after traffic starts"),
        Key("duration", "duration", "60s", "upper bound for the whole workload"),
        Key("sweep", "sweep", "", "axes: a dotted key path -> the values it takes; the points are their product"),
        Key("repeat", "integer", "1", "repetitions of every point", lo=1, hi=1000),
        Key("seed", "integer", "1", "the run's seed (flow placement, size draws)", lo=0, hi=2**31),
        Key("placement", "section:placement", "", "who picks flows' source ports"),
        Key("telemetry", "section:telemetry", "", "sampler rates and the kernel queue telemetry"),
        Key("kernel", "choice", "native", "stock: run inside a pinned stock kernel (testbed vm)", ("native", "stock")),
    ),
    "telemetry": (
        Key("queue_hz", "number", "1000", "queue samples per second", lo=1, hi=20000),
        Key("link_hz", "number", "100 (at most queue_hz)", "link counter samples per second", lo=1, hi=2000),
        Key("cpu_hz", "number", "10", "CPU samples per second", lo=0, hi=100),
        Key("bpf_queues", "boolean", "false", "also count every queue in the kernel (qslots.csv)"),
        Key("slot_us", "number", "100", "the kernel queue telemetry's slot, in microseconds", lo=10, hi=1e6),
        Key("path_bytes", "boolean", "true", "count each flow's bytes in every spine or core (path_bytes.csv)"),
    ),
    "fabric": (
        Key(
            "topology",
            "choice",
            "spine-leaf",
            f"the fabric's shape (at most {MAX_NODES} nodes: switches and hosts)",
            ("spine-leaf", "fat-tree"),
        ),
        Key("spines", "integer", "2", "spine switches (spine-leaf)", lo=1, hi=64),
        Key("leaves", "integer", "4", "leaf switches (spine-leaf)", lo=1, hi=254),
        Key("hosts_per_leaf", "integer", "2", "hosts on each leaf (spine-leaf)", lo=1, hi=254),
        Key("k", "integer", "4", "a fat-tree's arity (even)", lo=2, hi=FAT_TREE_MAX_K),
        Key(
            "oversubscription",
            "ratio",
            "",
            "host-facing over uplink capacity of a leaf, e.g. '2:1': sets fabric_link.rate",
        ),
        Key("host_link", "section:link", "", "every host-leaf link (both directions)"),
        Key("fabric_link", "section:link", "host_link's", "every switch-switch link; inherits what it does not set"),
        Key("overrides", "list:override", "[]", "settings of one egress port or of both directions of one link"),
        Key("ecmp", "section:ecmp", "", "how routers spread traffic over equal-cost next hops"),
        Key("transport", "section:transport", "", "every host's transport defaults"),
        Key("scale", "section:scale", "", "state real-world rates; the fabric runs at rate / factor", also=("number",)),
    ),
    "link": (
        Key("rate", "rate", format_rate(LINK.rate_bps), "line rate of each egress port (HTB, Ethernet header counted)"),
        Key("buffer", "size", str(LINK.buffer), "depth of each egress queue"),
        Key("mtu", "integer", str(LINK.mtu), "MTU of every link (one for the whole fabric)", lo=MTU_LO, hi=MTU_HI),
        Key("loss", "number", f"{LINK.loss:g}", "random drop probability per packet", lo=0, hi=MAX_LOSS),
        Key(
            "delay",
            "duration",
            f"{LINK.delay_s:g}s",
            "one-way delay (needs netem); write the unit: tc reads a bare 40 as 40us",
        ),
        Key("ecn", "section:ecn", "off", "ECN marking of the queue", also=("boolean", "string")),
        Key("classes", "list:class", "", "traffic classes: a queue per class, keyed by DSCP (none: one queue)"),
    ),
    "override": (
        Key("port", "string", "", "one egress queue, 'node->peer' (give port or link)"),
        Key("link", "string", "", "both directions of a link, 'node-peer' (give port or link)"),
        Key("rate", "rate", "the tier's", "as in a link"),
        Key("buffer", "size", "the tier's", "as in a link"),
        Key("mtu", "integer", "the tier's", "as in a link (must equal host_link's)", lo=MTU_LO, hi=MTU_HI),
        Key("loss", "number", "the tier's", "as in a link", lo=0, hi=MAX_LOSS),
        Key("delay", "duration", "the tier's", "as in a link"),
        Key("ecn", "section:ecn", "the tier's", "as in a link", also=("boolean", "string")),
        Key("classes", "list:class", "the tier's", "as in a link"),
    ),
    "ecn": (
        Key(
            "mode",
            "choice",
            "",
            "off (drop-tail), step (mark above k), ramp (WRED kmin..kmax)",
            MARK_MODES,
            required=True,
        ),
        Key("k", "size", "", "step: mark every ECT packet arriving with the queue at or above k"),
        Key("kmin", "size", "", "ramp: marking starts here"),
        Key("kmax", "size", "", "ramp: marking reaches pmax here (all above)"),
        Key("pmax", "number", "", "ramp: the marking probability at kmax", lo=0, hi=1, lo_open=True),
        Key("impl", "choice", "auto", "kernel sch_red or the project's eBPF marker", MARK_IMPLS),
    ),
    "class": (
        Key("name", "string", "", "the class's name", required=True),
        Key(
            "dscp",
            "integer",
            "",
            "the DSCP values it takes (0..63; one or a list)",
            lo=0,
            hi=63,
            required=True,
            also=("array",),
        ),
        Key("priority", "integer", "", "strict priority, 1 served first (give priority or weight)", lo=1, hi=7),
        Key("weight", "integer", "", "a weighted share of what the strict classes leave", lo=1, hi=100),
        Key("buffer", "size", "the link's", "the class's queue depth"),
        Key("ecn", "section:ecn", "the link's", "the class's own marking", also=("boolean", "string")),
        Key("default", "boolean", "false", "takes packets whose DSCP no class names"),
        Key("lossless", "section:lossless", "false", "PFC-style pause of the class", also=("boolean",)),
    ),
    "lossless": (
        Key("xoff", "size", "", "pause the upstream ports above this backlog", required=True),
        Key("xon", "size", "xoff / 2", "resume them below this backlog"),
    ),
    "ecmp": (
        Key("hash", "choice", "l4", "static mode's hash: l3 (addresses) or l4 (the 5-tuple)", HASHES),
        Key("seed", "integer", "", "the routers' hash seed (default: the kernel's)", lo=0, hi=2**32 - 1),
        Key(
            "mode",
            "choice",
            "static",
            "per-flow hashing, per-packet spraying, flowlets, or adaptive",
            ECMP_MODES,
        ),
        Key("pick", "choice", PICKS[0], "spray and flowlet: how a next hop is picked", PICKS),
        Key(
            "gap",
            "duration",
            "the fabric's",
            "flowlet and adaptive: idle gap that starts a new flowlet (0s: per packet)",
        ),
    ),
    "transport": (
        Key("cc", "choice", "cubic", "every host's congestion control", CCS),
        Key("ecn", "boolean", "true", "hosts negotiate ECN (DCTCP needs it)"),
        Key("gso_max_segs", "integer", "1", "segments per GSO super-packet", lo=1, hi=65535),
    ),
    "scale": (
        Key("factor", "number", "", "the fabric runs at rate / factor", lo=1, required=True),
        Key("rtt", "duration", "", "the real base RTT (buffers: bdp needs it)"),
        Key("emulated_rtt", "duration", "an estimate", "the emulated base RTT, for buffers: bdp"),
        Key(
            "buffers",
            "choice",
            "keep (bdp with rtt)",
            "bytes unchanged, or the same multiple of the BDP",
            ("keep", "bdp"),
        ),
    ),
    "event": (
        Key("at", "duration", "", "time after traffic starts", required=True),
        Key(
            "action",
            "choice",
            "",
            "what happens to the link",
            ACTIONS,
            required=True,
        ),
        Key("link", "string", "", "a switch-switch link, e.g. s1-l2", required=True),
        Key(
            "detection", "duration", f"{DETECTION_S * 1e3:g}ms", "down, up, flap: when routing notices and reconverges"
        ),
        Key("count", "integer", "1", "flap: down/up cycles", lo=1, hi=1000),
        Key("period", "duration", "1s", "flap: one cycle (down for half of it)"),
        Key("rate", "rate", "", "degrade: the link's new rate, both directions"),
        Key("loss", "number", "", "degrade: random loss, both directions", lo=0, hi=0.999),
        Key("end", "string", "", "mtu: the node whose side of the link changes"),
        Key("mtu", "integer", "", "mtu: its interface's new MTU", lo=68, hi=65535),
    ),
}
