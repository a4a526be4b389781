"""The RTT probe sends every slot on schedule whatever the answers do (traffic.rtt_probe), matches answers by seq,
counts the unanswered as lost after its drain, and rtt.csv has one row per slot (traffic.probes.probe_rows).

The schedule runs on a fake clock and a fake path whose answers take a known time, so every send time and round
trip is known exactly; the loopback tests run the real prober against echo servers of known delay."""

from __future__ import annotations

import heapq
import io
import itertools
import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from testbed.host.capabilities import Capabilities
from testbed.host.procs import ProcessGroup
from testbed.spec.fields import SpecError
from testbed.spec.topology import HostInfo
from testbed.spec.workload import RttProbeJob, parse_job, parse_workload
from traffic.base import GeneratorError, RunContext
from traffic.gate import GO_ENV
from traffic.placement import SourcePorts
from traffic.probes import parse_rtt, probe_rows
from traffic.rtt_probe import DRAIN_MAX_S, DRAIN_MIN_S, PROBE, Schedule, drain_s, probe, run
from traffic.workload import run_workload

INTERVAL = 0.01


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class FakePath:
    """Answers take ``rtt(seq)`` s on the path (None: never answered) plus ``hold(seq)`` s in the echo, which they
    carry, and are stamped with their arrival, as the kernel does; a send takes ``stall(seq)`` s of the prober's
    time (a prober without CPU)."""

    def __init__(
        self,
        clock: FakeClock,
        rtt: Callable[[int], float | None],
        stall: Callable[[int], float] = lambda k: 0.0,
        hold: Callable[[int], float] = lambda k: 0.0,
    ) -> None:
        self.clock, self.rtt, self.stall, self.hold = clock, rtt, stall, hold
        self.arrivals: list[tuple[float, int]] = []
        self.max_outstanding = 0

    def send(self, seq: int) -> float:
        t = self.clock.now
        rtt = self.rtt(seq)
        if rtt is not None:
            heapq.heappush(self.arrivals, (t + rtt + self.hold(seq), seq))
        self.max_outstanding = max(self.max_outstanding, len(self.arrivals))
        self.clock.now += self.stall(seq)
        return t

    def receive(self, timeout: float) -> list[tuple[int, float, float]]:
        horizon = self.clock.now + timeout
        if not self.arrivals or self.arrivals[0][0] > horizon:
            self.clock.now = horizon
            return []
        self.clock.now = max(self.clock.now, self.arrivals[0][0])
        got = []
        while self.arrivals and self.arrivals[0][0] <= self.clock.now:
            t, seq = heapq.heappop(self.arrivals)
            got.append((seq, t, self.hold(seq)))
        return got


def schedule(
    rtt: Callable[[int], float | None],
    slots: int = 30,
    stall: Callable[[int], float] = lambda k: 0.0,
    hold: Callable[[int], float] = lambda k: 0.0,
) -> tuple[Schedule, list[dict[str, Any]], int, FakePath]:
    clock = FakeClock()
    path = FakePath(clock, rtt, stall, hold)
    sched = Schedule(clock.now, INTERVAL, slots)
    records: list[dict[str, Any]] = []
    lost = run(path, clock, sched, records.append)
    return sched, records, lost, path


def kinds(records: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] == kind]


def test_every_slot_goes_out_on_time_while_answers_come_late() -> None:
    sched, records, lost, path = schedule(lambda k: 0.035)  # 3.5 slots per round trip
    sends = kinds(records, "send")
    assert [r["seq"] for r in sends] == list(range(30))
    assert all(r["t_send"] == r["t_sched"] == sched.slot(r["seq"]) for r in sends)
    assert path.max_outstanding == 4  # slots k-3 .. k are in flight when slot k goes out
    rows = probe_rows(records)
    assert [r["seq"] for r in rows] == list(range(30)) and lost == 0
    assert all(r["rtt_s"] == pytest.approx(0.035, abs=1e-9) and r["send_late_s"] == 0 for r in rows)
    end = kinds(records, "end")[0]
    assert end["t_end"] == pytest.approx(sched.slot(29) + 0.035)  # it ends with the last answer, not the drain


def test_answers_out_of_order_count_for_their_own_request() -> None:
    rtt = {k: 0.05 if k % 2 == 0 else 0.005 for k in range(30)}
    _, records, lost, _ = schedule(rtt.get)
    answers = [r["seq"] for r in kinds(records, "answer")]
    assert answers[:4] == [1, 3, 0, 5]  # slot 0's answer comes after those of slots 1 and 3
    rows = probe_rows(records)
    assert lost == 0 and [r["rtt_s"] for r in rows] == pytest.approx([rtt[k] for k in range(30)], abs=1e-9)


