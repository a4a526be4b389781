"""Work inside a run's named network namespaces without a process per command.

A fabric's build wrote each namespace's sysctls, and turned off each port's offloads, with one `ip netns exec`
process per command: 236 processes of 2-4 ms each for a 4x8x4 fabric, a third of its build. Here a short-lived
thread enters the namespace (``setns(2)`` through pyroute2, which moves only the calling thread) and does the
same work with system calls: /proc/sys/net resolves to the namespace of the thread that opens it, and an ethtool
ioctl acts on the namespace of the socket it is sent on. The thread ends with the work, so no other code ever runs
in a namespace it did not ask for.

Teardown reads which processes hold each namespace from /proc once for all of them (``holders``), where
`ip netns pids` scanned /proc once per namespace and per poll.
"""

from __future__ import annotations

import fnmatch
import os
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from testbed.errors import TestbedError

T = TypeVar("T")
NETNS_DIR = Path("/run/netns")
# ethtool's own names for the offload groups the fabric turns off (ethtool.c, off_flag_def): a group is every
# feature of the kernel's string set whose name matches, so a kernel's new TSO flavour goes off with the others
OFFLOAD_GROUPS = {"gro": "rx-gro", "tso": "tx-tcp*-segmentation", "gso": "tx-generic-segmentation"}


class NetnsError(TestbedError, OSError):
    """Work inside a namespace failed: the namespace, the step and the kernel's reason."""


def in_netns(netns: str, work: Callable[[], T]) -> T:
    """``work()``'s result, run in a new thread that entered the named namespace first; its exception re-raised."""
    out: list[T] = []
    err: list[BaseException] = []

    def enter_and_work() -> None:
        from pyroute2.netns import setns

        try:
            setns(netns, flags=0)  # flags 0: never create it
            out.append(work())
        except BaseException as exc:  # handed to the caller's thread
            err.append(exc)

    t = threading.Thread(target=enter_and_work, name=f"netns-{netns}", daemon=True)
    t.start()
    t.join()
    if err:
        if isinstance(err[0], NetnsError):
            raise err[0]
        raise NetnsError(f"in network namespace {netns}: {err[0]}") from err[0]
    return out[0]


def write_sysctls(values: Mapping[str, str]) -> None:
    """Write each sysctl of the calling thread's namespace (call it through ``in_netns``)."""
    for key, value in values.items():
        try:
            Path("/proc/sys", *key.split(".")).write_text(value)
        except OSError as exc:
            raise NetnsError(f"cannot set {key}={value}: {exc.strerror or exc}") from None


def offloads_off(devs: Iterable[str], groups: Sequence[str] = ("gro", "tso", "gso")) -> None:
    """Turn off the named offload groups (ethtool's ``-K DEV gro off tso off gso off``) on each device of the
    calling thread's namespace."""
    from pyroute2.ethtool.ioctl import IoctlEthtool

    patterns = [OFFLOAD_GROUPS[g] for g in groups]
    for dev in devs:
        eth = IoctlEthtool(dev)
        try:
            features = eth.get_features()
            for name, _on, changeable, *_ in features:  # (name, value, available, word, bit)
                if changeable and any(fnmatch.fnmatchcase(name, p) for p in patterns):
                    features.set_value(name, False)
            eth.set_features(features)
        except OSError as exc:
            raise NetnsError(f"cannot turn off {', '.join(groups)} on {dev}: {exc}") from None
        finally:
            eth.sock.close()


def configure(netns: str, sysctls: Mapping[str, str], offload_devs: Iterable[str] = ()) -> None:
    """One namespace's sysctls and its ports' offloads, in one thread inside it."""
    devs = list(offload_devs)

    def work() -> None:
        write_sysctls(sysctls)
        offloads_off(devs)

    in_netns(netns, work)


def tcp_in_use(sockstat: str) -> int:
    """TCP sockets of a namespace from its sockstat text (sockstat and sockstat6 together): ``inuse`` (every hashed
    socket, an orphan's too) and ``tw`` (time-wait), both counted per namespace."""
    n = 0
    for line in sockstat.splitlines():
        head, *fields = line.split()
        if head in ("TCP:", "TCP6:"):
            vals = dict(zip(fields[::2], fields[1::2], strict=False))
            n += int(vals.get("inuse", 0)) + int(vals.get("tw", 0))
    return n


def has_tcp_sockets(netns: str) -> bool:
    """Whether the namespace holds any TCP socket (listening, open, orphaned or in time-wait): its sockstat counters,
    read from a thread inside it (/proc/net/tcp would walk the whole shared hash table: 8 ms a namespace)."""

    def work() -> bool:
        text = ""
        for name in ("sockstat", "sockstat6"):
            try:
                text += Path("/proc/thread-self/net", name).read_text()
            except FileNotFoundError:  # no IPv6 in this kernel
                continue
        return tcp_in_use(text) > 0

    return in_netns(netns, work)


def _inode(path: Path) -> int | None:
    try:
        return os.stat(path).st_ino
    except OSError:
        return None


def holders(names: Iterable[str]) -> dict[str, list[int]]:
    """Name -> the processes whose network namespace is that named namespace, from one pass over /proc."""
    by_inode = {ino: name for name in names if (ino := _inode(NETNS_DIR / name)) is not None}
    out: dict[str, list[int]] = {name: [] for name in by_inode.values()}
    if not by_inode:
        return out
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            name = by_inode.get(_inode(Path(entry.path, "ns", "net")) or -1)
            if name is not None:
                out[name].append(int(entry.name))
    return out


def remove(netns: str) -> None:
    """Delete a named namespace (detach its mount, unlink its name), as `ip netns delete` does."""
    from pyroute2.netns import remove as pyroute2_remove

    try:
        pyroute2_remove(netns)
    except FileNotFoundError:
        pass
