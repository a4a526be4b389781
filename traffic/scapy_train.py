"""Crafted packet trains with scapy (microbursts, RoCEv2 BTH on UDP 4791, ECT/non-ECT) and a capture check.

Sender (``python3 -m traffic.scapy_train CONFIG send``, in src's namespace): builds every frame once with scapy
(Ether/IP with the ECN codepoint/UDP[/BTH with PSN = sequence number]) and sends the prebuilt bytes through ONE
reused L2 socket: ``burst`` frames back to back per train, ``gap`` seconds between trains (``sendp`` per
packet opens a socket each time, far too slow for a train). One UDP source port per job,
as RoCE uses one per queue pair, so ECMP keeps a train on one path (per-packet ports reordered trains here); the
harness places it (traffic.placement) like a TCP flow's.
Capture (``... capture``, in dst's namespace): an AF_PACKET socket records (time, sequence, ECN) of every matching
packet until all are in or the sender is done and 1 s passed. The header fields are read with struct at fixed
offsets (scapy's dissector is ~100x slower); ``decode_frame`` shows the same fields through scapy.contrib.roce.
"""

from __future__ import annotations

import json
import os
import socket
import struct
import sys
import time
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

from testbed.host.child import child_main
from testbed.spec.workload import ScapyTrainJob
from traffic.base import PYTHON, GeneratorError, ProcGenerator, Rows, RunContext, host, read_jsonl
from traffic.gate import ready_then_wait

if TYPE_CHECKING:
    from testbed.host.capabilities import Capabilities

ECN = {"not_ect": 0, "ect1": 1, "ect0": 2, "ce": 3}
ROCE_PORT = 4791
UDP_PORT = 4792
ETH_P_IP = 0x0800


def train_sport(cfg: dict[str, Any]) -> int:
    """The UDP source port of a train the harness did not place (``placement: {mode: kernel}``, older configs): one
    per queue pair for RoCE, one for plain UDP."""
    return 49152 + cfg["qpn"] % 16384 if cfg["payload"] == "roce" else 49152


def build_frames(cfg: dict[str, Any], src_mac: str, dst_mac: str) -> list[bytes]:
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    n = cfg["trains"] * cfg["burst"]
    roce = cfg["payload"] == "roce"
    head = 20 + 8 + (12 + 4 if roce else 4)  # IP + UDP + BTH + ICRC, or a 4-byte sequence number
    pad = b"\x00" * max(0, cfg["size"] - head)
    sport = cfg.get("sport") or train_sport(cfg)
    frames = []
    for seq in range(n):
        ip = IP(src=cfg["src_ip"], dst=cfg["dst_ip"], tos=cfg.get("dscp", 0) << 2 | ECN[cfg["ecn"]], ttl=64)
        if roce:
            l4 = UDP(sport=sport, dport=ROCE_PORT) / BTH(opcode=4, dqpn=cfg["qpn"], psn=seq) / pad
        else:
            l4 = UDP(sport=sport, dport=UDP_PORT) / struct.pack("!I", seq) / pad
        frames.append(bytes(Ether(src=src_mac, dst=dst_mac) / ip / l4))
    return frames


def decode_frame(frame: bytes) -> dict[str, Any]:
    """The fields the capture checks, through scapy (for tests and debugging)."""
    from scapy.contrib.roce import BTH
    from scapy.layers.inet import IP, UDP
    from scapy.layers.l2 import Ether

    pkt = Ether(frame)
    out = {"ecn": pkt[IP].tos & 3, "dport": pkt[UDP].dport}
    if pkt.haslayer(BTH):
        out["psn"] = pkt[BTH].psn
    return out


def fast_fields(frame: bytes, dport: int) -> tuple[int, int] | None:
    """(sequence, ecn) of one of our frames (IPv4, no IP options), else None."""
    if len(frame) < 46 or frame[12:14] != b"\x08\x00" or frame[23] != 17:
        return None
    ihl = (frame[14] & 0x0F) * 4
    udp = 14 + ihl
    if struct.unpack_from("!H", frame, udp + 2)[0] != dport:
        return None
    if dport == ROCE_PORT:
        seq = int.from_bytes(frame[udp + 8 + 9 : udp + 8 + 12], "big")
    else:
        seq = struct.unpack_from("!I", frame, udp + 8)[0]
    return seq, frame[15] & 3


def send(cfg: dict[str, Any]) -> None:
    from scapy.config import conf
    from scapy.layers.l2 import getmacbyip

    iface, src_ip, gw = conf.route.route(cfg["dst_ip"])
    nexthop = gw if gw != "0.0.0.0" else cfg["dst_ip"]
    dst_mac = getmacbyip(nexthop)
    if dst_mac is None:
        raise RuntimeError(f"no ARP answer from next hop {nexthop} on {iface}")
    frames = build_frames({**cfg, "src_ip": src_ip}, conf.ifaces.dev_from_name(iface).mac, dst_mac)
    ready = Path(cfg["ready"])
    deadline = time.time() + 10
    while not ready.exists():
        if time.time() > deadline:
            raise TimeoutError("the capture never became ready")
        time.sleep(0.02)
    # One CPU for the whole train: veth queues each frame on the backlog of the CPU that sends it (netif_rx), so a
    # sender migrated mid-train can have its frames delivered out of order.
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    sock = conf.L2socket(iface=iface)
    out_sock = sock.outs
    b = cfg["burst"]
    ready_then_wait()
    with open(cfg["send_out"], "w") as out:
        for t in range(cfg["trains"]):
            ts = time.time()
            for f in frames[t * b : (t + 1) * b]:
                out_sock.send(f)
            out.write(json.dumps({"type": "train", "train": t, "t_start": ts, "t_end": time.time(), "sent": b}) + "\n")
            time.sleep(cfg["gap"])
    sock.close()
    Path(cfg["done"]).write_text("done\n")


