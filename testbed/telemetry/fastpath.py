"""The sampler's hot path: read a qdisc dump through the layout of the previous one.

Between two polls of the same namespace the dump normally has the same shape: the same qdiscs in the same order,
every attribute the same size (counters are fixed-width). ``QdiscReader`` therefore remembers, per wanted qdisc,
the byte offsets of its TCA_STATS_BASIC / TCA_STATS_QUEUE (and RED xstats) attributes, and on the next dump of
the same length reads them directly, checking the tcmsg key and each attribute header at those offsets. Any
mismatch (a qdisc added or replaced, a length change) falls back to the full parse, which records a new layout.
Measured on a 4-port namespace dump (2 kB): the full parser ~29 us, this path a few us (see tests).
"""

from __future__ import annotations

import struct

from testbed.telemetry.rtnl import (
    RTM_NEWQDISC,
    TCA_KIND,
    TCA_STATS2,
    TCA_STATS_APP,
    TCA_STATS_BASIC,
    TCA_STATS_PKT64,
    TCA_STATS_QUEUE,
    TCA_XSTATS,
    NetlinkError,
    _attrs,
    iter_messages,
)

Key = tuple[int, int]
# (bytes, packets, qlen, backlog, drops, requeues, overlimits, marks or None)
Counters = tuple[int, int, int, int, int, int, int, int | None]

_KEY = struct.Struct("=4xiI")
_BASIC_A = struct.Struct("=HHQI")  # rtattr header + gnet_stats_basic
_QUEUE_A = struct.Struct("=HHIIIII")  # rtattr header + gnet_stats_queue
_U64_A = struct.Struct("=HHQ")
_RED_A = struct.Struct("=HH12xI")  # rtattr header + tc_red_xstats (early, pdrop, other skipped; marked)


def _offsets(buf: bytes | memoryview, body: int, end: int) -> tuple[int, int, int, int]:
    """Offsets of the BASIC, QUEUE, PKT64 (-1 if absent) and RED-xstats (-1) attribute headers of one qdisc."""
    attrs = _attrs(buf, body + 20, end)
    k = attrs.get(TCA_KIND)
    kind = bytes(buf[k[0] : k[1]]).rstrip(b"\0").decode() if k else ""
    s2 = attrs.get(TCA_STATS2)
    if s2 is None:
        raise NetlinkError("qdisc without TCA_STATS2")
    st = _attrs(buf, s2[0], s2[1])
    if TCA_STATS_BASIC not in st or TCA_STATS_QUEUE not in st:
        raise NetlinkError("qdisc TCA_STATS2 without BASIC or QUEUE")
    p64 = st[TCA_STATS_PKT64][0] - 4 if TCA_STATS_PKT64 in st else -1
    red = -1
    if kind == "red":
        app = st.get(TCA_STATS_APP) or attrs.get(TCA_XSTATS)
        if app is not None and app[1] - app[0] >= 16:
            red = app[0] - 4
    return st[TCA_STATS_BASIC][0] - 4, st[TCA_STATS_QUEUE][0] - 4, p64, red


def _read(buf: bytes | memoryview, b: int, q: int, p64: int, red: int) -> Counters | None:
    """Counters at the given attribute offsets, or None if a header there does not match."""
    _bl, bt, nbytes, npkts = _BASIC_A.unpack_from(buf, b)
    _ql, qt, qlen, backlog, drops, requeues, overlimits = _QUEUE_A.unpack_from(buf, q)
    if bt & 0x3FFF != TCA_STATS_BASIC or qt & 0x3FFF != TCA_STATS_QUEUE:
        return None
    if p64 >= 0:
        _pl, pt, npkts = _U64_A.unpack_from(buf, p64)
        if pt & 0x3FFF != TCA_STATS_PKT64:
            return None
    marks = None
    if red >= 0:
        _rl, _rt, marks = _RED_A.unpack_from(buf, red)
    return nbytes, npkts, qlen, backlog, drops, requeues, overlimits, marks


class QdiscReader:
    """Counters of the ``wanted`` (ifindex, handle) qdiscs from successive dumps of one namespace."""

    def __init__(self, wanted: set[Key]):
        self.wanted = set(wanted)
        self._len = -1
        self._layout: list[tuple[int, Key, int, int, int, int]] = []
        self.fast = self.slow = 0

    def read(self, buf: bytes | memoryview) -> dict[Key, Counters]:
        if len(buf) == self._len:
            out: dict[Key, Counters] = {}
            for moff, key, b, q, p64, red in self._layout:
                if _KEY.unpack_from(buf, moff) != key:
                    break
                c = _read(buf, b, q, p64, red)
                if c is None:
                    break
                out[key] = c
            else:
                self.fast += 1
                return out
        return self._full(buf)

    def _full(self, buf: bytes | memoryview) -> dict[Key, Counters]:
        self.slow += 1
        out: dict[Key, Counters] = {}
        layout = []
        for mtype, body, end in iter_messages(buf):
            if mtype != RTM_NEWQDISC:
                continue
            key = _KEY.unpack_from(buf, body)
            if key not in self.wanted:
                continue
            offs = _offsets(buf, body, end)
            c = _read(buf, *offs)
            if c is None:
                raise NetlinkError(f"malformed qdisc stats for ifindex/handle {key}")
            out[key] = c
            layout.append((body, key, *offs))
        self._len, self._layout = len(buf), layout
        return out
