"""sysctls inside a run's namespaces (they go with the namespace). The one root-namespace sysctl a run changes,
the allowed congestion controls, is handled by testbed.ecn.cc (add what is missing, remove only what it added)."""

from __future__ import annotations

from testbed.host.procs import run_checked


def set_in_netns(netns: str, values: dict[str, str]) -> None:
    """Set sysctls inside a named namespace, all in one `sysctl` call; any failure raises with its message."""
    if values:
        run_checked(["ip", "netns", "exec", netns, "sysctl", "-q", "-w", *(f"{k}={v}" for k, v in values.items())])
