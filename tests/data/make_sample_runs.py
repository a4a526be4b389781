"""Write the SYNTHETIC sample run records under tests/data/runs/ with the real writer (results.record).

The numbers are a seeded model of an incast on a 2x2 spine-leaf at 100 Mbit/s (not a measurement): a deeper
buffer gives a higher backlog and RTT and fewer drops. They exist so that readers, metrics, tables and plots are
tested without root. Regenerate with: /usr/bin/python3 tests/data/make_sample_runs.py
"""

from __future__ import annotations

import json
import random
import shutil
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script from anywhere

from results.metrics import finish_run
from results.record import RunRecord

OUT = Path(__file__).resolve().parent / "runs"
RATE = 100_000_000
HOSTS = {"l1h1": "10.0.1.1", "l1h2": "10.0.1.2", "l2h1": "10.0.2.1", "l2h2": "10.0.2.2"}
T0 = 1_750_000_000.0
DUR = 2.0


FIDELITY = {
    "faithful": True,
    "checks": [
        {
            "name": "cpu_saturation",
            "ok": True,
            "value": 0.0,
            "threshold": 0.1,
            "reason": "all 2 cores >= 95% busy in 0% of 50 samples (mean 41%)",
            "details": {"mean_busy": 0.41, "samples": 50},
        }
    ],
}
CPU_BUDGET = {"window_s": 5.0, "cores": 2, "busy_core_s": 4.1, "busy_share": 0.41, "harness_share": 0.18}


def fabric(buffer: int) -> dict[str, Any]:
    nodes = [{"name": h, "layer": "host", "netns": f"tb0000-{h}", "ip": ip} for h, ip in HOSTS.items()]
    nodes += [
        {"name": n, "layer": layer, "netns": f"tb0000-{n}"}
        for n, layer in (("l1", "leaf"), ("l2", "leaf"), ("s1", "spine"), ("s2", "spine"))
    ]
    ports = []

    def port(node: str, peer: str, layer: str, peer_layer: str, direction: str) -> None:
        ports.append(
            {
                "node": node,
                "dev": f"{node}-{peer}",
                "peer": peer,
                "layer": layer,
                "peer_layer": peer_layer,
                "direction": direction,
                "rate_bps": RATE,
                "buffer_bytes": buffer,
                "mtu": 1500,
                "marking": "drop-tail",
            }
        )

    for h in HOSTS:
        port(h, h[:2], "host", "leaf", "up")
        port(h[:2], h, "leaf", "host", "down")
    for leaf in ("l1", "l2"):
        for spine in ("s1", "s2"):
            port(leaf, spine, "leaf", "spine", "up")
            port(spine, leaf, "spine", "leaf", "down")
    return {"topology": "spine-leaf", "nodes": nodes, "ports": ports}


def path(src: str, dst: str, spine: str) -> list[str]:
    """Egress ports (node:dev) a packet src -> dst crosses."""
    hops = [f"{src}:{src}-{src[:2]}"]
    if src[:2] != dst[:2]:
        hops += [f"{src[:2]}:{src[:2]}-{spine}", f"{spine}:{spine}-{dst[:2]}"]
    return [*hops, f"{dst[:2]}:{dst[:2]}-{dst}"]


def scenario(buffer_kb: int, seed: int) -> dict[str, Any]:
    return {
        "name": "incast-buffer",
        "seed": seed,
        "duration": "2s",
        "topology": {"kind": "spine-leaf", "spines": 2, "leaves": 2, "hosts_per_leaf": 2},
        "links": {"rate": "100Mbit", "buffer": f"{buffer_kb}KB", "marking": "drop-tail", "mtu": 1500},
        "ecmp": {"hash_policy": 3},
        "traffic": [
            {"name": "ring", "kind": "allreduce", "algorithm": "ring", "size": "1MB", "iterations": 20, "warmup": 2},
            {"name": "bulk", "kind": "iperf3", "src": ["l1h1", "l1h2", "l2h2"], "dst": "l2h1"},
            {"name": "short", "kind": "short_flows", "sizes": ["10KB", "100KB", "1MB"]},
            {"name": "probe", "kind": "latency", "src": "l1h1", "dst": "l2h1", "interval": "10ms"},
        ],
    }


