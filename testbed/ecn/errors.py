"""The one error type of testbed.ecn: a marking or congestion-control setting this machine cannot carry out."""

from __future__ import annotations

from testbed.errors import TestbedError


class EcnError(TestbedError, RuntimeError):
    """Raised with the reason and, where there is one, how to get the missing capability."""
