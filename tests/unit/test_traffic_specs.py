"""Job specs: defaults, units, and errors that name the key path."""

from __future__ import annotations

import pytest

from testbed.spec.fields import SpecError
from testbed.spec.workload import CollectiveJob, IperfJob, PipelineJob, PsJob, ShortFlowsJob, parse_job, parse_workload


def test_collective_defaults_and_units() -> None:
    job = parse_job({"kind": "allreduce", "name": "ar", "size": "4MB", "compression": 10}, "w[0]")
    assert isinstance(job, CollectiveJob)
    assert (job.size, job.algorithm, job.iterations, job.warmup, job.slice) == (4_194_304, "ring", 10, 1, 32_768)
    assert job.wire_size == 419_430  # 4 MiB / 10, truncated
    assert parse_job({"kind": "alltoall", "name": "a"}, "w").channels == 4  # type: ignore[union-attr]
    assert parse_job({"kind": "allreduce", "name": "a", "size": "1MiB"}, "w").size == 1_048_576  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("data", "path"),
    [
        ({"kind": "allreduce", "name": "a", "sise": "4MB"}, "w[0].sise"),
        ({"kind": "allreduce", "name": "a", "algorithm": "butterfly"}, "w[0].algorithm"),
        ({"kind": "allgather", "name": "a", "algorithm": "hierarchical"}, "w[0].algorithm"),
        ({"kind": "allreduce", "name": "a", "size": "20pkt"}, "w[0].size"),
        ({"kind": "allreduce", "name": "a", "ranks": ["h1"]}, "w[0].ranks"),
        ({"kind": "allreduce", "name": "a", "channels": 2}, "w[0].channels"),
        ({"kind": "gossip", "name": "a"}, "w[0].kind"),
        ({"kind": "allreduce"}, "w[0].name"),
        ({"kind": "iperf", "name": "i", "src": "a", "dst": "b", "proto": "udp"}, "w[0].rate"),
        ({"kind": "iperf", "name": "i", "src": "a", "dst": "b", "duration": "1.5s"}, "w[0].duration"),
        ({"kind": "iperf", "name": "i", "src": "a", "dst": "b", "on": 1}, "w[0].off"),
        ({"kind": "ps", "name": "p", "workers": ["a"], "servers": ["a"]}, "w[0].servers"),
        ({"kind": "pipeline", "name": "p", "stages": ["a", "b"], "schedule": "zb"}, "w[0].schedule"),
        ({"kind": "incast", "name": "x", "senders": ["a"], "receiver": "a"}, "w[0].receiver"),
        ({"kind": "shortflows", "name": "x", "senders": ["a"], "receiver": "b", "sizes": [["1KB"]]}, "w[0].sizes[0]"),
        ({"kind": "rtt_probe", "name": "r", "pairs": [["a", "a"]]}, "w[0].pairs[0]"),
        ({"kind": "scapy_train", "name": "t", "src": "a", "dst": "b", "ecn": "red"}, "w[0].ecn"),
    ],
)
def test_errors_name_the_key(data: dict, path: str) -> None:
    with pytest.raises(SpecError) as ei:
        parse_job(data, "w[0]")
    assert ei.value.path == path, str(ei.value)


def test_other_kinds() -> None:
    ps = parse_job({"kind": "ps", "name": "p", "workers": ["a", "b"], "servers": ["c"], "size": "2MB"}, "w")
    assert isinstance(ps, PsJob) and ps.size == 2_097_152 and ps.hosts_used() == ("a", "b", "c")
    pp = parse_job({"kind": "pipeline", "name": "p", "stages": ["a", "b"], "compute": "40ms"}, "w")
    assert isinstance(pp, PipelineJob) and pp.compute == pytest.approx(0.04) and pp.compute_bwd == pytest.approx(0.04)
    ip = parse_job({"kind": "iperf", "name": "i", "src": "a", "dst": "b", "proto": "udp", "rate": "10Mbit"}, "w")
    assert isinstance(ip, IperfJob) and ip.rate_bps == 10_000_000 and ip.hosts_used() == ("a", "b")
    sf = parse_job(
        {"kind": "incast", "name": "x", "senders": ["a", "b"], "receiver": "c", "sizes": [["10KB", 3], ["1MB", 1]]}, "w"
    )
    assert isinstance(sf, ShortFlowsJob) and sf.sizes == ((10_240, 3.0), (1_048_576, 1.0))
    rt = parse_job({"kind": "rtt_probe", "name": "r", "pairs": [["a", "b"], ["c", "d"]]}, "w")
    assert rt.hosts_used() == ("a", "b", "c", "d")
    assert parse_job({"kind": "allreduce", "name": "a"}, "w").hosts_used() == ()


def test_workload_names_unique() -> None:
    with pytest.raises(SpecError, match="duplicate"):
        parse_workload([{"kind": "allreduce", "name": "a"}, {"kind": "allgather", "name": "a"}])
    with pytest.raises(SpecError):
        parse_workload({"kind": "allreduce"})
    assert len(parse_workload([{"kind": "allreduce", "name": "a", "start_after": "2s"}])) == 1


def _iperf(**kw):
    return {"kind": "iperf", "name": "i", "src": "a", "dst": "b", **kw}


def test_iperf_cport_binds_one_port_per_stream():
    from traffic.iperf import IperfGenerator

    job = parse_job(_iperf(cport=30000, parallel=3), "w")
    assert isinstance(job, IperfJob) and list(job.cports()) == [30000, 30001, 30002]
    argv = IperfGenerator(job, 0).client_argv("10.0.0.2", src_ip="10.0.0.1")
    assert "--cport" not in argv and argv[argv.index("-B") + 1] == "10.0.0.1"  # each cycle's port: the loop's
    assert list(parse_job(_iperf(), "w").cports()) == []


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"cport": 80}, "must be in [1024, 65535], got 80"),
        ({"cport": 65535, "parallel": 2}, "65534"),
        ({"cport": 30000, "on": 1, "off": 1}, "on/off cycling"),
    ],
)
def test_iperf_cport_rejects_what_cannot_bind(extra, message):
    with pytest.raises(SpecError) as err:
        parse_job(_iperf(**extra), "w[0]")
    assert err.value.path == "w[0].cport" and message in str(err.value)


def test_workload_rejects_two_jobs_binding_one_port_on_one_host():
    a = _iperf(cport=30000, parallel=2)
    b = {**_iperf(cport=30001), "name": "j", "dst": "c"}
    with pytest.raises(SpecError) as err:
        parse_workload([a, b], "w")
    assert err.value.path == "w[1].cport" and "also bound by job 'i'" in str(err.value)
    other_host = {**b, "src": "c", "dst": "a"}
    assert len(parse_workload([a, other_host], "w")) == 2