def test_unanswered_requests_are_lost_after_the_drain() -> None:
    sched, records, lost, _ = schedule(lambda k: None if k in (3, 29) else 0.02)
    rows = probe_rows(records)
    assert lost == 2 and len(rows) == 30
    assert [r["seq"] for r in rows if r["rtt_s"] is None] == [3, 29]
    # slot 3 has waited 0.26 s by the last send: 3 x 0.26 s is less than the floor of 1 s
    end = kinds(records, "end")[0]
    assert end["drain_s"] == DRAIN_MIN_S and end["outstanding"] == 2
    assert end["t_end"] == pytest.approx(sched.slot(29) + DRAIN_MIN_S)


def test_the_drain_grows_with_the_longest_round_trip() -> None:
    sched, records, lost, _ = schedule(lambda k: 0.5 if k == 0 else (None if k == 59 else 0.01), slots=60)
    end = kinds(records, "end")[0]
    assert lost == 1 and end["drain_s"] == pytest.approx(1.5)  # 3 x slot 0's 0.5 s, answered before the last send
    assert end["t_end"] == pytest.approx(sched.slot(59) + 1.5)
    assert drain_s(0.0) == DRAIN_MIN_S and drain_s(0.5) == pytest.approx(1.5) and drain_s(60.0) == DRAIN_MAX_S


def test_a_dead_path_loses_every_slot_but_sends_them_all() -> None:
    _, records, lost, _ = schedule(lambda k: None)
    rows = probe_rows(records)
    assert lost == 30 and [r["seq"] for r in rows] == list(range(30)) and all(r["rtt_s"] is None for r in rows)


def test_a_stalled_prober_sends_every_slot_late_but_never_in_a_burst() -> None:
    _, records, lost, _ = schedule(lambda k: 0.02, stall=lambda k: 0.045 if k == 5 else 0.0)
    sends = kinds(records, "send")
    assert [r["seq"] for r in sends] == list(range(30)) and lost == 0
    late = [round((r["t_send"] - r["t_sched"]) * 1e3, 6) for r in sends]
    # slot 5's send took 45 ms: slot 6 goes out at once, 35 ms late, then one every half interval until caught up
    assert late[:14] == [0, 0, 0, 0, 0, 0, 35, 30, 25, 20, 15, 10, 5, 0] and set(late[14:]) == {0}
    gaps = [b["t_send"] - a["t_send"] for a, b in itertools.pairwise(sends)]
    assert min(gaps) >= INTERVAL / 2 - 1e-9
    rows = probe_rows(records)  # round trips count from the actual sends: every one is the path's 20 ms
    assert all(r["rtt_s"] == pytest.approx(0.02, abs=1e-9) for r in rows)
    assert [r["send_late_s"] for r in rows] == pytest.approx([x / 1e3 for x in late], abs=1e-9)


def test_the_echos_holding_time_is_not_the_paths() -> None:
    _, records, lost, _ = schedule(lambda k: 0.02, hold=lambda k: 0.015 if k % 3 == 0 else 0.0)
    rows = probe_rows(records)
    assert lost == 0 and all(r["rtt_s"] == pytest.approx(0.02, abs=1e-9) for r in rows)
    held = [r for r in kinds(records, "answer") if r["seq"] % 3 == 0]
    assert all(r["hold_s"] == 0.015 for r in held)


def test_probe_rows_join_sends_and_answers() -> None:
    records = [
        {"type": "start", "t0": 10.0, "interval": 0.01, "slots": 3, "proto": "udp", "sport": 40000},
        {"type": "send", "seq": 0, "t_sched": 10.0, "t_send": 10.001},
        {"type": "send", "seq": 1, "t_sched": 10.01, "t_send": 10.01},
        {"type": "answer", "seq": 1, "t_recv": 10.02, "hold_s": 0.0},
        {"type": "answer", "seq": 0, "t_recv": 10.055, "hold_s": 0.004},  # the echo held it 4 ms
        {"type": "answer", "seq": 0, "t_recv": 10.09, "hold_s": 0.0},  # a duplicate: the first answer counts
        {"type": "answer", "seq": 4294967295, "t_recv": 10.03},  # the hello: no slot
        {"type": "send", "seq": 2, "t_sched": 10.02, "t_send": 10.02},
        {"type": "end", "t_end": 11.02, "drain_s": 1.0, "outstanding": 1},
    ]
    rows = probe_rows(records)
    assert [r["seq"] for r in rows] == [0, 1, 2]
    assert [r["rtt_s"] for r in rows] == pytest.approx([0.05, 0.01, None], abs=1e-9)
    assert [r["send_late_s"] for r in rows] == pytest.approx([0.001, 0.0, 0.0], abs=1e-9)
    # an older prober's records: one per request, read as written
    old = [
        {"type": "rtt", "seq": 0, "t_send": 1.0, "rtt_s": 0.002},
        {"type": "rtt", "seq": 2, "t_send": 1.2, "rtt_s": None},
    ]
    assert probe_rows(old) == [
        {"seq": 0, "t_send": 1.0, "rtt_s": 0.002, "send_late_s": None},
        {"seq": 2, "t_send": 1.2, "rtt_s": None, "send_late_s": None},
    ]


