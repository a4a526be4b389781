"""The stall guardrails (results/fidelity/stalls.py, results/stall_causes.py) on synthetic records with known causes:
a 4.34 s stall of the intra-leaf flow l1h1 -> l1h2 (job ar, iteration 4, step 5) and what the record says about it."""

from __future__ import annotations

from typing import Any

import pytest

from results.checks import Thresholds
from results.fidelity import evaluate_run
from results.fidelity.stalls import check_slow_iterations, check_stalls
from results.stall_causes import StallTables, judge_stalls, path_ports, possible_ports
from testbed.spec.schemas import SCHEMAS

T0, T1 = 1000.0, 1004.34


def _port(node: str, peer: str, layer: str, direction: str) -> dict[str, Any]:
    return {"node": node, "dev": f"{node}-{peer}", "peer": peer, "layer": layer, "direction": direction,
            "rate_bps": 100e6, "mtu": 9000}  # fmt: skip


HOSTS = {"l1": ["l1h1", "l1h2", "l1h3"], "l2": ["l2h1", "l2h2"]}
PORTS = [_port(h, leaf, "host", "up") for leaf, hs in HOSTS.items() for h in hs]
PORTS += [_port(leaf, h, "leaf", "down") for leaf, hs in HOSTS.items() for h in hs]
PORTS += [_port("l1", "s1", "leaf", "up"), _port("l2", "s1", "leaf", "up")]
PORTS += [_port("s1", "l1", "spine", "down"), _port("s1", "l2", "spine", "down")]
DOWN = ("l1", "l1-l1h2")  # the flow's last hop: its leaf's port to the receiver


def stall(**kw: Any) -> dict[str, Any]:
    """A stalls.csv row: l1h2's receive from l1h1 (job ar, flow ar.r0.p1), nothing unusual in its TCP_INFO."""
    row: dict[str, Any] = dict.fromkeys(SCHEMAS["stalls"][0])
    row.update(job="ar", side="recv", rank="l1h2", peer="l1h1", flow_id="ar.r0.p1", iter=4, step=5, t_start=T0,
               t_detect=T0 + 0.45, t_end=T1, duration_s=T1 - T0, bound_s=0.408, bytes_got=9000,
               bytes_needed=222_222, queued_bytes=0, rto_us=204_000, snd_wnd=1_000_000, snd_mss=8948, retransmits=0,
               probes=0, backoff=0, lost=0, retrans_during=0, ooo_during=0, rto_during=0, retransmits_max=0,
               probes_max=0)  # fmt: skip
    row.update(kw)
    return row


def queue_rows(
    drops_at: float | None = None, gap: tuple[float, float] | None = None, held: bool = False
) -> list[dict[str, Any]]:
    """Keyframes every 0.1 s of the flow's two ports from T0 - 1 to T1 + 1: idle, sending; ``drops_at``: the
    leaf's port drops 2 packets then; ``gap``: no row at all inside it; ``held``: the leaf's port holds 3 packets and
    sends nothing from T0 to T1."""
    rows = []
    for i in range(int((T1 - T0 + 2) * 10) + 1):
        t = T0 - 1 + i * 0.1
        if gap and gap[0] < t < gap[1]:
            continue
        for node, dev in (("l1h1", "l1h1-l1"), DOWN):
            stuck = held and (node, dev) == DOWN and T0 <= t <= T1
            tx = int(min(t, T0) - 999) * 100_000 if stuck else int((t - 999) * 1e6)
            rows.append({"t": t, "node": node, "dev": dev, "backlog_bytes": 27000 if stuck else 0,
                         "backlog_pkts": 3 if stuck else 0, "tx_bytes": tx,
                         "drops": 2 if drops_at is not None and t >= drops_at and (node, dev) == DOWN else 0})  # fmt: skip
    return rows


def cpu_rows(gap: tuple[float, float] | None = None) -> list[dict[str, Any]]:
    out = []
    for i in range(int((T1 - T0 + 2) * 10) + 1):
        t = T0 - 1 + i * 0.1
        if not (gap and gap[0] < t < gap[1]):
            out.append({"t": t, "cpu": "all", "busy": 0.4})
    return out


