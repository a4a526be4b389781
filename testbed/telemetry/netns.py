"""Run a function inside a named network namespace without moving the caller.

setns(2) moves only the calling thread, so the work is done in a short-lived helper thread that enters
``/run/netns/NAME``: whatever happens there, the caller's own thread never changes namespace. Sockets created
there stay bound to that namespace after the thread ends; files under /proc/thread-self/net show that
namespace's view. Python 3.11 has no os.setns, hence ctypes.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from typing import TypeVar

from testbed.errors import TestbedError

CLONE_NEWNET = 0x40000000
NETNS_DIR = "/run/netns"
T = TypeVar("T")

_libc = ctypes.CDLL(None, use_errno=True)


class NetnsError(TestbedError, OSError):
    """A named namespace that does not exist or cannot be entered."""


def netns_path(name: str) -> str:
    if not name or "/" in name:
        raise NetnsError(f"bad namespace name {name!r}")
    return os.path.join(NETNS_DIR, name)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


def run_in_netns(name: str | None, fn: Callable[[], T], timeout: float = 10.0) -> T:
    """Call ``fn()`` in a helper thread inside namespace ``name`` (None: the caller's namespace) and return it.

    Raises NetnsError if the namespace is missing or setns fails; re-raises whatever ``fn`` raised.
    """
    if name is None:
        return fn()
    path = netns_path(name)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise NetnsError(exc.errno, f"network namespace {name!r} not found ({path}): {exc.strerror}") from None
    result: list[T] = []
    error: list[BaseException] = []

    def body() -> None:
        try:
            _setns(fd)
        except OSError as exc:
            error.append(NetnsError(exc.errno, f"cannot enter network namespace {name!r}: {exc.strerror}"))
            return
        try:
            result.append(fn())
        except BaseException as exc:
            error.append(exc)

    try:
        th = threading.Thread(target=body, name=f"netns-{name}", daemon=True)
        th.start()
        th.join(timeout)
        if th.is_alive():
            raise TimeoutError(f"work inside namespace {name!r} did not finish within {timeout:g} s")
    finally:
        os.close(fd)
    if error:
        raise error[0]
    return result[0]


def read_proc_net(name: str | None, files: tuple[str, ...]) -> dict[str, str]:
    """Read /proc/net/<file> as namespace ``name`` sees it -> {file: text}."""

    def read() -> dict[str, str]:
        out = {}
        for f in files:
            with open(f"/proc/thread-self/net/{f}") as fh:
                out[f] = fh.read()
        return out

    return run_in_netns(name, read)
