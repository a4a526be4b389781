"""Pick the marking implementation for a port and the tc arguments of its leaf qdisc."""

from __future__ import annotations

from typing import Literal

from testbed.ecn.errors import EcnError
from testbed.ecn.red import red_args, red_params
from testbed.host.capabilities import Capabilities
from testbed.spec.link import LinkSpec, Marking

Impl = Literal["kernel", "bpf"]


def choose_impl(marking: Marking, caps: Capabilities) -> Impl:
    """auto -> kernel if sch_red exists, else bpf; an explicit impl that is unavailable raises EcnError.

    ``caps.ecn`` holds ``sch_red`` / ``bpf_marker`` and ``sch_red_reason`` / ``bpf_marker_reason`` (why not), as
    ``testbed.ecn.probe`` found them. Drop-tail needs no marker: ``kernel`` (a plain fifo) unless bpf was asked.
    """
    c = caps.ecn
    red_ok, bpf_ok = bool(c.sch_red), bool(c.bpf_marker)
    red_why = c.sch_red_reason or "sch_red is not in this kernel"
    bpf_why = c.bpf_marker_reason or "the eBPF marker cannot be loaded here"
    if marking.mode == "off":
        return "bpf" if marking.impl == "bpf" else "kernel"
    if marking.impl == "kernel":
        if not red_ok:
            raise EcnError(
                f"ecn impl 'kernel' needs sch_red: {red_why}; use impl 'bpf' (or 'auto') on this kernel, or run on "
                "a stock Debian/Ubuntu kernel (it has sch_red), e.g. the guest-kernel mode"
            )
        return "kernel"
    if marking.impl == "bpf":
        if not bpf_ok:
            raise EcnError(
                f"ecn impl 'bpf' unavailable: {bpf_why}; it needs Linux >= 6.2 with BTF, clang, libbpf-dev and "
                "bpftool (apt), and the program built by `python3 -m testbed.bpf.build`"
            )
        return "bpf"
    if red_ok:
        return "kernel"
    if bpf_ok:
        return "bpf"
    raise EcnError(f"no ECN marking implementation here: {red_why}; and {bpf_why}")


def class_impl(marking: Marking, caps: Capabilities, lossless: bool) -> Impl:
    """A traffic class's marking implementation: as ``choose_impl``, except that a lossless class's queue is a tbf
    (testbed.fabric.tc.pause_leaf), which kernel RED cannot be: it needs the eBPF marker, which reads the class's
    own queue."""
    if not lossless:
        return choose_impl(marking, caps)
    if marking.impl == "kernel":
        raise EcnError("a lossless class queues in a tbf, so kernel RED cannot mark it: use ecn impl 'bpf' or 'auto'")
    if not caps.ecn.bpf_marker:
        why = caps.ecn.bpf_marker_reason or "the eBPF marker cannot be loaded here"
        raise EcnError(f"a lossless class marks with the eBPF marker only (its queue is a tbf), and {why}")
    return "bpf"


def fifo_args(link: LinkSpec) -> list[str]:
    """Drop-tail leaf: pfifo when the buffer is given in packets, else bfifo in bytes."""
    if link.buffer.unit == "packets":
        return ["pfifo", "limit", str(link.buffer.value)]
    return ["bfifo", "limit", str(link.buffer_bytes)]


def leaf_qdisc_args(marking: Marking, link: LinkSpec, impl: Impl) -> list[str]:
    """tc arguments after ``parent 1:1 handle 10:``: a fifo (drop-tail or under the eBPF marker) or ``red ...``."""
    if marking.mode == "off" or impl == "bpf":
        return fifo_args(link)
    if impl == "kernel":
        return red_args(red_params(marking, link))
    raise ValueError(f"unknown marking implementation {impl!r}")
