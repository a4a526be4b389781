"""doctor's table from a canned probe, capability errors, and the ownership state file (no root, no system changes)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from testbed.host import ownership
from testbed.host.capabilities import NEEDS, Capabilities, CapabilityError, doctor_rows, require


def test_doctor_rows_from_canned_probe() -> None:
    caps: dict[str, Any] = {n.key: True for n in NEEDS}
    caps.update({"qdisc.red": False, "qdisc.netem": False, "cc.dctcp": False})
    del caps["ovs"]  # not probed: unknown
    caps["ecn"] = {"marking_auto": "bpf", "sch_red_reason": "no sch_red", "dctcp": "bpf", "dctcp_reason": "no module"}
    rows = doctor_rows(Capabilities.from_dict(caps))
    by_what = {r[0]: r for r in rows}
    assert len(rows) == len(NEEDS) + 2
    assert all(len(r) == 4 and all(isinstance(c, str) for c in r) for r in rows)
    assert by_what["HTB qdisc"] == ("HTB qdisc", "yes", "", "")
    red = by_what["sch_red (RED with ECN)"]
    assert red[1] == "MISSING"
    assert "eBPF marker is used instead" in red[2] and "testbed vm" in red[3]
    assert by_what["sch_netem"][1] == "MISSING" and "delay" in by_what["sch_netem"][2]
    assert by_what["Open vSwitch kernel datapath"][1] == "unknown"
    assert by_what["ECN marking implementation (auto)"] == (
        "ECN marking implementation (auto)",
        "bpf",
        "no sch_red",
        "",
    )
    assert by_what["DCTCP implementation"][1:3] == ("bpf", "no module")


def test_doctor_rows_ecn_import_error() -> None:
    rows = doctor_rows(
        Capabilities.from_dict({"ecn": {"marking_auto": None, "error": "testbed.ecn failed to import: boom"}})
    )
    assert rows[-1] == ("testbed.ecn", "MISSING", "testbed.ecn failed to import: boom", "see the error")
    assert all(r[1] == "unknown" for r in rows[: len(NEEDS)])  # an empty probe knows nothing


def test_require() -> None:
    require(Capabilities.from_dict({"qdisc.htb": True}), "qdisc.htb", "shaping")
    with pytest.raises(CapabilityError, match=r"link delay needs sch_netem, which this machine lacks \(stock kernel"):
        require(Capabilities.from_dict({"qdisc.netem": False}), "qdisc.netem", "link delay")
    with pytest.raises(CapabilityError, match=r"needs thing\.x, which this machine lacks"):
        require(Capabilities.from_dict({}), "thing.x", "it")


PROBED: dict[str, Any] = {  # a probe's dict as a run manifest stores it, in the probe's order
    "kernel": "6.18.0-test",
    "machine": "x86_64",
    "cpus": 2,
    "root": True,
    "netns": True,
    "qdisc.htb": True,
    "qdisc.red": False,
    "ifb": True,
    "ecmp.hash_policy_3": True,
    "ecmp.hash_seed": False,
    "nftables": True,
    "ecn": {
        "sch_red": False,
        "sch_red_reason": "sch_red is not in this kernel",
        "bpf_marker": True,
        "bpf_marker_reason": "",
        "marking_auto": "bpf",
        "dctcp": None,
        "dctcp_reason": "no tcp_dctcp and dctcp.bpf.o not built",
    },
    "cc.available": ["reno", "cubic"],
    "cc.allowed": ["reno", "cubic"],
    "cc.default": "cubic",
    "cc.reno": True,
    "cc.dctcp": False,
    "mininet": True,
    "btf": True,
    "ovs": False,
    "tool.iperf3": True,
    "tool.clang": False,
    "calibration": {"status": "not calibrated", "path": "/var/cache/testbed/calibration.json"},
}


def test_capabilities_round_trip_the_manifest_dict() -> None:
    caps = Capabilities.from_dict(PROBED)
    assert caps.to_dict() == PROBED and list(caps.to_dict()) == list(PROBED)
    assert caps.cpus == 2 and caps.qdiscs["red"] is False and caps.cc_available == ("reno", "cubic")
    assert caps.ecn.marking_auto == "bpf" and caps.ecn.dctcp is None and caps.tools["iperf3"] is True
    assert caps.has("qdisc.htb") is True and caps.has("tool.clang") is False and caps.has("qdisc.netem") is None
    assert caps.has("ecmp.hash_seed") is False and caps.ecmp_hash_seed is False
    failed = {"ecn": {"marking_auto": None, "error": "testbed.ecn failed to import: boom"}, "extra.key": 1}
    assert Capabilities.from_dict(failed).to_dict() == failed
    assert Capabilities.from_dict({"cpus": 2}).to_dict() == {"cpus": 2} == Capabilities(cpus=2).to_dict()
    assert Capabilities().to_dict() == {} and Capabilities().ecn.dctcp is None  # nothing probed
    with pytest.raises(AttributeError):
        caps.cpus = 4  # type: ignore[misc]


def test_prefix_and_netns_patterns() -> None:
    assert ownership.PREFIX_RE.match("tb3fa2")
    assert not ownership.PREFIX_RE.match("tb3FA2") and not ownership.PREFIX_RE.match("tb3fa")
    m = ownership.NETNS_RE.match("tb3fa2-l1h2")
    assert m and m.group(1) == "tb3fa2"
    for other in ("tbprobe123", "tb3fa2", "xtb3fa2-l1", "tb3fa2-", "tb3fa2x-l1", "ecn-h1"):
        assert not ownership.NETNS_RE.match(other), other


def test_run_state_round_trip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ownership, "STATE_DIR", tmp_path)
    st = ownership.RunState("tbabcd", 4242, 1.5)
    st.save()
    st.add("namespaces", "tbabcd-l1")
    st.add("sysctls", {"key": "net.ipv4.tcp_ecn", "original": "2"})
    assert st.path == tmp_path / "tbabcd.json"
    back = ownership.RunState.load(st.path)
    assert back == st
    assert back.namespaces == ["tbabcd-l1"] and back.sysctls == [{"key": "net.ipv4.tcp_ecn", "original": "2"}]
    assert not list(tmp_path.glob("*.tmp"))  # written through a rename


def test_the_state_directory_comes_from_the_entrys_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """TESTBED_STATE_DIR moves the run lock and the state files: read from the environment an entry hands over (the
    CLI's, the pytest plugin's), not when the module is imported."""
    from testbed import cli, pytest_plugin

    monkeypatch.setattr(ownership, "STATE_DIR", ownership.STATE_DIR)  # put back after the test
    assert ownership.state_dir({}) == Path("/run/testbed")
    assert ownership.use_state_dir({"TESTBED_STATE_DIR": str(tmp_path)}) == tmp_path
    assert ownership.RunState("tbabcd", 1, 0.0).path == tmp_path / "tbabcd.json"

    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "cli"))
    assert cli.main(["validate", str(tmp_path / "none.yaml")]) == 2  # refused after the entry read it
    assert tmp_path / "cli" == ownership.STATE_DIR and "does not exist" in capsys.readouterr().err
    monkeypatch.setenv("TESTBED_STATE_DIR", str(tmp_path / "plugin"))
    pytest_plugin.pytest_configure(None)  # type: ignore[arg-type]
    assert tmp_path / "plugin" == ownership.STATE_DIR