FLOWS = [{"job": "ar", "flow_id": "ar.r0.p1", "src": "l1h1", "dst": "l1h2", "path": "l1h1>l1>l1h2", "t_start": T0}]


def tables(stalls: list[dict[str, Any]], **kw: Any) -> StallTables:
    return StallTables(stalls=stalls, flows=kw.pop("flows", FLOWS), ports=PORTS, **kw)


def judged(stalls: list[dict[str, Any]], queues: list | None = None, cpu: list | None = None, **kw: Any):
    tabs = tables(stalls, **kw)
    q = queue_rows() if queues is None else queues
    c = cpu_rows() if cpu is None else cpu
    return judge_stalls(tabs, q, (), c), check_stalls(tabs, q, (), c)


def test_the_flows_path_ports() -> None:
    assert path_ports("l1h1>l1>l1h2", PORTS) == [("l1h1", "l1h1-l1"), DOWN]
    assert sorted(possible_ports("l1h1", "l1h2", PORTS)) == [DOWN, ("l1h1", "l1h1-l1")]
    across = set(possible_ports("l1h1", "l2h2", PORTS))
    assert across == {("l1h1", "l1h1-l1"), ("l1", "l1-s1"), ("s1", "s1-l2"), ("l2", "l2-l2h2")}


def test_drops_on_the_path_are_the_experiments_and_faithful() -> None:
    (st,), c = judged([stall()], queue_rows(drops_at=T0 + 0.05))
    assert st.cause == "drops and RTO" and "l1:l1-l1h2 dropped 2 packets" in st.evidence
    assert c["ok"] is True and c["value"] == 0 and c["details"]["stalls"][0]["experiment"] is True
    assert "each the experiment's" in c["reason"]


def test_drops_on_another_port_do_not_explain_it() -> None:
    rows = queue_rows() + [{"t": T0 + 1, "node": "l2", "dev": "l2-l2h1", "drops": 5, "backlog_pkts": 0}]
    (st,), c = judged([stall()], rows)
    assert st.cause == "unexplained" and c["ok"] is False


def test_unread_bytes_in_the_receiving_socket_are_the_receivers() -> None:
    (st,), c = judged([stall(queued_bytes=200_000)])
    assert st.cause == "receiver did not read" and c["ok"] is False
    assert "receiver did not read" in c["reason"] and "l1h2 held 200000 unread bytes" in c["reason"]


def test_major_page_faults_of_the_stalled_worker_are_memory_not_the_receiver() -> None:
    (st,), c = judged([stall(queued_bytes=200_000, counters_during="Proc.majflt=3 Vm.pgmajfault=40")])
    assert st.cause == "worker waited on memory" and c["ok"] is False
    assert "l1h2 (recv) took 3 major page faults during the stall" in st.evidence


def test_the_machines_page_faults_alone_are_named_too() -> None:
    (st,), _ = judged([stall(counters_during="Vm.pgmajfault=12")])
    assert st.cause == "worker waited on memory"
    assert st.evidence == ["the machine took 12 major page faults during l1h2's stall"]


def test_a_closed_window_at_the_sender_is_the_receivers() -> None:
    row = stall(side="send", rank="l1h1", peer="l1h2", snd_wnd=4096, queued_bytes=300_000)
    (st,), _ = judged([row])
    assert st.cause == "receiver did not read"


def test_a_sampler_gap_over_the_stall_is_the_machines() -> None:
    gap = (T0 - 0.05, T1 - 0.2)
    (st,), c = judged([stall()], queue_rows(gap=gap), cpu_rows(gap=gap))
    assert st.cause == "machine-wide stall" and c["ok"] is False
    assert "the sampler wrote no row for" in st.evidence[0]


