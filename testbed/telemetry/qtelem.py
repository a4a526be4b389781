"""Queue telemetry in the kernel: load ``qtelem.bpf.o`` (testbed/bpf/src/qtelem.bpf.c), attach it, read its slots.

The program counts at the qdisc enqueue/dequeue tracepoints, per port and per time slot (100 us by default), and
closes each slot into the port's ring when that port's next event comes: an idle port costs nothing. The rings
and the per-port state are mmapable arrays, so a drain is one numpy copy per port, not a syscall per slot.

Loading and attaching go through libbpf over ctypes (testbed/bpf/libbpf.py). The links live as long as this
object's file descriptors: nothing is pinned, so a crashed reader detaches its programs as its process exits.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from testbed.bpf.libbpf import open_libbpf
from testbed.errors import TestbedError
from testbed.spec.link import ETH_HEADER
from testbed.telemetry.netns import netns_path, run_in_netns

OBJECT = Path(__file__).resolve().parents[2] / "build" / "bpf" / "qtelem.bpf.o"
# the same program reading the skb's shared info with a helper, for kernels before 6.2 (no bpf_rdonly_cast)
COMPAT_OBJECT = OBJECT.with_name("qtelem_compat.bpf.o")
PROGRAMS = ("qt_enqueue", "qt_dequeue")
STASH_PROGRAMS = ("qt_receive", "qt_dev_queue")  # ECN before the qdisc: only where a port marks with kernel RED
CFG_STASH = 1  # qt_cfg.flags
MAX_PORTS = 256  # the program's `ports` and `state` maps
FIFO_N = 4096  # enqueue times per port (the program's FIFO_N): more queued packets than this miss their sojourn
SOJ_BUCKETS = 16  # bucket b: sojourn < 2^b us (b = 0: under 1 us); the last is open
GAP_BUCKETS = 32  # 16 early then 16 late, log2 us of |gap - ideal|
MIN_SLOT_NS = 10_000
RING_MEMORY_CAP = 64 << 20  # bytes of ring over all ports
RING_MARGIN = 64  # slots below the head that the reader never trusts (the writer may be filling one)
DRAIN_S = 0.25  # a reader drains four times a second: a ring holds two drains (ring_slots_for)
# a port's netdev group is GROUP_BASE + its id: how the program finds the port (qtelem.bpf.c's port_cfg). One
# kernel telemetry per fabric at a time: a second would renumber the first's ports.
GROUP_BASE = 0x51E70000

SLOT_DTYPE = np.dtype(
    [
        ("slot", "<u8"),
        ("port", "<u4"),
        ("late", "<u4"),
        ("backlog_max", "<u4"),
        ("backlog_min", "<u4"),
        ("qlen_max", "<u4"),
        ("drops", "<u4"),
        ("enq_bytes", "<u8"),
        ("deq_bytes", "<u8"),
        ("enq_pkts", "<u4"),
        ("deq_pkts", "<u4"),
        ("marks", "<u4"),
        ("backlog_last", "<u4"),
        ("soj", "<u4", (SOJ_BUCKETS,)),
    ]
)
STATE_DTYPE = np.dtype(
    [
        ("cur", SLOT_DTYPE),
        ("head", "<u8"),
        ("drops_seen", "<u8"),
        ("last_deq_ns", "<u8"),
        ("last_deq_len", "<u8"),
        ("last_backlog", "<u4"),
        ("started", "<u4"),
        ("gap", "<u8", (GAP_BUCKETS,)),
        ("gap_n", "<u8"),
        ("gap_sum_abs_ns", "<u8"),
        ("soj_total", "<u8", (SOJ_BUCKETS,)),
        ("soj_max_ns", "<u8"),
        ("enq_seen", "<u8"),
        ("deq_seen", "<u8"),
        ("marks_seen", "<u8"),
        ("fifo_enq", "<u8"),
        ("last_deq_skb", "<u8"),
        ("soj_miss", "<u8"),
        ("last_enq_ts", "<u8"),
        ("gap_late", "<u8"),
        ("gso_skbs", "<u8"),
    ]
)
assert SLOT_DTYPE.itemsize == 128 and STATE_DTYPE.itemsize == 648  # qtelem.bpf.c's struct slot / port_state


SLOT_SOJ = 0x80000000  # slot.port: the slot counted a sojourn and its histogram line was written


def settle(slots: np.ndarray) -> np.ndarray:
    """Slots as the program meant them (in place): the port id without SLOT_SOJ, and a zero histogram where the
    program left the ring's histogram line unwritten (it then holds an older slot's counts)."""
    unwritten = (slots["port"] & SLOT_SOJ) == 0
    slots["soj"][unwritten] = 0
    slots["port"] &= ~np.uint32(SLOT_SOJ)
    return slots


class QtelemError(TestbedError, RuntimeError):
    """The kernel telemetry cannot run here (no object, no BTF tracepoints, a refused load) or was misconfigured."""


@dataclass(frozen=True)
class QtPort:
    """One egress port to count: its namespace, device, shaped rate, the node name the record uses, and whether
    kernel RED marks there (its marks are then told by the ECN field before the qdisc, which costs two more hooks
    on every packet; the eBPF marker flags its marks in the packet instead)."""

    netns: str
    dev: str
    rate_bps: float
    node: str
    kernel_red: bool = False
    mtu: int = 0  # with the rate, one frame time: the dequeue gaps late by that much are counted (0: not counted)

    @property
    def ns_per_byte_q16(self) -> int:
        """A byte's transmission time at the port's rate in ns x 2^16 (the program multiplies, never divides)."""
        return int(8e9 / self.rate_bps * 65536) if self.rate_bps > 0 else 0

    @property
    def late_ns(self) -> int:
        """One frame's transmission time at the port's rate (Ethernet header included), 0 without an MTU."""
        return int((self.mtu + ETH_HEADER) * 8 / self.rate_bps * 1e9) if self.mtu and self.rate_bps > 0 else 0


def ring_slots_for(slot_ns: int, drain_s: float) -> int:
    """Slots per port ring: two drains' worth of a port busy in every slot, as a power of two (at least 1024)."""
    need = max(1024, int(2 * drain_s * 1e9 / slot_ns))
    return 1 << (need - 1).bit_length()


