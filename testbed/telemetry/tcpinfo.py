"""TCP_INFO of a socket the generator owns: cwnd, RTT, retransmissions, CE-marked deliveries.

Cheaper than forking ``ss -tin`` per sample. Layout from linux/tcp.h ``struct tcp_info``
(byte offsets on every Linux ABI, the struct has no holes); the fields used:

    off  type  field                 unit / meaning
      0  u8    tcpi_state            TCP_ESTABLISHED = 1
      1  u8    tcpi_ca_state         0 open, 1 disorder, 2 cwr, 3 recovery, 4 loss
      2  u8    tcpi_retransmits      retransmission timeouts since the last forward progress (icsk_retransmits)
      3  u8    tcpi_probes           zero-window or keepalive probes sent unanswered
      4  u8    tcpi_backoff          exponential backoff of the retransmission or probe timer (a shift)
      7  u8    (bit 0) tcpi_delivery_rate_app_limited: the latest delivery-rate sample was application-limited
      8  u32   tcpi_rto              retransmission timeout, microseconds (doubled by each timeout)
     12  u32   tcpi_ato              delayed-ACK timeout, microseconds
     16  u32   tcpi_snd_mss          bytes
     20  u32   tcpi_rcv_mss          bytes
     24  u32   tcpi_unacked          segments in flight (not yet acknowledged)
     28  u32   tcpi_sacked           segments selectively acknowledged
     32  u32   tcpi_lost             segments currently considered lost
     36  u32   tcpi_retrans          segments currently retransmitted (in flight)
     44  u32   tcpi_last_data_sent   milliseconds since data was last sent
     52  u32   tcpi_last_data_recv   milliseconds since data was last received
     56  u32   tcpi_last_ack_recv    milliseconds since an ACK was last received
     68  u32   tcpi_rtt              smoothed RTT, microseconds
     72  u32   tcpi_rttvar           microseconds
     76  u32   tcpi_snd_ssthresh     segments
     80  u32   tcpi_snd_cwnd         segments
     96  u32   tcpi_rcv_space        bytes the receiver expects per RTT (its buffer auto-tuning)
    100  u32   tcpi_total_retrans    segments retransmitted over the connection's life
    120  u64   tcpi_bytes_acked      bytes
    128  u64   tcpi_bytes_received   bytes
    144  u32   tcpi_notsent_bytes    bytes written by the application and not yet sent
    148  u32   tcpi_min_rtt          microseconds
    160  u64   tcpi_delivery_rate    bytes/s
    168  u64   tcpi_busy_time        microseconds with data in flight (kernel >= 4.10, as the next two)
    176  u64   tcpi_rwnd_limited     of those, limited by the receiver's window
    184  u64   tcpi_sndbuf_limited   of those, limited by the send buffer
    192  u32   tcpi_delivered        segments delivered (kernel >= 4.18)
    196  u32   tcpi_delivered_ce     of those, CE-marked per the receiver's ECE (kernel >= 4.18)
    200  u64   tcpi_bytes_sent       bytes incl. retransmissions (kernel >= 4.19)
    208  u64   tcpi_bytes_retrans    bytes (kernel >= 4.19)
    224  u32   tcpi_rcv_ooopack      packets received out of order (kernel >= 5.4)
    228  u32   tcpi_snd_wnd          the peer's advertised receive window, bytes (kernel >= 5.4)
    232  u32   tcpi_rcv_wnd          the window this end advertises, bytes (kernel >= 6.2)
    240  u16   tcpi_total_rto        retransmission timeouts over the connection's life (kernel >= 6.7)
    242  u16   tcpi_total_rto_recoveries  recoveries from a timeout (kernel >= 6.7)
    244  u32   tcpi_total_rto_time   milliseconds spent recovering from timeouts (kernel >= 6.7)

A shorter struct from an older kernel leaves the later fields None.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass

TCP_INFO_LEN = 256  # past the last field read (248); the kernel copies min(len, sizeof(tcp_info))
_FIELDS: tuple[tuple[str, int, str], ...] = (
    ("state", 0, "B"),
    ("ca_state", 1, "B"),
    ("retransmits", 2, "B"),
    ("probes", 3, "B"),
    ("backoff", 4, "B"),
    ("flags", 7, "B"),
    ("rto_us", 8, "I"),
    ("ato_us", 12, "I"),
    ("snd_mss", 16, "I"),
    ("rcv_mss", 20, "I"),
    ("unacked", 24, "I"),
    ("sacked", 28, "I"),
    ("lost", 32, "I"),
    ("retrans", 36, "I"),
    ("last_data_sent_ms", 44, "I"),
    ("last_data_recv_ms", 52, "I"),
    ("last_ack_recv_ms", 56, "I"),
    ("rtt_us", 68, "I"),
    ("rttvar_us", 72, "I"),
    ("snd_ssthresh", 76, "I"),
    ("snd_cwnd", 80, "I"),
    ("rcv_space", 96, "I"),
    ("total_retrans", 100, "I"),
    ("bytes_acked", 120, "Q"),
    ("bytes_received", 128, "Q"),
    ("notsent_bytes", 144, "I"),
    ("min_rtt_us", 148, "I"),
    ("delivery_rate", 160, "Q"),
    ("busy_time_us", 168, "Q"),
    ("rwnd_limited_us", 176, "Q"),
    ("sndbuf_limited_us", 184, "Q"),
    ("delivered", 192, "I"),
    ("delivered_ce", 196, "I"),
    ("bytes_sent", 200, "Q"),
    ("bytes_retrans", 208, "Q"),
    ("rcv_ooopack", 224, "I"),
    ("snd_wnd", 228, "I"),
    ("rcv_wnd", 232, "I"),
    ("total_rto", 240, "H"),
    ("total_rto_recoveries", 242, "H"),
    ("total_rto_time_ms", 244, "I"),
)
OFFSETS: dict[str, tuple[int, str]] = {name: (off, fmt) for name, off, fmt in _FIELDS}


@dataclass(frozen=True)
class TcpInfo:
    state: int
    ca_state: int
    retransmits: int
    probes: int
    backoff: int
    flags: int
    rto_us: int
    ato_us: int
    snd_mss: int
    rcv_mss: int
    unacked: int
    sacked: int
    lost: int
    retrans: int
    last_data_sent_ms: int
    last_data_recv_ms: int
    last_ack_recv_ms: int
    rtt_us: int
    rttvar_us: int
    snd_ssthresh: int
    snd_cwnd: int
    rcv_space: int
    total_retrans: int
    bytes_acked: int | None
    bytes_received: int | None
    notsent_bytes: int | None
    min_rtt_us: int | None
    delivery_rate: int | None
    busy_time_us: int | None
    rwnd_limited_us: int | None
    sndbuf_limited_us: int | None
    delivered: int | None
    delivered_ce: int | None
    bytes_sent: int | None
    bytes_retrans: int | None
    rcv_ooopack: int | None
    snd_wnd: int | None
    rcv_wnd: int | None
    total_rto: int | None
    total_rto_recoveries: int | None
    total_rto_time_ms: int | None

    @property
    def app_limited(self) -> bool:
        """The kernel judged the latest delivery-rate sample application-limited (tcp_rate_check_app_limited:
        nothing unsent, nothing queued below TCP, and room in cwnd): the sender had nothing to send."""
        return bool(self.flags & 1)


def parse_tcp_info(raw: bytes) -> TcpInfo:
    """Bytes returned by getsockopt(TCP_INFO) -> TcpInfo (fields past the end of ``raw`` are None)."""
    if len(raw) < 104:
        raise ValueError(f"TCP_INFO too short ({len(raw)} bytes, need 104)")
    vals: dict[str, int | None] = {}
    for name, off, fmt in _FIELDS:
        size = struct.calcsize(fmt)
        vals[name] = struct.unpack_from("=" + fmt, raw, off)[0] if off + size <= len(raw) else None
    return TcpInfo(**vals)  # type: ignore[arg-type]


def read_tcp_info_raw(sock: socket.socket) -> bytes:
    """The kernel's TCP_INFO bytes of a connected TCP socket, for a caller that reads one field (``field``)."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)


def field(raw: bytes, name: str) -> int | None:
    """One field of TCP_INFO bytes by its TcpInfo name, without parsing the rest; None past the struct's end."""
    off, fmt = OFFSETS[name]
    return struct.unpack_from("=" + fmt, raw, off)[0] if off + struct.calcsize(fmt) <= len(raw) else None


def read_tcp_info(sock: socket.socket | int) -> TcpInfo:
    """TCP_INFO of a connected TCP socket (a socket object or its fd)."""
    if isinstance(sock, int):
        s = socket.socket(fileno=sock)
        try:
            raw = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)
        finally:
            s.detach()
    else:
        raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, TCP_INFO_LEN)
    return parse_tcp_info(raw)


def flow_sample(job: str, flow_id: str, t: float, sock: socket.socket | int) -> dict[str, object]:
    """A flow_samples.csv row (job, flow_id, t, bytes, cwnd, rtt_us, retrans) from the socket's TCP_INFO."""
    ti = read_tcp_info(sock)
    return {
        "job": job,
        "flow_id": flow_id,
        "t": t,
        "bytes": ti.bytes_acked,
        "cwnd": ti.snd_cwnd,
        "rtt_us": ti.rtt_us,
        "retrans": ti.total_retrans,
    }
