"""The few bpf(2) commands the marker needs, through ctypes: open a pinned map, look up and update an element.

Own code because neither pyroute2 nor scapy wraps bpf(2); a lookup costs a few microseconds, so reading every
port's counters at 1 kHz is cheap.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
from pathlib import Path

_SYS_BPF = {"x86_64": 321, "aarch64": 280}
BPF_MAP_LOOKUP_ELEM = 1
BPF_MAP_UPDATE_ELEM = 2
BPF_OBJ_GET = 7
ATTR_SIZE = 128  # larger than the fields we set; the kernel accepts a zero tail

_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


class _ObjGet(ctypes.Structure):
    _fields_ = [("pathname", ctypes.c_uint64), ("bpf_fd", ctypes.c_uint32), ("file_flags", ctypes.c_uint32)]


class _Elem(ctypes.Structure):
    _fields_ = [
        ("map_fd", ctypes.c_uint32),
        ("pad", ctypes.c_uint32),
        ("key", ctypes.c_uint64),
        ("value", ctypes.c_uint64),
        ("flags", ctypes.c_uint64),
    ]


def _bpf(cmd: int, attr: ctypes.Structure) -> int:
    nr = _SYS_BPF.get(platform.machine())
    if nr is None:
        raise OSError(f"bpf(2) syscall number unknown for {platform.machine()}")
    buf = ctypes.create_string_buffer(ATTR_SIZE)
    ctypes.memmove(buf, ctypes.addressof(attr), ctypes.sizeof(attr))
    ret = _libc.syscall(nr, cmd, buf, ATTR_SIZE)
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"bpf cmd {cmd}: {os.strerror(err)}")
    return int(ret)


def obj_get(path: Path) -> int:
    """An fd for a pinned BPF object (caller closes it with os.close)."""
    name = ctypes.create_string_buffer(os.fsencode(str(path)))
    return _bpf(BPF_OBJ_GET, _ObjGet(pathname=ctypes.addressof(name)))


def possible_cpus() -> int:
    """Number of possible CPUs: the stride of a per-CPU map value."""
    text = Path("/sys/devices/system/cpu/possible").read_text().strip()
    count = 0
    for part in text.split(","):
        lo, _, hi = part.partition("-")
        count += int(hi or lo) - int(lo) + 1
    return count


def lookup(fd: int, key: int, value_size: int) -> bytes:
    """Value bytes of a u32 key (per-CPU maps: value_size must be rounded-up size * possible CPUs)."""
    k = ctypes.c_uint32(key)
    v = ctypes.create_string_buffer(value_size)
    _bpf(BPF_MAP_LOOKUP_ELEM, _Elem(map_fd=fd, key=ctypes.addressof(k), value=ctypes.addressof(v)))
    return v.raw


def update(fd: int, key: int, value: bytes) -> None:
    k = ctypes.c_uint32(key)
    v = ctypes.create_string_buffer(value, len(value))
    _bpf(BPF_MAP_UPDATE_ELEM, _Elem(map_fd=fd, key=ctypes.addressof(k), value=ctypes.addressof(v)))
