"""The one error type of testbed.pfc."""

from __future__ import annotations

from testbed.errors import TestbedError


class PfcError(TestbedError, RuntimeError):
    """The PFC controller cannot run: the object, the kernel's tracepoints, a port, or a refused change."""
