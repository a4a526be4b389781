"""ECN marking and congestion control on the real egress queue, as root.

Topology (tests/root/ecn_net.py): s1, s2 -> r -> d; r's egress to d is the 100 Mbit/s bottleneck, htb + bfifo
300 KB; MTU 1500, gso_max_segs 1 everywhere; tcp_ecn=1 and the congestion control set per namespace.
Run under the benchmark lock: `flock /run/testbed-bench.lock /usr/bin/python3 -m pytest tests/root/test_ecn_marker.py`.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import time
from pathlib import Path

import pytest

from testbed.bpf.build import DEFAULT_OUT, build
from testbed.bpf.sysrun import BPFFS, sysctl_read
from testbed.ecn import CongestionControl, MarkerSet, choose_impl, leaf_qdisc_args, probe
from testbed.ecn.cc import ALLOWED, struct_ops_ids
from testbed.host.capabilities import Capabilities
from testbed.host.waiting import wait_listening, wait_until
from testbed.spec.link import LinkSpec
from tests.root import ecn_net as en

pytestmark = [
    pytest.mark.root,
    pytest.mark.bench,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (namespaces, tc, BPF)"),
]

BASE = {"rate": "100Mbit", "buffer": "300KB", "mtu": 1500}
SECONDS = 6


def link(ecn: dict | None = None) -> LinkSpec:
    return LinkSpec.from_dict({**BASE, **({"ecn": ecn} if ecn else {})}, "link")


def bpf_prog_ids(*names: str) -> set[int]:
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True, check=True).stdout
    return {int(p["id"]) for p in json.loads(out or "[]") if p.get("name", "").startswith(names)}


@pytest.fixture(scope="session")
def build_dir() -> Path:
    build(DEFAULT_OUT)
    return DEFAULT_OUT


@pytest.fixture
def run_lock():
    """These tests build their own small topology: they still hold the machine's run lock, like any run, so that no
    fabric measures on the same cores and nobody else edits the root allowed-cc list meanwhile."""
    from testbed.host.ownership import RunLock

    with RunLock(wait=1800):
        yield


@pytest.fixture
def clean_after(run_lock):
    """After the test: none of the BPF programs/struct_ops it loaded remain, the allowed list is as before."""
    allowed = sysctl_read(ALLOWED)
    progs_before = bpf_prog_ids("ecn_mark", "tbd_dctcp")
    ops_before = set(struct_ops_ids())
    yield

    def left() -> tuple[set[int], set[int]]:
        return bpf_prog_ids("ecn_mark", "tbd_dctcp") - progs_before, set(struct_ops_ids()) - ops_before

    # the kernel frees detached programs and struct_ops maps asynchronously (RCU)
    wait_until(
        lambda: left() == (set(), set()),
        10,
        "the test's BPF programs and struct_ops to be freed",
        0.1,
        lambda: "programs left {}, struct_ops left {}".format(*left()),
    )
    assert not (BPFFS / en.PREFIX).exists(), "pins left"
    assert sysctl_read(ALLOWED) == allowed


@pytest.fixture
def net(clean_after, build_dir):
    n = en.Net()
    markers = MarkerSet(en.PREFIX, build_dir)
    cc = CongestionControl(en.PREFIX, build_dir)
    try:
        n.build()
        yield n, markers, cc
    finally:
        markers.close()
        n.destroy()
        cc.close()


def hosts_cc(cc: CongestionControl, algo: str) -> dict[str, str]:
    sources = cc.prepare({algo})
    for h in ("s1", "s2", "d"):
        cc.set_namespace_default(en.ns(h), algo, ecn=True)
    return sources


def past_slow_start(rows: list, t0: float) -> tuple[list, dict[str, int]]:
    """The SenderSampler rows taken 1.5 s after ``t0``, and their ``huge_ssthresh`` (samples with ssthresh
    >= 65535) and ``max_cwnd``."""
    late = [r for r in rows if r[0] > t0 + 1.5]
    return late, {"huge_ssthresh": sum(r[3] is None for r in late), "max_cwnd": max((r[2] for r in late), default=0)}


def measure(seconds: float = SECONDS, senders: bool = False) -> dict:
    """Goodput, steady queue percentiles, drops, CE/ECT(0) at the receiver; with ``senders``, also the senders'
    cwnd/ssthresh past slow start (``huge_ssthresh``: samples with ssthresh >= 65535, ``max_cwnd``)."""
    d0, q0 = en.netstat("d"), en.leaf_stats()
    sampler = en.QueueSampler()
    ss = en.SenderSampler() if senders else None
    sampler.start()
    if ss:
        ss.start()
    t0 = time.time()
    results = en.iperf_pair(seconds)
    backlog = sampler.stop()
    rows = ss.stop() if ss else []
    d1, q1 = en.netstat("d"), en.leaf_stats()
    steady = backlog[len(backlog) // 6 :]  # skip slow start
    _, extra = past_slow_start(rows, t0)
    return {
        **(extra if ss else {}),
        "goodput": sum(r["end"]["sum_received"]["bits_per_second"] for r in results),
        "p99": en.percentile(steady, 99),
        "median": statistics.median(steady),
        "samples": len(backlog),
        "drops": q1["drops"] - q0["drops"],
        "in_ce": d1["IpExt.InCEPkts"] - d0["IpExt.InCEPkts"],
        "in_ect0": d1["IpExt.InECT0Pkts"] - d0["IpExt.InECT0Pkts"],
        "retrans": sum(r["end"]["sum_sent"].get("retransmits", 0) for r in results),
    }


def ip_checksum_ok(hdr: bytes) -> bool:
    s = sum(int.from_bytes(hdr[i : i + 2], "big") for i in range(0, len(hdr), 2))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return s == 0xFFFF


def test_probe_reports_this_kernel():
    en.sh("ip", "netns", "add", en.ns("probe"))
    try:
        caps = probe(en.ns("probe"))
    finally:
        en.sh("ip", "netns", "del", en.ns("probe"))
    assert caps["sch_red"] is False and caps["bpf_marker"] is True and caps["dctcp"] == "bpf", caps
    assert choose_impl(link({"mode": "step", "k": "30KB"}).marking, Capabilities.from_dict({"ecn": caps})) == "bpf"


def test_step_marking_vs_droptail(net, tmp_path, record_property):
    n, markers, cc = net
    assert hosts_cc(cc, "cubic") == {"cubic": "kernel"}
    tail = measure()
    print("drop-tail", tail)

    spec = link({"mode": "step", "k": "30KB", "impl": "bpf"})
    assert leaf_qdisc_args(spec.marking, spec, "bpf") == n.leaf
    markers.attach(en.ns("r"), "r-d", spec.marking, spec)
    pcap = tmp_path / "rx.pcap"
    cap = en.capture("d", "d-r", pcap, count=3000, timeout=SECONDS)
    m0 = markers.read_marks()[(en.ns("r"), "r-d")]
    step = measure()
    m1 = markers.read_marks()[(en.ns("r"), "r-d")]
    cap.wait(SECONDS + 10)
    marks = m1["marks"] - m0["marks"]
    print("step", step, "marker", m1)
    record_property("droptail", tail)
    record_property("step", {**step, "marks": marks})

    assert tail["p99"] > 250_000 and tail["drops"] > 0
    assert step["p99"] < 3 * 30_000 and step["drops"] == 0
    assert marks > 0 and abs(step["in_ce"] - marks) <= 0.03 * marks, (step["in_ce"], marks)
    assert step["goodput"] >= 0.9 * tail["goodput"]

    from scapy.all import IP, rdpcap

    pkts = [p[IP] for p in rdpcap(str(pcap)) if IP in p]
    ce = [p for p in pkts if p.tos & 3 == 3]
    bad = [p for p in pkts if not ip_checksum_ok(bytes(p)[: p.ihl * 4])]
    print(f"capture: {len(pkts)} IP packets, {len(ce)} CE, {len(bad)} bad checksums")
    assert len(pkts) > 1000 and ce and not bad


def test_dctcp_registration_leaves_no_object_copy(net, build_dir):
    """build/bpf kept a dctcp-<prefix>.bpf.o per run (every killed run left one). The renamed copy now
    lives only while bpftool registers it: none exists while the BPF DCTCP is registered."""
    _, _, cc = net
    assert hosts_cc(cc, "dctcp") == {"dctcp": "bpf"}
    assert cc.kernel_name("dctcp") in en.nsx("s1", "sysctl", "-n", "net.ipv4.tcp_available_congestion_control").stdout
    assert sorted(build_dir.glob("dctcp-*.bpf.o")) == []


def test_dctcp_holds_queue_near_k(net):
    """Two DCTCP flows at K = 30 KB hold the 300 KB queue near K, without drops.

    The known bug (test_dctcp_repeated_runs_keep_ssthresh_sane) can strike any run; the BPF DCTCP counts each garbage
    cwnd/ssthresh it repairs. A run whose counter stayed 0 is judged strictly; a run where the bug struck and the queue
    or drops show it is the bug's xfail, with the evidence. Measured in 10 runs: counter 0 once (max cwnd 15, p99
    34.8 KB, no drops); 2-291 in the other nine (max cwnd 51-2538, drops in six, up to 4007)."""
    _, markers, cc = net
    sources = hosts_cc(cc, "dctcp")
    assert sources == {"dctcp": "bpf"}
    assert en.nsx("s1", "sysctl", "-n", "net.ipv4.tcp_congestion_control").stdout.strip() == cc.kernel_name("dctcp")
    spec = link({"mode": "step", "k": "30KB"})
    markers.attach(en.ns("r"), "r-d", spec.marking, spec)
    res = measure(senders=True)
    marks = markers.read_marks()[(en.ns("r"), "r-d")]["marks"]
    counters = dctcp_counters()
    print("dctcp", res, "marks", marks, "counters", counters)
    assert "repaired" in counters, "the BPF DCTCP's .bss counters could not be read"
    assert marks > 0
    # the bug's runaway cwnd overflows the buffer, and recovering from those drops costs goodput too (a CI run:
    # 78.8 Mbit/s against the 86 asked, repair counter > 0): all three are its evidence, judged together
    goodput_ok = res["goodput"] >= 0.9 * spec.payload_rate_bps
    held = 15_000 <= res["median"] <= 60_000 and res["drops"] == 0 and goodput_ok
    if not held and counters["repaired"] > 0:
        pytest.xfail(
            f"known BPF DCTCP bug on this kernel struck: {counters['repaired']} garbage cwnd/ssthresh repaired, "
            f"max cwnd {res['max_cwnd']}, {res['drops']} drops, median {res['median']} B, goodput "
            f"{res['goodput'] / 1e6:.1f} Mbit/s"
        )
    assert held, res


@pytest.mark.parametrize("pmax", [0.2, 0.5])
def test_ramp_probability_under_overload(net, pmax):
    """UDP ECT(0) at 1.5x line rate keeps the queue at the 300 KB limit, between Kmin 30 KB and Kmax 300 KB."""
    _, markers, _ = net
    spec = link({"mode": "ramp", "kmin": "30KB", "kmax": "300KB", "pmax": pmax})
    markers.attach(en.ns("r"), "r-d", spec.marking, spec)
    srv = subprocess.Popen(
        ["nsenter", f"--net=/run/netns/{en.ns('d')}", "iperf3", "-s", "-1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(en.ns("d"), 5201)
        sampler = en.QueueSampler()
        client = subprocess.Popen(
            [
                "nsenter",
                f"--net=/run/netns/{en.ns('s1')}",
                "iperf3",
                "-c",
                en.HOSTS["d"],
                "-u",
                "-b",
                "150M",
                "-l",
                "1472",
                "--tos",
                "2",
                "-t",
                "4",
                "-J",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        low, high = spec.marking.thresholds_bytes(spec.mtu)
        # steady overload: the queue stands at the top of the ramp (bfifo limit = Kmax), two frames' slack
        wait_until(
            lambda: int(en.leaf_stats().get("backlog", 0)) >= high - 2 * 1514,
            10,
            f"the UDP overload to fill the queue to {high - 2 * 1514} bytes",
            0.02,
            lambda: f"backlog {en.leaf_stats().get('backlog', 0)} B",
        )
        m0 = markers.read_marks()[(en.ns("r"), "r-d")]
        sampler.start()
        time.sleep(2.5)  # the measured duration: marks and backlog are counted over these 2.5 s of overload
        backlog = sampler.stop()
        m1 = markers.read_marks()[(en.ns("r"), "r-d")]
        client.communicate(timeout=20)
    finally:
        srv.kill()
        srv.wait()
    marks, ect = m1["marks"] - m0["marks"], m1["ect_seen"] - m0["ect_seen"]
    mean_q = statistics.mean(backlog)
    expected = pmax * (mean_q - low) / (high - low)
    p = marks / ect
    sd = (expected * (1 - expected) / ect) ** 0.5
    print(
        f"ramp pmax={pmax}: {marks}/{ect} = {p:.4f}, expected {expected:.4f} (queue mean {mean_q:.0f} B, "
        f"min {min(backlog)}), sd {sd:.4f}"
    )
    assert min(backlog) > low and max(backlog) <= high
    assert ect > 10_000
    # sampling error plus the error in the mean queue (one frame of 270 KB: 0.6% of pmax)
    assert abs(p - expected) <= 4 * sd + 0.006 * pmax, (p, expected)


REPEAT_RUNS = 5
REPEAT_SECONDS = 4


@pytest.mark.xfail(
    strict=False,
    reason="known bug: on this 6.18 kernel a sender sometimes sits in CWR with an ssthresh none of the BPF programs "
    "set (infinite, or a stale word like 0x81104110) and PRR grows its cwnd without bound; the programs repair it per "
    "ACK (bpf/dctcp.bpf.c), which narrows the bug: 6 of 15 runs still dropped, 8 of 10 before",
)
def test_dctcp_repeated_runs_keep_ssthresh_sane(net):
    """Several short DCTCP runs: after slow start no sender's ssthresh is huge (>= 65535) and nothing is dropped."""
    _, markers, cc = net
    hosts_cc(cc, "dctcp")
    spec = link({"mode": "step", "k": "30KB"})
    markers.attach(en.ns("r"), "r-d", spec.marking, spec)
    bad = []
    for i in range(REPEAT_RUNS):
        sampler = en.SenderSampler()
        q0 = en.leaf_stats()
        sampler.start()
        t0 = time.time()
        en.iperf_pair(REPEAT_SECONDS)
        rows = sampler.stop()
        drops = en.leaf_stats()["drops"] - q0["drops"]
        late, seen = past_slow_start(rows, t0)
        print(
            f"run {i}: drops {drops}, samples {len(late)}, huge ssthresh {seen['huge_ssthresh']}, "
            f"max cwnd {seen['max_cwnd']}"
        )
        if drops or seen["huge_ssthresh"] or not late:
            bad.append((i, drops, seen["huge_ssthresh"], len(late)))
    misses = dctcp_recursion_misses()
    counters = dctcp_counters()
    print(f"struct_ops DCTCP recursion misses: {misses}; counters: {counters}")
    assert not bad, (bad, misses, counters)


