"""Work inside a named namespace without a process per command (testbed.host.netns): the parts that need no
root. The build's and teardown's use of it runs as root in tests/root/test_fabric.py and test_cleanup.py."""

from __future__ import annotations

import fnmatch

import pytest

from testbed.host import netns

SOCKSTAT = """sockets: used 9
TCP: inuse 2 orphan 7 tw 3 alloc 12 mem 233
UDP: inuse 1 mem 0
"""


def test_tcp_sockets_are_the_namespaces_own_in_use_and_time_wait_counts() -> None:
    assert netns.tcp_in_use(SOCKSTAT) == 5  # orphan and alloc are machine-wide: not this namespace's
    assert netns.tcp_in_use(SOCKSTAT + "TCP6: inuse 4\n") == 9
    assert netns.tcp_in_use("TCP: inuse 0 orphan 3 tw 0 alloc 3 mem 1\nTCP6: inuse 0\n") == 0


# the kernel's feature names on 6.18: a newer TSO flavour (tx-tcp-accecn-segmentation) goes off with the others
FEATURES = ["rx-gro", "rx-gro-hw", "rx-gro-list", "tx-generic-segmentation", "tx-tcp-segmentation",
            "tx-tcp-ecn-segmentation", "tx-tcp-mangleid-segmentation", "tx-tcp6-segmentation",
            "tx-tcp-accecn-segmentation", "tx-udp-segmentation", "tx-gre-segmentation"]  # fmt: skip


def test_offload_groups_name_what_ethtool_turns_off() -> None:
    off = {n for n in FEATURES for p in netns.OFFLOAD_GROUPS.values() if fnmatch.fnmatchcase(n, p)}
    assert off == {"rx-gro", "tx-generic-segmentation", "tx-tcp-segmentation", "tx-tcp-ecn-segmentation",
                   "tx-tcp-mangleid-segmentation", "tx-tcp6-segmentation", "tx-tcp-accecn-segmentation"}  # fmt: skip


def test_a_namespace_that_does_not_exist_is_one_error_naming_it() -> None:
    with pytest.raises(netns.NetnsError, match="tbzz-none"):
        netns.in_netns("tbzz-none", lambda: None)
    assert netns.holders(["tbzz-none"]) == {}


def test_deleting_a_namespace_that_was_never_attached_is_not_an_error() -> None:
    """A build interrupted between writing a name down and attaching it leaves a name with no namespace."""
    from testbed.host.ownership import delete_namespaces

    delete_namespaces(["tbzz-never-attached"], wait_s=0.0)