def check_config(slot_ns: int, drain_s: float, ports: int) -> int:
    """The ring length for this slot, or QtelemError saying why the setting is refused (before anything is built)."""
    if slot_ns < MIN_SLOT_NS:
        raise QtelemError(f"telemetry slot {slot_ns / 1e3:g} us is under the {MIN_SLOT_NS / 1e3:g} us minimum")
    if not 0 < ports <= MAX_PORTS:
        raise QtelemError(f"{ports} ports: the kernel telemetry counts 1-{MAX_PORTS}")
    n = ring_slots_for(slot_ns, drain_s)
    need = n * ports * SLOT_DTYPE.itemsize
    if need > RING_MEMORY_CAP:
        raise QtelemError(
            f"telemetry slot {slot_ns / 1e3:g} us with {ports} ports needs {need >> 20} MiB of rings "
            f"({n} slots per port for {drain_s:g} s drains), over the {RING_MEMORY_CAP >> 20} MiB cap: "
            "use a longer slot"
        )
    return n


def _libbpf() -> ctypes.CDLL:
    try:
        return open_libbpf()
    except OSError as exc:
        raise QtelemError(f"libbpf.so.1 not found ({exc}): apt-get install libbpf1") from None


def _port_key(port: QtPort) -> tuple[int, int]:
    """(network namespace inode, ifindex) of the port's device: how the program tells the run's ports apart."""
    ino = os.stat(netns_path(port.netns)).st_ino
    try:
        ifindex = run_in_netns(port.netns, lambda: socket.if_nametoindex(port.dev))
    except OSError as exc:
        raise QtelemError(f"{port.node}:{port.dev}: no such device in {port.netns} ({exc})") from None
    return ino, int(ifindex)


def _set_group(port: QtPort, ifindex: int, group: int) -> None:
    """Give the port's device the netdev group that names its id to the program (IFLA_GROUP)."""
    from pyroute2 import IPRoute

    def put() -> None:
        with IPRoute() as ipr:
            ipr.link("set", index=ifindex, group=group)

    try:
        run_in_netns(port.netns, put)
    except Exception as exc:  # pyroute2's NetlinkError, or the namespace gone
        raise QtelemError(f"{port.node}:{port.dev}: cannot set its netdev group ({exc})") from None


def _find_map(lib: ctypes.CDLL, obj: int, name: str) -> int:
    m = lib.bpf_object__find_map_by_name(obj, name.encode())
    if not m:
        raise QtelemError(f"qtelem.bpf.o has no map {name!r}: rebuild it (python3 -m testbed.bpf.build)")
    return int(m)