def test_a_short_sampler_gap_is_not_the_machine() -> None:
    gap = (T0 + 1.0, T0 + 1.5)
    (st,), _ = judged([stall()], queue_rows(gap=gap), cpu_rows(gap=gap))
    assert st.cause == "unexplained"


def test_a_cpu_that_did_not_run_is_the_machines() -> None:
    cs = [{"t": T0 + 0.1, "cpu": "1", "late_s": 4.2, "waited_s": 0.1, "stalled_s": 4.1}]  # due at T0 + 0.1
    (st,), _ = judged([stall()], cpu_stalls=cs)
    assert st.cause == "machine-wide stall" and st.evidence == ["a CPU did not run for 4.10 s of it (cpu_stalls.csv)"]
    short = [{"t": T0 + 0.1, "cpu": "1", "late_s": 1.0, "waited_s": 0.9, "stalled_s": 0.1}]  # mostly contention
    assert judged([stall()], cpu_stalls=short)[0][0].cause == "unexplained"


def test_nothing_in_the_record_is_unexplained_and_not_faithful() -> None:
    (st,), c = judged([stall()])
    assert st.cause == "unexplained" and st.evidence == []
    assert c["ok"] is False and c["value"] == 1
    assert "job ar iter 4 step 5 l1h1->l1h2 stalled 4.34 s: unexplained" in c["reason"]


def test_a_pfc_pause_on_the_path_is_reported_and_faithful() -> None:
    pauses = [{"node": "l1h1", "dev": "l1h1-l1", "t_start": T0 + 0.01, "t_end": T1 - 0.1}]
    (st,), c = judged([stall()], pauses=pauses)
    assert st.cause == "pfc pause" and c["ok"] is True
    assert c["details"]["stalls"][0] == {
        "job": "ar", "flow": "l1h1->l1h2", "flow_id": "ar.r0.p1", "iter": 4, "step": 5, "t_start": T0,
        "duration_s": 4.34, "sides": ["recv"], "cause": "pfc pause", "experiment": True,
        "evidence": ["PFC paused l1h1:l1h1-l1 from +0.010 s to +4.240 s"],
    }  # fmt: skip


def test_a_pause_elsewhere_is_not_the_cause() -> None:
    pauses = [{"node": "l2h1", "dev": "l2h1-l2", "t_start": T0, "t_end": T1}]
    (st,), _ = judged([stall()], pauses=pauses)
    assert st.cause == "unexplained"


def test_a_scheduled_link_event_is_the_experiments() -> None:
    events = [{"t": T0 - 0.1, "event": "down", "link": "l1-s1"}]
    (st,), c = judged([stall()], link_events=events)
    assert st.cause == "link event" and c["ok"] is True
    late = [{"t": T1 + 5, "event": "down", "link": "l1-s1"}]
    assert judged([stall()], link_events=late)[0][0].cause == "unexplained"


def test_the_senders_timeouts_are_drops_and_rto() -> None:
    row = stall(side="send", rank="l1h1", peer="l1h2", retransmits=2, backoff=2, queued_bytes=50_000)
    (st,), c = judged([row])
    assert st.cause == "drops and RTO" and c["ok"] is True and "timeouts 2" in st.evidence[0]


def test_the_hosts_netstat_timeouts_are_the_weakest_sign() -> None:
    ns = [{"host": "l1h1", "phase": "start", "counter": "TcpExt.TCPTimeouts", "value": 1},
          {"host": "l1h1", "phase": "end", "counter": "TcpExt.TCPTimeouts", "value": 3}]  # fmt: skip
    (st,), _ = judged([stall()], netstat=ns)
    assert st.cause == "drops and RTO" and "netstat" in st.evidence[0]
    (st,), _ = judged([stall(queued_bytes=10)], netstat=ns)
    assert st.cause == "receiver did not read"  # a stronger sign comes first


def test_a_port_that_held_packets_and_sent_nothing() -> None:
    (st,), c = judged([stall()], queue_rows(held=True))
    assert st.cause == "queue held packets" and c["ok"] is False
    assert st.evidence == ["l1:l1-l1h2 held packets and sent nothing"]