def capture(cfg: dict[str, Any]) -> None:
    dport = ROCE_PORT if cfg["payload"] == "roce" else UDP_PORT
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_IP))
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    s.settimeout(0.2)
    Path(cfg["ready"]).write_text("ready\n")
    expected = cfg["trains"] * cfg["burst"]
    got, done_at = 0, None
    deadline = time.time() + cfg["timeout"]
    with open(cfg["capture_out"], "w") as out:
        while got < expected and time.time() < deadline:
            if done_at is None and Path(cfg["done"]).exists():
                done_at = time.time()
            if done_at is not None and time.time() - done_at > 1.0:
                break
            try:
                frame, addr = s.recvfrom(65535)
            except TimeoutError:
                continue
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            f = fast_fields(frame, dport)
            if f is not None:
                out.write(json.dumps({"type": "pkt", "t": time.time(), "seq": f[0], "ecn": f[1]}) + "\n")
                got += 1


class ScapyTrainGenerator(ProcGenerator):
    def __init__(self, spec: ScapyTrainJob, index: int):
        super().__init__(spec.name, spec.start_after)
        self.spec = spec
        self.index = index
        self.timeout = spec.trains * (spec.gap + 0.05) + 30

    def check(self, caps: Capabilities) -> None:
        try:
            import scapy.contrib.roce  # noqa: F401
        except ImportError as exc:
            raise GeneratorError(f"job {self.name}: scapy with contrib.roce is needed: {exc}") from None

    def start(self, ctx: RunContext) -> None:
        s, raw = self.spec, ctx.raw_dir
        src, dst = host(ctx, s.src, self.name), host(ctx, s.dst, self.name)
        cfg = {
            "job": s.name,
            "src": src.name,
            "dst": dst.name,
            "dst_ip": dst.ip,
            "trains": s.trains,
            "burst": s.burst,
            "size": s.size,
            "gap": s.gap,
            "payload": s.payload,
            "ecn": s.ecn,
            "dscp": s.dscp or 0,
            "qpn": 100 + self.index,
            "sport": ctx.ports.sport(src.name, s.name, "train"),  # placed: the same path in every variant
            "capture": s.capture,
            "timeout": self.timeout,
            "ready": str(raw / f"{s.name}.ready"),
            "done": str(raw / f"{s.name}.done"),
            "send_out": str(raw / f"{s.name}.send.jsonl"),
            "capture_out": str(raw / f"{s.name}.capture.jsonl"),
        }
        path = raw / f"{s.name}.config.json"
        path.write_text(json.dumps(cfg, indent=1))
        tool = [PYTHON, "-m", "traffic.scapy_train", str(path)]
        if s.capture:
            self._spawn(ctx, "capture", [*tool, "capture"], dst.netns)
        else:
            (raw / f"{s.name}.ready").write_text("ready\n")
        self._spawn(ctx, "send", [*tool, "send"], src.netns, gated=True)

    def parse(self, raw_dir: Path) -> Rows:
        return parse_trains(raw_dir, self.name)


def parse_trains(raw_dir: Path, job: str) -> Rows:
    """Pure: one trains.csv row per train: sent, received, CE-marked and out-of-order counts at the capture."""
    cfg = json.loads((raw_dir / f"{job}.config.json").read_text())
    b = cfg["burst"]
    pkts = read_jsonl(raw_dir / f"{job}.capture.jsonl") if cfg["capture"] else []
    per: dict[int, list[dict[str, Any]]] = {}
    for p in pkts:
        per.setdefault(p["seq"] // b, []).append(p)
    rows = []
    for tr in read_jsonl(raw_dir / f"{job}.send.jsonl"):
        got = per.get(tr["train"], [])
        seqs = [p["seq"] for p in got]
        rows.append(
            {
                "job": job,
                "train": tr["train"],
                "t_start": tr["t_start"],
                "t_end": tr["t_end"],
                "sent": tr["sent"],
                "received": len(got) if cfg["capture"] else None,
                "ce": sum(1 for p in got if p["ecn"] == 3),
                "ect": sum(1 for p in got if p["ecn"] in (1, 2)),
                "out_of_order": sum(1 for a, c in pairwise(seqs) if c < a),
            }
        )
    return {"trains": rows}


def check_capture(rows: list[dict[str, Any]], expect_ecn: str, allow_loss: bool = False) -> list[str]:
    """Problems of a captured train set (empty when fine): missing packets, reordering, and marks that contradict
    the sent codepoint (a not-ECT packet must never arrive CE; a CE-sent one must arrive CE)."""
    problems = []
    for r in rows:
        if not allow_loss and r["received"] != r["sent"]:
            problems.append(f"train {r['train']}: {r['received']} of {r['sent']} packets arrived")
        if r["out_of_order"]:
            problems.append(f"train {r['train']}: {r['out_of_order']} packets out of order")
        if expect_ecn == "not_ect" and (r["ce"] or r["ect"]):
            problems.append(f"train {r['train']}: a not-ECT packet arrived with an ECN codepoint")
        if expect_ecn == "ce" and r["ce"] != r["received"]:
            problems.append(f"train {r['train']}: CE packets lost their mark")
    return problems


def main(argv: list[str]) -> int:
    """``python3 -m traffic.scapy_train CONFIG.json send|capture``."""
    conf_path, role = argv[0], argv[1]
    with open(conf_path) as fh:
        config = json.load(fh)
    send(config) if role == "send" else capture(config)
    return 0


if __name__ == "__main__":
    child_main("traffic.scapy_train", lambda: main(sys.argv[1:]))
