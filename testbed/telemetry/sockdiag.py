"""TCP sockets' TCP_INFO in a network namespace, through NETLINK_SOCK_DIAG (what ``ss -ti`` reads).

A ``SockDiag`` made inside a namespace (``run_in_netns(ns, SockDiag.create)``) answers for that namespace from any
thread. ``dump(dports)`` finds the established TCP sockets connected to one of ``dports``; ``lookup(sock)`` reads
one of them again by its addresses and ports. A dump walks the kernel's whole established-socket table, which every
namespace shares (a quarter-million buckets, milliseconds per dump even with few sockets), while a lookup
hashes straight to the socket; so a poller dumps only to find new sockets and looks the known ones up. pyroute2's
``DiagSocket`` is not used: it only dumps (NLM_F_DUMP), and the lookup it lacks is what keeps polling cheap.
"""

from __future__ import annotations

import errno
import socket
import struct
from dataclasses import dataclass

from testbed.telemetry.rtnl import NLM_F_DUMP, NLM_F_REQUEST, NLMSG_DONE, NLMSG_ERROR, NetlinkError, _attrs
from testbed.telemetry.tcpinfo import TcpInfo, parse_tcp_info

NETLINK_SOCK_DIAG = 4
SOCK_DIAG_BY_FAMILY = 20
INET_DIAG_INFO = 2
TCPF_ESTABLISHED = 1 << 1
INET_DIAG_NOCOOKIE = 0xFFFFFFFF

_NLMSGHDR = struct.Struct("=IHHII")
_REQ = struct.Struct("=BBBBI")  # inet_diag_req_v2 head: family, protocol, ext, pad, states; then inet_diag_sockid
_SOCKID = struct.Struct(">HH16s16s")  # inet_diag_sockid head: sport, dport (network order), src, dst; then if, cookie
_SOCKID_TAIL = struct.Struct("=III")  # idiag_if, idiag_cookie[2]
_MSG_HEAD = 4  # inet_diag_msg: family, state, timer, retrans; then the sockid at offset 4
_MSG_LEN = 72  # sizeof(struct inet_diag_msg)
_ERR = struct.Struct("=i")


@dataclass(frozen=True, slots=True)
class SockId:
    """A socket's inet_diag_sockid as the kernel gave it (its bytes are what ``lookup`` sends back)."""

    family: int
    sport: int
    dport: int
    raw: bytes  # the 48-byte inet_diag_sockid


def _request(family: int, flags: int, sockid: bytes, seq: int) -> bytes:
    body = _REQ.pack(family, socket.IPPROTO_TCP, 1 << (INET_DIAG_INFO - 1), 0, TCPF_ESTABLISHED) + sockid
    return _NLMSGHDR.pack(_NLMSGHDR.size + len(body), SOCK_DIAG_BY_FAMILY, flags, seq, 0) + body


def _any_sockid() -> bytes:
    return _SOCKID.pack(0, 0, bytes(16), bytes(16)) + _SOCKID_TAIL.pack(0, INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE)


def parse_diag(buf: bytes | memoryview) -> tuple[list[tuple[SockId, TcpInfo]], bool, int]:
    """Pure: the (socket, TCP_INFO) pairs of a reply buffer, whether it ended (NLMSG_DONE or a lookup's one
    answer), and the errno of an NLMSG_ERROR reply (0 if none). Sockets without TCP_INFO are left out."""
    out: list[tuple[SockId, TcpInfo]] = []
    pos, n = 0, len(buf)
    while pos + _NLMSGHDR.size <= n:
        length, mtype, _flags, _seq, _pid = _NLMSGHDR.unpack_from(buf, pos)
        if length < _NLMSGHDR.size or pos + length > n:
            raise NetlinkError(f"malformed sock_diag message (length {length} at {pos} of {n})")
        body, end = pos + _NLMSGHDR.size, pos + length
        if mtype == NLMSG_DONE:
            return out, True, 0
        if mtype == NLMSG_ERROR:
            (err,) = _ERR.unpack_from(buf, body)
            return out, True, -err
        if mtype == SOCK_DIAG_BY_FAMILY and length >= _NLMSGHDR.size + _MSG_LEN:
            family = buf[body]
            sport, dport, _src, _dst = _SOCKID.unpack_from(buf, body + _MSG_HEAD)
            raw = bytes(buf[body + _MSG_HEAD : body + _MSG_HEAD + 48])
            info = _attrs(buf, body + _MSG_LEN, end).get(INET_DIAG_INFO)
            if info is not None:
                start, stop = info
                out.append((SockId(family, sport, dport, raw), parse_tcp_info(bytes(buf[start:stop]))))
        pos += (length + 3) & ~3
    return out, False, 0


class SockDiag:
    """A NETLINK_SOCK_DIAG socket bound to the namespace it was created in."""

    def __init__(self, sock: socket.socket, bufsize: int = 1 << 16):
        self.sock = sock
        self.seq = 0
        self._buf = bytearray(bufsize)
        sock.bind((0, 0))

    @classmethod
    def create(cls) -> SockDiag:
        return cls(socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_SOCK_DIAG))

    def _ask(self, req: bytes, one: bool) -> list[tuple[SockId, TcpInfo]]:
        self.sock.send(req)
        out: list[tuple[SockId, TcpInfo]] = []
        while True:
            n = self.sock.recv_into(self._buf)
            got, ended, err = parse_diag(memoryview(self._buf)[:n])
            out += got
            if err and not (one and err == errno.ENOENT):
                raise NetlinkError(f"sock_diag: {errno.errorcode.get(err, err)}")
            if ended or one:
                return out

    def dump(self, dports: set[int]) -> list[tuple[SockId, TcpInfo]]:
        """The established IPv4 and IPv6 TCP sockets whose peer port is in ``dports``."""
        out = []
        for family in (socket.AF_INET, socket.AF_INET6):
            self.seq += 1
            req = _request(family, NLM_F_REQUEST | NLM_F_DUMP, _any_sockid(), self.seq)
            out += [(s, i) for s, i in self._ask(req, one=False) if s.dport in dports]
        return out

    def lookup(self, sid: SockId) -> TcpInfo | None:
        """The socket's TCP_INFO now, or None once it is gone (closed, or no longer established)."""
        self.seq += 1
        got = self._ask(_request(sid.family, NLM_F_REQUEST, sid.raw, self.seq), one=True)
        return got[0][1] if got else None

    def close(self) -> None:
        self.sock.close()
