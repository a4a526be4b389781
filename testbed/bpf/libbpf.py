"""libbpf (``libbpf.so.1``, from libbpf-dev's libbpf1) over ctypes: no Python binding of libbpf is packaged for
Debian 12. The kernel telemetry and the PFC controller load their objects through it."""

from __future__ import annotations

import ctypes

# the ring buffer's sample callback: (ctx, data, size) -> 0 to go on
RingCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


def open_libbpf() -> ctypes.CDLL:
    """libbpf with the argument and result types of the functions used here; OSError when it is not installed."""
    lib = ctypes.CDLL("libbpf.so.1", use_errno=True)
    vp, cp, i = ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int
    for name, res, args in (
        ("bpf_object__open_file", vp, [cp, vp]),
        ("bpf_object__load", i, [vp]),
        ("bpf_object__close", None, [vp]),
        ("bpf_object__find_map_by_name", vp, [vp, cp]),
        ("bpf_object__find_program_by_name", vp, [vp, cp]),
        ("bpf_map__set_max_entries", i, [vp, ctypes.c_uint32]),
        ("bpf_program__set_autoload", i, [vp, ctypes.c_bool]),
        ("bpf_map__fd", i, [vp]),
        ("bpf_program__attach", vp, [vp]),
        ("bpf_link__destroy", i, [vp]),
        ("libbpf_get_error", ctypes.c_long, [vp]),
        ("bpf_map_update_elem", i, [i, vp, vp, ctypes.c_uint64]),
        ("bpf_map_lookup_elem", i, [i, vp, vp]),
        ("libbpf_set_print", vp, [vp]),
        ("ring_buffer__new", vp, [i, RingCallback, vp, vp]),
        ("ring_buffer__poll", i, [vp, i]),
        ("ring_buffer__free", None, [vp]),
    ):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = res, args
    lib.libbpf_set_print(None)  # its warnings go nowhere; failures come back as errno
    return lib
