"""The whole capability probe: the host's trials, and in the same scratch namespace the ECN marking and DCTCP
implementations' (``testbed.ecn.probe``). The host layer cannot ask testbed.ecn, which sits above it, so the
fabric, the lowest layer that needs both, joins them."""

from __future__ import annotations

from typing import Any

from testbed.host import probe as host_probe
from testbed.host.capabilities import Capabilities


def probe() -> Capabilities:
    """Try every capability. Needs root for the namespace trials (without it they stay unknown)."""
    return host_probe.probe(netns_trials=(probe_ecn,))


def probe_ecn(results: dict[str, Any], netns: str) -> None:
    """Which ECN marking and DCTCP implementations this machine will use (testbed.ecn decides)."""
    try:
        from testbed import ecn  # its BPF tooling may be missing: doctor says so instead of failing
    except ImportError as exc:
        results["ecn"] = {"marking_auto": None, "error": f"testbed.ecn failed to import: {exc}"}
        return
    results["ecn"] = ecn.probe(netns)
