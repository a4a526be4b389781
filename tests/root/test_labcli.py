"""`python3 -m testbed cli` driven as a student types it (pexpect, as Mininet's own tests drive its CLI), as root.

Every command of the Mininet CLI that a lab names, and the testbed's own, on a routed spine-leaf and a fat-tree;
a failing command leaves the prompt alive; a closed terminal (SIGHUP) tears the fabric down.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from testbed.host.ownership import list_netns
from tests.root.hoststate import ROOT

pexpect = pytest.importorskip("pexpect", reason="python3-pexpect is not installed (setup.sh installs it)")

PROMPT = "mininet> "
RATE_MBIT = 20.0
SPINE_LEAF = f"""\
name: cli-spine-leaf
fabric:
  topology: spine-leaf
  spines: 2
  leaves: 2
  hosts_per_leaf: 2
  host_link: {{rate: {RATE_MBIT:g}Mbit, buffer: 200KB, mtu: 1500}}
  ecmp: {{hash: l4, seed: 1}}
workload:
  - {{kind: iperf, name: pair, src: l1h1, dst: l2h1, duration: 2}}
duration: 10s
telemetry: {{queue_hz: 50}}
"""


def _ours(prefix: str) -> list[str]:
    return [ns for ns in list_netns() if ns.startswith(prefix + "-")]


def _spawn(tmp_path: Path, text: str) -> tuple[pexpect.spawn, str]:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(text)
    child = pexpect.spawn(
        "/usr/bin/python3", ["-m", "testbed", "cli", str(scenario), "-o", str(tmp_path / "runs")],
        cwd=str(ROOT), encoding="utf-8", timeout=60, dimensions=(50, 200),
    )  # fmt: skip
    child.expect(r"fabric (tb[0-9a-z]+): ")
    prefix = child.match.group(1)
    child.expect_exact(PROMPT)
    return child, prefix


def _cmd(child: pexpect.spawn, line: str, timeout: float = 60) -> str:
    """Type one command; its output (up to the next prompt)."""
    child.sendline(line)
    child.expect_exact(PROMPT, timeout=timeout)
    out = str(child.before)
    return out.split("\n", 1)[1] if "\n" in out else ""  # drop the echoed command line


@pytest.fixture(scope="module")
def spine_leaf(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[pexpect.spawn, str, Path]]:
    tmp = tmp_path_factory.mktemp("cli-sl")
    child, prefix = _spawn(tmp, SPINE_LEAF)
    try:
        yield child, prefix, tmp
    finally:
        child.sendline("exit")
        child.expect(pexpect.EOF, timeout=60)
        child.close()
    assert child.exitstatus == 0, child.before
    assert not _ours(prefix)


def test_node_commands_print_their_output(spine_leaf) -> None:  # type: ignore[no-untyped-def]
    child, _, _ = spine_leaf
    assert "hello" in _cmd(child, "l1h1 echo hello")
    out = _cmd(child, "l1h1 ping -c 1 l2h1")  # a node name becomes its address, as in Mininet
    assert " 0% packet loss" in out, out
    assert "10.0.0.0" not in _cmd(child, "s1 ip -br addr")  # a router answers too


def test_mininet_commands_see_the_routed_fabric(spine_leaf) -> None:  # type: ignore[no-untyped-def]
    child, _, _ = spine_leaf
    nodes = _cmd(child, "nodes")
    assert all(n in nodes for n in ("l1h1", "l2h2", "l1", "s2")), nodes
    net = _cmd(child, "net")
    assert re.search(r"l1h1 l1h1-l1:l1-l1h1", net), net
    links = _cmd(child, "links")
    assert "l1-l1h1<->l1h1-l1 (OK OK)" in links and "s2-l2<->l2-s2 (OK OK)" in links, links
    dump = _cmd(child, "dump")
    assert re.search(r"<Host l1h1: l1h1-l1:10\.\d+\.\d+\.\d+ pid=\d+>", dump), dump
    ping = _cmd(child, "pingall")
    assert "Results: 0% dropped (12/12 received)" in ping, ping  # 4 hosts, each to the 3 others
    assert "0% dropped" in _cmd(child, "pingpair")
    assert "hello-sh" in _cmd(child, "sh echo hello-sh")


def test_iperf_reaches_the_link_rate(spine_leaf) -> None:  # type: ignore[no-untyped-def]
    child, _, _ = spine_leaf
    out = _cmd(child, "iperf l1h1 l2h1", timeout=60)
    rates = [float(x) for x in re.findall(r"'([\d.]+) Mbits/sec'", out)]
    assert len(rates) == 2, out
    payload = RATE_MBIT * (1500 - 52) / (1500 + 14)  # TCP payload at the shaped rate
    assert all(abs(r - payload) <= 0.1 * payload for r in rates), (rates, payload)


def test_a_failing_command_leaves_the_prompt_and_the_fabric(spine_leaf) -> None:  # type: ignore[no-untyped-def]
    child, prefix, _ = spine_leaf
    assert "*** error" in _cmd(child, "path l1h1 nosuchhost")
    assert "*** error" in _cmd(child, "tc nosuchport")
    assert "Unknown command" in _cmd(child, "frobnicate")
    assert "hello" in _cmd(child, "l2h2 echo hello")
    assert _ours(prefix)


def test_testbed_commands(spine_leaf) -> None:  # type: ignore[no-untyped-def]
    child, _, tmp = spine_leaf
    for name in ("queues", "path", "tc", "run", "report"):
        assert name in _cmd(child, f"help {name}").split()[0], name
    path = _cmd(child, "path l1h1 l2h1 40000 5201")
    assert re.search(r"l1h1 -> l1 -> s[12] -> l2 -> l2h1 +\(spine s[12]\)", path), path
    assert "no spine" in _cmd(child, "path l1h1 l1h2")
    tc = _cmd(child, "tc l1:l1-s1")
    assert "qdisc htb 1: root" in tc and "class htb" in tc, tc
    started = _cmd(child, "run pair")
    assert "job pair started" in started, started
    child.expect(r"job pair: complete[^\n]*\n", timeout=90)  # the job's thread prints it after a prompt
    queues = _cmd(child, "queues 3")
    lines = queues.strip().splitlines()
    assert lines[0].split()[:2] == ["port", "backlog"] and len(lines) == 4, queues
    sent = {ln.split()[0]: int(ln.split()[-1]) for ln in lines[1:]}
    assert all(v >= 0 for v in sent.values())
    report = _cmd(child, "report", timeout=120)
    assert "report.html" in report, report
    (record,) = [p.parent for p in (tmp / "runs").glob("*/manifest.json")]
    assert (record / "summary.json").exists() and list((tmp / "runs").glob("**/report.html"))
