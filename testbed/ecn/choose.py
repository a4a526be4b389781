"""Pick the marking implementation for a port and the tc arguments of its leaf qdisc."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from testbed.ecn.errors import EcnError
from testbed.ecn.red import red_args, red_params
from testbed.spec import LinkSpec, Marking

Impl = Literal["kernel", "bpf"]


def _ecn_caps(caps: Mapping[str, Any]) -> Mapping[str, Any]:
    """Accept probe()'s dict flat or nested under caps["ecn"] (as the capability probe may store it)."""
    inner = caps.get("ecn")
    return inner if isinstance(inner, Mapping) else caps


def choose_impl(marking: Marking, caps: Mapping[str, Any]) -> Impl:
    """auto -> kernel if sch_red exists, else bpf; an explicit impl that is unavailable raises EcnError.

    ``caps`` holds ``sch_red`` / ``bpf_marker`` (bools) and ``sch_red_reason`` / ``bpf_marker_reason`` (why not),
    as ``testbed.ecn.probe`` returns them. Drop-tail needs no marker: ``kernel`` (a plain fifo) unless bpf was asked.
    """
    c = _ecn_caps(caps)
    red_ok, bpf_ok = bool(c.get("sch_red")), bool(c.get("bpf_marker"))
    red_why = c.get("sch_red_reason") or "sch_red is not in this kernel"
    bpf_why = c.get("bpf_marker_reason") or "the eBPF marker cannot be loaded here"
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
                "bpftool (apt), and the program built by `python3 -m testbed.ecn.build`"
            )
        return "bpf"
    if red_ok:
        return "kernel"
    if bpf_ok:
        return "bpf"
    raise EcnError(f"no ECN marking implementation here: {red_why}; and {bpf_why}")


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
