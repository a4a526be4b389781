"""The one error type of testbed.bpf: a BPF tool, object or system call this machine cannot provide."""

from __future__ import annotations

from testbed.errors import TestbedError


class BpfError(TestbedError, RuntimeError):
    """Raised with the reason and, where there is one, how to get the missing tool or object."""