def kernel_telemetry(rec: RunRecord, seed: int, buf: int, t0: float, hot: str, drops: int) -> None:
    """qslots.csv around one incast burst at ``hot`` (100 us slots) that overflows the buffer by the ``drops`` the
    poller's rows counted there, and the manifest's qtelem_health: sojourn and dequeue-gap histograms per port. Its
    own generator, so the other tables are as they were without it."""
    rnd = random.Random(seed + 7)
    qs = rec.table("qslots")
    frame, slot_s = 1514, 100e-6
    backlog = 0
    node, dev = hot.split(":")
    for k in range(400):  # 40 ms: a buffer's worth of frames arrives at once at 20 ms, then leaves one per 121 us
        arrive = buf // frame + drops if k == 200 else (1 if rnd.random() < 0.55 else 0)
        leave = min(backlog // frame + arrive, 1)
        dropped = max(0, backlog + arrive * frame - buf + frame - 1) // frame
        backlog_max = backlog + (arrive - dropped) * frame
        backlog = backlog_max - leave * frame
        if arrive == 0 and leave == 0:
            continue
        soj = [0] * 16
        soj[min(15, 7 + backlog_max // (4 * frame))] = leave
        qs.write(
            {"t": round(t0 + 0.5 + k * slot_s, 6), "node": node, "dev": dev, "backlog_max": backlog_max,
             "backlog_min": backlog, "backlog_last": backlog, "qlen_max": backlog_max // frame, "enq_pkts": arrive, "enq_bytes": arrive * frame,
             "deq_pkts": leave, "deq_bytes": leave * frame, "drops": dropped, "marks": 0, "soj_n": leave,
             **{f"soj_b{b}": soj[b] for b in range(16)}}
        )  # fmt: skip
    ports: dict[str, Any] = {}
    for key, busy in ((hot, 1.0), ("s1:s1-l2", 0.4), ("s2:s2-l2", 0.3)):
        n = int(20000 * busy)
        early = [0, 0, 0, int(n * 0.3), int(n * 0.15), int(n * 0.04)] + [0] * 10
        late = [0, 0, 0, int(n * 0.3), int(n * 0.15), int(n * 0.05), rnd.randint(5, 20), rnd.randint(0, 5)] + [0] * 8
        soj = [0, 0, 0, 0, 0, 0, 0, int(n * 0.2), int(n * 0.3), int(n * 0.3), int(n * 0.2)] + [0] * 5
        ports[key] = {"enq_pkts": n, "deq_pkts": n, "marks": 0, "soj_max_us": 1800.0, "soj_miss": 0,
                      "soj_hist": soj, "gap_n": sum(early) + sum(late), "gap_mean_abs_us": 9.5,
                      "gap_hist": early + late}  # fmt: skip
    rec.set(
        "qtelem_health",
        {"source": "bpf", "slot_us": 100.0, "drain_s": 0.25, "ring_slots": 4096, "lost_slots": 0, "rows": 400,
         "cpu_s": 0.05, "duration_s": DUR, "soj_edges_us": [float(1 << b) for b in range(15)] + [None],
         "ports": ports},
    )  # fmt: skip


def write_run(parent: Path, buffer_kb: int, rep: int, when: datetime, killed: bool = False) -> Path:
    seed = 100 * buffer_kb + rep
    rnd = random.Random(seed)
    buf = buffer_kb * 1000
    shallow = buffer_kb < 100
    scen = scenario(buffer_kb, seed)
    rec = RunRecord.create(
        parent,
        "incast-buffer",
        {"links.buffer": f"{buffer_kb}KB"},
        scenario=scen,
        repeat_index=rep,
        seed=seed,
        prefix="tb0000",
        now=when,
        extra={"ranks": {"ring": ["l1h1", "l1h2", "l2h1", "l2h2"]}},
    )
    t0 = T0 + 100 * rep + (0 if shallow else 1000)
    rec.update(
        {
            "fabric": fabric(buf),
            "marking": {"impl": "none", "kind": "drop-tail"},
            "capabilities": {"netns": True, "htb": True, "bfifo": True, "sch_red": False, "netem": False, "bpf": True},
            "sysctls": {
                "net.ipv4.tcp_ecn": 0,
                "net.ipv4.tcp_congestion_control": "cubic",
                "net.ipv4.fib_multipath_hash_policy": 3,
            },
            "qdiscs": {"l2": {"l2-l2h1": f"htb rate 100Mbit + bfifo limit {buf}"}},
            "tc_before": {"l2": "qdisc htb 1: root refcnt 2 r2q 10 default 0x1\n Sent 0 bytes 0 pkt (dropped 0)"},
            "tools": {"iperf3": "3.12", "python": "3.11.2", "tc": "iproute2-6.1.0"},
            "fidelity": FIDELITY,
            "cpu_budget": CPU_BUDGET,
        }
    )
    rec.event("built", "fabric spine-leaf 2x2", t=t0 - 0.5)
    # ECMP: each cross-leaf flow picks a spine (seeded, like a hash would)
    flows = [("bulk", 1, "l1h1", "l2h1"), ("bulk", 2, "l1h2", "l2h1"), ("bulk", 3, "l2h2", "l2h1")]
    spine = {f: rnd.choice(["s1", "s2"]) for f in range(1, 4)}
    share = [0.31, 0.30, 0.33] if not shallow else [0.27, 0.36, 0.29]
    rates: dict[str, float] = {}
    for (_job, fid, src, dst), sh in zip(flows, share, strict=True):
        for hop in path(src, dst, spine[fid]):
            rates[hop] = rates.get(hop, 0) + sh * RATE
    ring = ["l1h1", "l1h2", "l2h1", "l2h2"]
    for i, h in enumerate(ring):
        for hop in path(h, ring[(i + 1) % 4], "s2" if i % 2 else "s1"):
            rates[hop] = rates.get(hop, 0) + 0.04 * RATE
    end = DUR * (0.55 if killed else 1.0)
    # queues.csv: every leaf/spine egress port, 50 ms samples
    qports = [f"{p['node']}:{p['dev']}" for p in fabric(buf)["ports"] if p["layer"] != "host"]
    qw = rec.table("queues")
    drops = {q: 0 for q in qports}
    tx = {q: 0 for q in qports}
    backlog = {q: 0.0 for q in qports}
    hot = "l2:l2-l2h1"
    n = int(end / 0.05)
    for k in range(n):
        t = t0 + k * 0.05
        for q in qports:
            load = rates.get(q, 0) / RATE
            if q == hot:
                backlog[q] = min(buf, backlog[q] + rnd.uniform(4000, 16000))
                if backlog[q] >= buf:
                    drops[q] += rnd.randint(3, 12)
                    backlog[q] *= rnd.uniform(0.3, 0.6)  # TCP backs off
            else:
                backlog[q] = min(buf, max(0.0, rnd.gauss(load * 4000, 1500)))
            tx[q] += int(min(load, 0.97) * RATE / 8 * 0.05)
            qw.write(
                {
                    "t": round(t + rnd.uniform(0, 0.001), 6),
                    "node": q.split(":")[0],
                    "dev": q.split(":")[1],
                    "backlog_bytes": int(backlog[q]),
                    "backlog_pkts": int(backlog[q] // 1514),
                    "drops": drops[q],
                    "marks": 0,
                    "overlimits": drops[q] * 4,
                    "tx_bytes": tx[q],
                    "tx_pkts": tx[q] // 1514,
                    "requeues": 0,
                }
            )
    # links.csv: all 16 ports, 100 ms samples
    lw = rec.table("links")
    lt = {p: 0 for p in (f"{x['node']}:{x['dev']}" for x in fabric(buf)["ports"])}
    for k in range(int(end / 0.1) + 1):
        for p in lt:
            if k:
                lt[p] += int(min(rates.get(p, 0), 0.97 * RATE) / 8 * 0.1 * rnd.uniform(0.93, 1.0))
            lw.write(
                {
                    "t": t0 + k * 0.1,
                    "node": p.split(":")[0],
                    "dev": p.split(":")[1],
                    "tx_bytes": lt[p],
                    "tx_pkts": lt[p] // 1514,
                    "rx_bytes": lt[p],
                    "rx_pkts": lt[p] // 1514,
                    "tx_drops": 0,
                }
            )
    cw = rec.table("cpu")
    for k in range(int(end / 0.1)):
        for cpu in ("all", "0", "1"):
            cw.write({"t": t0 + k * 0.1, "cpu": cpu, "busy": round(rnd.uniform(0.4, 0.75), 3)})
    if killed:  # the process dies here: tables stop mid-way, the last queue row is torn, no summary
        for w in (qw, lw, cw):
            w.flush()
        with open(rec.path / "queues.csv", "a") as fh:
            fh.write(f"{t0 + end:.6f},l2,l2-l2h1,4")
        manifest = json.loads((rec.path / "manifest.json").read_text())
        manifest["pid"] = 4_194_305  # above the kernel's pid_max: certainly dead
        manifest["pid_start"] = None
        (rec.path / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        return rec.path
    fw = rec.table("flows")
    for (job, fid, src, dst), sh in zip(flows, share, strict=True):
        gp = sh * RATE * (0.97 if shallow else 0.99)
        fw.write(
            {
                "job": job,
                "flow_id": fid,
                "src": HOSTS[src],
                "dst": HOSTS[dst],
                "proto": "tcp",
                "sport": 40000 + fid,
                "dport": 5201,
                "bytes": int(gp / 8 * DUR),
                "t_start": t0,
                "t_end": t0 + DUR,
                "goodput_bps": gp,
                "retrans": rnd.randint(20, 60) if shallow else rnd.randint(0, 4),
                "path": f"{src}>{src[:2]}>{spine[fid]}>{dst[:2]}>{dst}" if src[:2] != dst[:2] else "",
            }
        )
    iw = rec.table("iterations")
    sw = rec.table("steps")
    ideal = 2 * 3 / 4 * 1e6 * 8 / RATE
    t = t0
    for it in range(22):
        slow = rnd.random() < (0.12 if shallow else 0.02)
        d = ideal * (rnd.uniform(1.08, 1.25) + (rnd.uniform(0.8, 2.5) if slow else 0))
        iw.write(
            {
                "job": "ring",
                "kind": "allreduce",
                "algorithm": "ring",
                "iter": it,
                "warmup": it < 2,
                "t_start": t,
                "t_end": t + d,
                "size_bytes": 1_000_000,
                "ranks": 4,
                "ideal_s": ideal,
                "busbw_factor": 1.5,
            }
        )
        if it < 6:
            for rank in range(4):
                for step in range(6):
                    sw.write(
                        {
                            "job": "ring",
                            "iter": it,
                            "rank": rank,
                            "step": step,
                            "op": "send",
                            "peer": (rank + 1) % 4,
                            "t_start": t + step * d / 6,
                            "t_end": t + (step + 1) * d / 6,
                            "bytes": 250_000 // 2,
                        }
                    )
        t += d * 0.09  # iterations overlap the 2 s window (the model is not a schedule)
    tw = rec.table("fct")
    sizes = [("small", 10_000), ("medium", 100_000), ("large", 1_000_000)]
    hosts = list(HOSTS)
    for fid in range(120):
        cls, size = sizes[fid % 3]
        src, dst = rnd.sample(hosts, 2)
        base = size * 8 / RATE * 3 + 0.0003
        tail = rnd.random() < (0.08 if shallow else 0.01)
        d = base * rnd.uniform(1.0, 1.6) + (rnd.uniform(0.2, 0.3) if tail else 0) + (buf / 12.5e6 * rnd.random())
        ts = t0 + rnd.uniform(0, DUR - 0.3)
        tw.write(
            {
                "job": "short",
                "flow_id": fid,
                "src": src,
                "dst": dst,
                "size_bytes": size,
                "t_start": ts,
                "t_end": ts + d,
                "size_class": cls,
            }
        )
    rw = rec.table("rtt")
    for seq in range(200):
        lost = shallow and rnd.random() < 0.02
        q = rnd.uniform(0.3, 1.0) * buf
        rw.write(
            {
                "job": "probe",
                "src": "l1h1",
                "dst": "l2h1",
                "seq": seq,
                "t_send": t0 + seq * 0.01,
                "rtt_s": None if lost else 0.0002 + q * 8 / RATE,
            }
        )
    nw = rec.table("netstat")
    for h in hosts:
        base = {
            "Tcp.RetransSegs": rnd.randint(0, 50),
            "TcpExt.TCPTimeouts": rnd.randint(0, 5),
            "TcpExt.TCPDeliveredCE": 0,
            "IpExt.InCEPkts": 0,
            "TcpExt.TCPSACKReorder": 0,
            "TcpExt.TCPDSACKRecv": 0,
        }
        grow = {
            "Tcp.RetransSegs": rnd.randint(40, 120) if shallow else rnd.randint(0, 8),
            "TcpExt.TCPTimeouts": rnd.randint(1, 4) if shallow else 0,
            "TcpExt.TCPDeliveredCE": 0,
            "IpExt.InCEPkts": 0,
            "TcpExt.TCPSACKReorder": 2 if shallow else 0,  # fixed: a draw here would change every later one
            "TcpExt.TCPDSACKRecv": 1 if shallow else 0,
        }
        for c, v in base.items():
            nw.write({"host": h, "phase": "start", "counter": c, "value": v})
            nw.write({"host": h, "phase": "end", "counter": c, "value": v + grow[c]})
    rec.set("traffic_window", [t0, t0 + DUR])
    node, dev = hot.split(":")  # two traffic classes at the hot port, no draws (the figure of classes.csv)
    cw = rec.table("classes")
    for cls, dscp, prio, weight, share, dropped in (("ctrl", "46", 1, None, 0.02, 0), ("be", "0", None, 1, 0.98, 1)):
        sent = int(tx[hot] * share)
        cw.write(
            {
                **{"node": node, "dev": dev, "class": cls, "dscp": dscp, "priority": prio, "weight": weight},
                **{"tx_bytes": sent, "tx_pkts": sent // 9014, "drops": drops[hot] * dropped, "backlog_bytes": 0},
            }
        )
    pw = rec.table("pauses")  # PFC pauses spreading from the hot port's queue, no draws (the pause figure)
    for i, (port, queue, d) in enumerate((("s1->l2", "l2->l2h1", 0.4),
                                          ("l1->s1", "s1->l2", 0.2 if shallow else 0.1))):  # fmt: skip
        node, router = port.split("->")
        pw.write({"port": port, "node": node, "dev": f"{node}-{router}", "router": router, "class": "be",
                  "queue": queue, "t_start": t0 + 1 + i, "t_end": t0 + 1 + i + d, "duration_s": d,
                  "backlog_bytes": buf // 2, "reaction_us": 90.0})  # fmt: skip
    rec.set(
        "tc_after", {"l2": f"qdisc bfifo 10: parent 1:1 limit {buf}b\n Sent {tx[hot]} bytes (dropped {drops[hot]})"}
    )
    kernel_telemetry(rec, seed, buf, t0, hot, drops[hot])
    rec.event("finished", "all jobs done", t=t0 + DUR)
    finish_run(rec)
    return rec.path


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    when = datetime(2025, 6, 15, 12, 0, 0, tzinfo=timezone.utc)
    k = 0
    for buffer_kb in (50, 200):
        for rep in range(3):
            write_run(OUT / "sweep-buffer", buffer_kb, rep, when + timedelta(seconds=10 * k))
            k += 1
    write_run(OUT / "killed", 50, 0, when + timedelta(minutes=5), killed=True)


if __name__ == "__main__":
    main()