def test_flows_that_share_no_host_and_resume_together_are_the_machines() -> None:
    rows = [
        stall(),
        stall(rank="l2h2", peer="l2h1", flow_id="ar.r3.p4", t_start=T0 + 0.02, t_end=T1 + 0.001),
        stall(rank="l1h3", peer="l2h2", flow_id="ar.r4.p2", t_start=T0 + 0.01, t_end=T1 + 0.002),
    ]
    every, c = judged(rows)
    assert [s.cause for s in every] == ["machine-wide stall"] * 3
    assert "3 flows that share no host resumed within 2 ms" in every[0].evidence[0]
    assert c["ok"] is False and c["value"] == 3
    apart = [rows[0], stall(rank="l2h2", peer="l2h1", flow_id="ar.r3.p4", t_end=T1 + 1.0)]
    assert [s.cause for s in judged(apart)[0]] == ["unexplained"] * 2


def test_a_flow_with_loss_does_not_make_others_machine_wide() -> None:
    rows = [stall(), stall(side="send", rank="l2h1", peer="l2h2", flow_id="ar.r3.p4", retransmits=1)]
    causes = [s.cause for s in judged(rows)[0]]
    assert causes == ["unexplained", "drops and RTO"]


def test_both_sides_of_one_flow_are_one_stall() -> None:
    rows = [stall(), stall(side="send", rank="l1h1", peer="l1h2", t_start=T0 + 0.03, t_end=T1 + 0.04)]
    (st,), c = judged(rows)
    assert c["details"]["stalls"][0]["sides"] == ["recv", "send"]
    assert st.t_resume == T1 and st.t_end == T1 + 0.04


def test_a_stall_that_never_ended() -> None:
    (st,), c = judged([stall(t_end=None, duration_s=None)])
    assert st.t_seen == T0 + 0.45  # known stalled until its detection
    assert "until the job ended" in c["reason"] and c["details"]["worst_s"] is None


def test_without_a_path_the_ports_it_may_cross_are_judged() -> None:
    (st,), _ = judged([stall()], queue_rows(drops_at=T0 + 0.1), flows=[])
    assert st.cause == "drops and RTO" and st.evidence == ["l1:l1-l1h2 (a port it may cross) dropped 2 packets"]


def test_no_stall_passes() -> None:
    c = check_stalls(tables([]), queue_rows(), (), cpu_rows())
    assert c["ok"] is True and c["value"] == 0


# --- iterations ---------------------------------------------------------------------------------------------------
def iterations(slow_s: float = 4.62) -> list[dict[str, Any]]:
    """Seven iterations of job ar: 0.29-0.30 s each, except iteration 4 (``slow_s``), which holds the stall."""
    out, t = [], T0 - 1.3
    for i in range(7):
        d = slow_s if i == 4 else 0.29 + 0.002 * i
        out.append({"job": "ar", "iter": i, "warmup": 0, "t_start": t, "t_end": t + d})
        t += d + 0.01
    return [{"job": "ar", "iter": -1, "warmup": 1, "t_start": T0 - 9, "t_end": T0 - 1.5}, *out]


def test_a_slow_iteration_explained_by_its_stall_passes() -> None:
    tabs = tables([stall()], iterations=iterations())
    c = check_slow_iterations(tabs, queue_rows())
    assert c["ok"] is True and c["value"] == pytest.approx(4.62 / 0.296, rel=0.01)
    (slow,) = c["details"]["slow"]
    assert slow["iter"] == 4 and "stalled 4.34 s (unexplained)" in slow["explained_by"][0]


def test_a_slow_iteration_with_no_cause_fails_naming_it() -> None:
    c = check_slow_iterations(tables([], iterations=iterations()), queue_rows())
    assert c["ok"] is False and "job ar iter 4 took 4.62 s" in c["reason"]