def _open_loaded(obj: Path, ports: int, ring_slots: int, stash: bool) -> tuple[ctypes.CDLL, int]:
    """libbpf and the object, opened, sized for ``ports`` and loaded into the kernel (not attached); the stash
    programs load only with ``stash``. QtelemError says why not."""
    if not obj.exists():
        raise QtelemError(f"{obj} is missing: build it with `python3 -m testbed.bpf.build`")
    if not Path("/sys/kernel/btf/vmlinux").exists():
        raise QtelemError("no kernel BTF (/sys/kernel/btf/vmlinux): the tp_btf programs need it")
    lib = _libbpf()
    o = lib.bpf_object__open_file(os.fsencode(str(obj)), None)
    if not o:
        raise QtelemError(f"libbpf cannot open {obj}: {os.strerror(ctypes.get_errno())}")
    try:
        if lib.bpf_map__set_max_entries(_find_map(lib, o, "ring"), ports * ring_slots) != 0:
            raise QtelemError("libbpf refused the ring size")
        if lib.bpf_map__set_max_entries(_find_map(lib, o, "fifo"), ports * FIFO_N) != 0:
            raise QtelemError("libbpf refused the enqueue-time ring size")
        for name in STASH_PROGRAMS if not stash else ():
            prog = lib.bpf_object__find_program_by_name(o, name.encode())
            if prog:
                lib.bpf_program__set_autoload(prog, False)
        if lib.bpf_object__load(o) != 0:
            err = ctypes.get_errno()
            raise QtelemError(
                f"the kernel refused qtelem.bpf.o ({os.strerror(err)}): it needs BTF, tp_btf programs and the "
                "qdisc_enqueue, qdisc_dequeue, net_dev_queue and netif_receive_skb tracepoints"
            )
    except BaseException:
        lib.bpf_object__close(o)
        raise
    return lib, int(o)


def _load_any(obj: Path | None, ports: int, ring_slots: int, stash: bool) -> tuple[ctypes.CDLL, int, Path]:
    """``obj`` loaded, or without one the fast object, else (a kernel before 6.2) the compat one; which, too."""
    if obj is not None:
        return (*_open_loaded(obj, ports, ring_slots, stash), obj)
    try:
        return (*_open_loaded(OBJECT, ports, ring_slots, stash), OBJECT)
    except QtelemError as first:
        try:
            return (*_open_loaded(COMPAT_OBJECT, ports, ring_slots, stash), COMPAT_OBJECT)
        except QtelemError:
            raise first from None