def dctcp_counters() -> dict[str, int]:
    """The BPF DCTCP's .bss counters: ``uninit_state`` (sockets it found uninitialized), ``repaired`` (garbage
    cwnd/ssthresh values it put right)."""
    from testbed.bpf.sysrun import tool

    def bpftool(*args: str) -> object:
        out = subprocess.run([tool("bpftool"), "-j", *args], capture_output=True, text=True, check=False).stdout
        return json.loads(out or "null")

    progs = [p for p in bpftool("prog", "show") or [] if p.get("name") == "tbd_dctcp_ssthresh"]
    for map_id in progs[-1].get("map_ids", []) if progs else []:
        for entry in bpftool("map", "dump", "id", str(map_id)) or []:
            sections = (entry.get("formatted") or {}).get("value", {}).get(".bss", []) or []
            found = {k: int(v) for section in sections for k, v in section.items()}
            if "uninit_state" in found:
                return found
    return {}


def dctcp_recursion_misses() -> dict[str, int]:
    """recursion_misses of the loaded struct_ops DCTCP programs (bpftool prints it only when non-zero): a program
    the trampoline skipped because it was already running on that CPU would leave its return value unset."""
    from testbed.bpf.sysrun import tool

    out = subprocess.run([tool("bpftool"), "-j", "prog", "show"], capture_output=True, text=True, check=False).stdout
    return {
        p["name"]: int(p.get("recursion_misses", 0))
        for p in json.loads(out or "[]")
        if str(p.get("name", "")).startswith("tbd_dctcp")
    }