def test_drops_or_another_jobs_arrival_explain_a_slow_iteration() -> None:
    dropped = check_slow_iterations(tables([], iterations=iterations()), queue_rows(drops_at=T0 + 1))
    assert dropped["ok"] is True and "2 drops" in dropped["details"]["slow"][0]["explained_by"][0]
    bg = [{"job": "bg", "flow_id": "bg", "t_start": T0 + 0.5}]
    other = check_slow_iterations(tables([], iterations=iterations(), fct=bg), queue_rows())
    assert other["ok"] is True and other["details"]["slow"][0]["explained_by"] == ["transfers of bg started"]


def test_retransmissions_in_a_slow_iteration_explain_it() -> None:
    rows = [dict(r, retrans=4, timeouts=1) if r["iter"] == 4 else dict(r, retrans=0, timeouts=0) for r in iterations()]
    c = check_slow_iterations(tables([], iterations=rows), queue_rows())
    assert c["ok"] is True
    assert c["details"]["slow"][0]["explained_by"] == ["its sockets retransmitted 4 segments, 1 timeouts"]


def test_iterations_near_the_median_pass_and_too_few_are_not_judged() -> None:
    c = check_slow_iterations(tables([], iterations=iterations(0.31)), queue_rows())
    assert c["ok"] is True and "within 1.5x" in c["reason"]
    assert check_slow_iterations(tables([], iterations=iterations()[:3]), ())["ok"] is None
    strict = check_slow_iterations(tables([], iterations=iterations(0.5)), (), Thresholds(slow_iter_factor=1.5))
    assert strict["ok"] is False  # 0.5 s is 1.7x the median


# --- wiring -------------------------------------------------------------------------------------------------------
def _record(tmp_path, with_stalls: bool):
    from results.record import RunRecord

    rec = RunRecord.create(tmp_path, "stall", scenario={"fabric": {"transport": {"gso_max_segs": 1}}})
    rec.update({"fabric": {"ports": PORTS}})
    with rec.table("queues") as q:
        q.write_many(queue_rows())
    with rec.table("cpu") as c:
        c.write_many(cpu_rows())
    with rec.table("iterations") as it:
        it.write_many(iterations())
    with rec.table("flows") as fl:
        fl.write_many(FLOWS)
    if with_stalls:
        with rec.table("stalls") as st:
            st.write_many([stall()])
    return rec.path


def test_evaluate_run_judges_stalls_where_the_workers_watched(tmp_path) -> None:
    v = evaluate_run(_record(tmp_path / "new", True))
    checks = {c["name"]: c for c in v["checks"]}
    assert checks["stalls"]["ok"] is False and checks["slow_iterations"]["ok"] is True
    assert v["faithful"] is False and any(f.startswith("stalls: 1 of 1 stalls") for f in v["failed"])


def test_evaluate_run_on_an_older_record_has_no_stall_checks(tmp_path) -> None:
    v = evaluate_run(_record(tmp_path / "old", False))
    assert not {"stalls", "slow_iterations"} & {c["name"] for c in v["checks"]}


def test_a_size_sweep_compares_each_iteration_with_its_own_size() -> None:
    # three iterations each of 8 KiB, 64 KiB and 512 KiB, each size 8x as long as the one before: none is slow for
    # its size; a fourth 512 KiB iteration at 3x its size's median is, and fails with no cause
    rows, t = [], T0 + 20
    for k, (size, d) in enumerate(((8192, 0.01), (65536, 0.08), (524288, 0.64))):
        for j in range(3):
            rows.append({"job": "sw", "iter": 3 * k + j, "warmup": 0, "size_bytes": size, "t_start": t, "t_end": t + d})
            t += d + 0.01
    c = check_slow_iterations(tables([], iterations=rows), queue_rows())
    assert c["ok"] is True and c["value"] == pytest.approx(1.0)
    rows.append({"job": "sw", "iter": 9, "warmup": 0, "size_bytes": 524288, "t_start": t, "t_end": t + 1.92})
    c = check_slow_iterations(tables([], iterations=rows), queue_rows())
    assert c["ok"] is False and "job sw iter 9 took 1.92 s, 3.0x its median" in c["reason"]
