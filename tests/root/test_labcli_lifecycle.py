"""`python3 -m testbed cli` on a fat-tree, and its lifecycle: a closed terminal (SIGHUP) tears the fabric down.

(Apart from tests/root/test_labcli.py, whose spine-leaf CLI stays open for its module: one fabric at a time.)
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testbed.host.waiting import wait_until
from tests.root.hoststate import procs_in_other_netns
from tests.root.test_labcli import SPINE_LEAF, _cmd, _ours, _spawn

pexpect = pytest.importorskip("pexpect", reason="python3-pexpect is not installed (setup.sh installs it)")

FAT_TREE = """\
name: cli-fat-tree
fabric:
  topology: fat-tree
  k: 4
  host_link: {rate: 20Mbit, buffer: 200KB, mtu: 1500}
workload: []
duration: 10s
"""


def test_fat_tree(tmp_path: Path) -> None:
    child, prefix = _spawn(tmp_path, FAT_TREE)
    try:
        assert "Results: 0% dropped (240/240 received)" in _cmd(child, "pingall", timeout=180)
        path = _cmd(child, "path p1e1h1 p4e2h2")
        assert re.search(r"p1e1h1 -> p1e1 -> p1a\d -> c\d+ -> p4a\d -> p4e2 -> p4e2h2  \(spine c\d+\)", path), path
        out = _cmd(child, "iperf p1e1h1 p4e2h2")
        assert len(re.findall(r"Mbits/sec", out)) == 2, out
    finally:
        child.sendline("exit")
        child.expect(pexpect.EOF, timeout=60)
        child.close()
    assert not _ours(prefix)


def test_closing_the_terminal_tears_the_fabric_down(tmp_path: Path) -> None:
    before = set(procs_in_other_netns())
    child, prefix = _spawn(tmp_path, SPINE_LEAF)
    shells = set(procs_in_other_netns()) - before  # the nodes' shells
    assert _ours(prefix) and shells
    child.ptyproc.fileobj.close()  # the terminal goes away: the kernel hangs up the CLI's session (SIGHUP)
    wait_until(lambda: not child.isalive() and not _ours(prefix), 60, "the CLI to tear its fabric down")
    child.close()
    assert not Path(f"/run/testbed/{prefix}.json").exists()
    assert not shells & set(procs_in_other_netns())


def test_signals_after_the_hangup_do_not_cut_the_teardown_short(tmp_path: Path) -> None:
    """pexpect's close follows SIGHUP with SIGCONT and SIGINT 0.1 s apart; in CI11 a CLI so closed was still up
    60 s later (here a second signal during the teardown could cut it short). The first signal now makes the CLI
    ignore the rest. A race: here this passed with and without that fix (the teardown took under 0.2 s)."""
    child, prefix = _spawn(tmp_path, SPINE_LEAF)
    child.terminate(force=False)  # SIGHUP, SIGCONT, SIGINT, 0.1 s apart, as pexpect's close sends them
    child.expect(pexpect.EOF, timeout=60)  # reads what it prints meanwhile: its terminal is still open here
    wait_until(lambda: not child.isalive() and not _ours(prefix), 60, "the CLI to tear its fabric down")
    assert not Path(f"/run/testbed/{prefix}.json").exists()
    child.close()