def test_parse_rtt_names_each_pair_and_a_probe_that_wrote_nothing(tmp_path: Path) -> None:
    cfg = {"probes": [{"src": "a", "dst": "b"}, {"src": "c", "dst": "b"}]}
    (tmp_path / "p.config.json").write_text(json.dumps(cfg))
    sends = [{"type": "send", "seq": k, "t_sched": 1.0 + k, "t_send": 1.0 + k} for k in range(2)]
    (tmp_path / "p.probe0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in sends))
    with pytest.raises(GeneratorError, match="from c to b wrote no records"):
        parse_rtt(tmp_path, "p")
    (tmp_path / "p.probe1.jsonl").write_text(json.dumps(sends[0]) + "\n" + '{"type": "se')  # torn last line
    rows = parse_rtt(tmp_path, "p")["rtt"]
    assert [(r["src"], r["seq"], r["rtt_s"]) for r in rows] == [("a", 0, None), ("a", 1, None), ("c", 0, None)]


@pytest.mark.parametrize(
    ("extra", "key"),
    [({"interval": "0.5ms"}, "w.interval"), ({"duration": "5ms"}, "w.duration"), ({"proto": "sctp"}, "w.proto")],
)
def test_bad_probe_settings_are_refused_naming_the_key(extra: dict[str, Any], key: str) -> None:
    with pytest.raises(SpecError) as ei:
        parse_job({"kind": "rtt_probe", "name": "r", "pairs": [["a", "b"]], **extra}, "w")
    assert ei.value.path == key and "\n" not in str(ei.value)


def test_slots_fill_the_duration() -> None:
    def slots(duration: float, interval: float) -> int:
        job = parse_job({"kind": "rtt_probe", "name": "r", "pairs": [["a", "b"]], "duration": duration,
                         "interval": interval}, "w")  # fmt: skip
        assert isinstance(job, RttProbeJob)
        return job.slots

    assert slots(6, 0.01) == 600 and slots(0.25, 0.1) == 3 and slots(0.3, 0.1) == 3 and slots(0.01, 0.01) == 1


# ---- the real prober on loopback -------------------------------------------------------------------------------


def _serial_echo(lst: socket.socket, delay_s: float, stop: threading.Event) -> None:
    """A TCP echo that takes ``delay_s`` over each request, one after the other: answer k leaves (k+1) x delay_s
    after the first request came, at the earliest."""
    conn, _ = lst.accept()
    conn.settimeout(0.2)
    buf = bytearray()
    while not stop.is_set():
        try:
            data = conn.recv(4096)
        except TimeoutError:
            continue
        if not data:
            break
        buf += data
        while len(buf) >= PROBE.size:
            time.sleep(delay_s)
            conn.sendall(buf[: PROBE.size])
            del buf[: PROBE.size]
    conn.close()


def _delayed_udp_echo(sock: socket.socket, delay_s: float, stop: threading.Event) -> None:
    """A UDP echo that returns every datagram ``delay_s`` after it came, each on its own timer."""
    sock.settimeout(0.2)
    while not stop.is_set():
        try:
            data, addr = sock.recvfrom(2048)
        except TimeoutError:
            continue
        threading.Timer(delay_s, sock.sendto, (data, addr)).start()


def _probe(cfg: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    monkeypatch.delenv(GO_ENV, raising=False)  # no gate: the probe starts at once
    out = io.StringIO()
    probe({"size": PROBE.size, "interval": INTERVAL, "slots": 30, "dst_ip": "127.0.0.1", **cfg}, out)
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_tcp_probe_pipelines_behind_a_slow_echo_without_skipping(monkeypatch: pytest.MonkeyPatch) -> None:
    lst = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()
    threading.Thread(target=_serial_echo, args=(lst, 0.025, stop), daemon=True).start()
    try:
        records = _probe({"port": lst.getsockname()[1], "proto": "tcp"}, monkeypatch)
    finally:
        stop.set()
        lst.close()
    rows = probe_rows(records)
    assert [r["seq"] for r in rows] == list(range(30)) and all(r["rtt_s"] is not None for r in rows)
    t0 = rows[0]["t_send"]
    # answer k cannot come before (k+1) x 25 ms: the old loop, waiting for each, sent one request per answer
    assert all(r["t_send"] + r["rtt_s"] - t0 >= 0.025 * (r["seq"] + 1) - 1e-3 for r in rows)
    assert rows[-1]["rtt_s"] > 0.3  # slot 29 left at 290 ms and waited for the 29 before it
    gaps = [b["t_send"] - a["t_send"] for a, b in itertools.pairwise(rows)]
    assert min(gaps) >= INTERVAL / 2 - 1e-3  # on schedule, never a burst


def test_udp_probe_times_each_datagram_on_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind(("127.0.0.1", 0))
    stop = threading.Event()
    echo = threading.Thread(target=_delayed_udp_echo, args=(sock, 0.03, stop), daemon=True)
    echo.start()
    try:
        records = _probe({"port": sock.getsockname()[1], "proto": "udp"}, monkeypatch)
    finally:
        stop.set()
        echo.join()
        sock.close()
    rows = probe_rows(records)
    assert [r["seq"] for r in rows] == list(range(30))
    answered = [r["rtt_s"] for r in rows if r["rtt_s"] is not None]
    assert len(answered) == 30 and min(answered) >= 0.03  # three slots outstanding at a time, none skipped


HOSTS = {f"h{i}": HostInfo(f"h{i}", f"127.0.1.{i + 1}", f"l{i // 2}") for i in range(4)}


def test_probe_jobs_on_loopback_bind_their_placed_ports(tmp_path: Path) -> None:
    jobs = [
        {"kind": "rtt_probe", "name": "pt", "pairs": [["h0", "h1"], ["h2", "h1"]], "interval": "20ms", "duration": 0.4},
        {"kind": "rtt_probe", "name": "pu", "pairs": [["h3", "h1"]], "interval": "20ms", "duration": 0.4,
         "proto": "udp"},
    ]  # fmt: skip
    ports = SourcePorts(seed=7)
    with ProcessGroup() as pg:
        t = run_workload(parse_workload(jobs), RunContext(HOSTS, pg, tmp_path, ports=ports), Capabilities(), 60)
    for job, src in (("pt", "h0"), ("pt", "h2"), ("pu", "h3")):
        rows = [r for r in t["rtt"] if r["job"] == job and r["src"] == src]
        assert [r["seq"] for r in rows] == list(range(20)), (job, src)
        # the echo's holding time comes off: what is left is from the request's send to the answer's arrival,
        # less the time between the request's arrival and the answer's send, never negative
        assert all(r["rtt_s"] >= 0 for r in rows if r["rtt_s"] is not None), (job, src)
        assert job == "pu" or all(r["rtt_s"] is not None for r in rows), (job, src)
    placed = {(h, j, f): p for h, j, f, p in ports.assigned}
    for job, i, src in (("pt", 0, "h0"), ("pt", 1, "h2"), ("pu", 0, "h3")):
        start = json.loads((tmp_path / f"{job}.probe{i}.jsonl").read_text().splitlines()[0])
        assert start["type"] == "start" and start["sport"] == placed[(src, job, f"probe{i}")] != 0


# ---- the summary: a lost probe is an infinite round trip --------------------------------------------------------


def _rtt_summary(tmp_path: Path, answered: int, lost: int) -> dict[str, Any]:
    from results.metrics import summarize
    from results.record import RunRecord, load_run

    rows = [{"job": "p", "src": "a", "dst": "b", "seq": k, "t_send": 1.0 + k * 0.01, "rtt_s": (k + 1) / 1000,
             "send_late_s": 0.0005 if k == 7 else 0.0} for k in range(answered)]  # fmt: skip
    rows += [{"job": "p", "src": "a", "dst": "b", "seq": answered + k, "t_send": 9.0} for k in range(lost)]
    rec = RunRecord.create(tmp_path, f"r{answered}-{lost}")
    rec.table("rtt").write_many(rows)
    rec.finish()
    return summarize(load_run(rec.path))


def test_rtt_percentiles_count_lost_probes_as_infinite(tmp_path: Path) -> None:
    s = _rtt_summary(tmp_path, 200, 0)  # round trips 1 .. 200 ms
    assert s["rtt_p99_s"] == pytest.approx(0.19801) and s["rtt_n"] == 200 and s["rtt_lost"] == 0
    assert s["rtt_send_late_max_s"] == pytest.approx(0.0005)
    s = _rtt_summary(tmp_path, 200, 1)  # rank 0.99 x 200 = 198 of 201 sent: the 199th answer, 199 ms
    assert s["rtt_p99_s"] == pytest.approx(0.199) and s["rtt_lost"] == 1
    s = _rtt_summary(tmp_path, 200, 3)  # rank 0.99 x 202 = 199.98, beyond the last answer: 1.5% lost
    assert s["rtt_p99_s"] is None and "3 of 203 probes (1.5%) were never answered" in s["not_applicable"]["rtt_p99_s"]
    assert s["rtt_p50_s"] == pytest.approx(0.102)  # rank 101 of 203