class QueueTelemetry:
    """The loaded program and its maps; ``drain()`` returns the slots closed since the last call, ``drain_to(fh)``
    writes them to a file."""

    def __init__(
        self, ports: Sequence[QtPort], slot_ns: int = 100_000, drain_s: float = DRAIN_S, obj: Path | None = None
    ):
        self.ports = list(ports)
        self.slot_ns = slot_ns
        self.ring_slots = check_config(slot_ns, drain_s, len(self.ports))
        self._links: list[int] = []
        self._maps: list[mmap.mmap] = []
        stash = any(p.kernel_red for p in self.ports)
        self._lib, loaded, self.object = _load_any(obj, len(self.ports), self.ring_slots, stash)
        self._obj: int | None = loaded
        try:
            self._attach(loaded, stash)
        except BaseException:
            self.close()
            raise
        self._tail = np.zeros(len(self.ports), dtype=np.uint64)
        self.lost_slots = 0

    def _attach(self, obj: int, stash: bool) -> None:
        lib = self._lib
        fd = {n: lib.bpf_map__fd(_find_map(lib, obj, n)) for n in ("cfg", "ports", "state", "ring")}
        # struct qt_cfg: slot_ns, then ring_slots, flags, group_base and a pad (pairs of u32 in little-endian u64s)
        cfg = (ctypes.c_uint64 * 3)(self.slot_ns, self.ring_slots | (CFG_STASH if stash else 0) << 32, GROUP_BASE)
        self._update(fd["cfg"], ctypes.c_uint32(0), cfg)
        for i, port in enumerate(self.ports):
            ino, ifindex = _port_key(port)
            # struct port_cfg: netns and ifindex (one u64), ns_per_byte_q16, late_ns
            value = (ctypes.c_uint64 * 3)(ino | ifindex << 32, port.ns_per_byte_q16, port.late_ns)
            self._update(fd["ports"], ctypes.c_uint32(i), value)
            _set_group(port, ifindex, GROUP_BASE + i)
        self._state = self._mmap(fd["state"], MAX_PORTS * STATE_DTYPE.itemsize)
        self._ring = self._mmap(fd["ring"], len(self.ports) * self.ring_slots * SLOT_DTYPE.itemsize)
        self.state = np.frombuffer(self._state, dtype=STATE_DTYPE, count=MAX_PORTS)
        self.ring = np.frombuffer(self._ring, dtype=SLOT_DTYPE, count=len(self.ports) * self.ring_slots).reshape(
            len(self.ports), self.ring_slots
        )
        for name in PROGRAMS + (STASH_PROGRAMS if stash else ()):
            prog = lib.bpf_object__find_program_by_name(obj, name.encode())
            link = lib.bpf_program__attach(prog) if prog else None
            if not link or lib.libbpf_get_error(link):
                raise QtelemError(f"cannot attach {name}: {os.strerror(ctypes.get_errno())}")
            self._links.append(int(link))

    def _update(self, fd: int, key: Any, value: Any) -> None:
        if self._lib.bpf_map_update_elem(fd, ctypes.byref(key), ctypes.byref(value), 0) != 0:
            raise QtelemError(f"bpf map update failed: {os.strerror(ctypes.get_errno())}")

    def _mmap(self, fd: int, size: int) -> mmap.mmap:
        page = mmap.PAGESIZE
        m = mmap.mmap(fd, (size + page - 1) // page * page, mmap.MAP_SHARED, mmap.PROT_READ)
        self._maps.append(m)
        return m

    def _spans(self) -> list[tuple[int, int]]:
        """Byte ranges of the ring holding the slots closed since the last call, in port then time order (at most
        two per port: a ring wraps); advances the tails and counts slots overwritten before they were read."""
        spans = []
        n, size = self.ring_slots, SLOT_DTYPE.itemsize
        heads = self.state["head"][: len(self.ports)].copy()
        for i in range(len(self.ports)):
            head, tail = int(heads[i]), int(self._tail[i])
            if head - tail > n - RING_MARGIN:
                self.lost_slots += head - tail - (n - RING_MARGIN)
                tail = head - (n - RING_MARGIN)
            if head == tail:
                continue
            a, b, base = tail % n, head % n, i * n * size
            spans += [(base + a * size, base + b * size)] if a < b else [(base + a * size, base + n * size)]
            if b <= a and b:
                spans.append((base, base + b * size))
            self._tail[i] = head
        return spans

    def drain(self) -> np.ndarray:
        """Slots closed since the last drain, all ports, in port then time order (a copy)."""
        buf = memoryview(self._ring)
        raw = b"".join(buf[a:b] for a, b in self._spans())
        return settle(np.frombuffer(raw, dtype=SLOT_DTYPE).copy())

    def drain_to(self, fh: Any) -> int:
        """Write the slots closed since the last drain to the binary file ``fh`` straight from the ring (one copy,
        the kernel's: four numpy copies of 800 KB per drain cost the reader 1.5 % of a core), to be read back
        through ``settle``; returns the count."""
        buf, n = memoryview(self._ring), 0
        for a, b in self._spans():
            view = buf[a:b]
            while view:  # an unbuffered write may take part of it
                view = view[fh.write(view) :]
            n += b - a
        return n // SLOT_DTYPE.itemsize

    def open_slots(self) -> np.ndarray:
        """The slot each port still has open (exact once the programs are detached, see ``detach``)."""
        st = self.state[: len(self.ports)]
        return settle(st["cur"][st["started"] == 1].copy())

    def totals(self) -> np.ndarray:
        """Per-port totals: the sojourn and dequeue-gap histograms, packets and marks seen (a copy)."""
        return self.state[: len(self.ports)].copy()

    def detach(self) -> None:
        """Stop counting: no event writes the maps after this, so ``open_slots`` and ``totals`` are final."""
        for link in self._links:
            self._lib.bpf_link__destroy(link)
        self._links = []

    def close(self) -> None:
        self.detach()
        for m in self._maps:
            try:
                m.close()
            except BufferError:  # a numpy view still refers to it; the mapping goes with the process
                pass
        self._maps = []
        if self._obj:
            self._lib.bpf_object__close(self._obj)
            self._obj = None

    def __enter__(self) -> QueueTelemetry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def availability(obj: Path | None = None) -> str | None:
    """None when the kernel telemetry can run here (the object loads, its stash programs too: BTF, tp_btf and the
    tracepoints are there), else why not: for doctor. Nothing is attached, so nothing is counted."""
    try:
        lib, o, _ = _load_any(obj, 1, 1024, stash=True)
    except QtelemError as exc:
        return str(exc)
    lib.bpf_object__close(o)
    return None


def soj_edges_us() -> list[float | None]:
    """Upper edge of each sojourn bucket in microseconds (None: the last is open)."""
    return [float(1 << b) for b in range(SOJ_BUCKETS - 1)] + [None]
