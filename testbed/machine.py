"""What this machine can do, as a run records it and doctor prints it: the capability probe
(``testbed.fabric.probe``) plus the CPU cost calibration's status (``testbed.calibrate.cache``).

The calibration sits above the fabric it measures, so the probe cannot read it; this module joins the two. It also
makes the machine a point is planned for (``here``: a ``testbed.host.machine.Machine``): the entries (the CLI, the
API, the test harness, the benches) read their environment once, pass it to ``here`` and hand the value down, so
that nothing below them reads the environment.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from testbed.calibrate import cache
from testbed.fabric import probe as fabric_probe
from testbed.host import capabilities
from testbed.host.capabilities import Capabilities
from testbed.host.machine import GUEST_PREFIX, Machine


def probe() -> Capabilities:
    """``testbed.fabric.probe.probe()`` with ``calibration``: this machine's calibration, or why there is none."""
    return dataclasses.replace(fabric_probe.probe(), calibration=cache.status())


def here(env: Mapping[str, str]) -> Machine:
    """This machine: the probe (with the calibration's status) and the context ``env`` (the entry's environment)
    gives."""
    return Machine.from_env(probe(), env)


def with_caps(caps: Capabilities, env: Mapping[str, str]) -> Machine:
    """The machine with these capabilities (assumed, or probed already) in the context ``env`` gives."""
    return Machine.from_env(caps, env)


def in_guest(env: Mapping[str, str]) -> bool:
    """Whether ``env`` (the entry's environment) says the guest-kernel mode (``testbed vm``), without probing."""
    return bool(env.get(GUEST_PREFIX))


def doctor_rows(caps: Capabilities) -> list[tuple[str, str, str, str]]:
    """doctor's table: the capabilities' rows, then the calibration's when ``caps`` has it."""
    rows = capabilities.doctor_rows(caps)
    rows.append(queue_telemetry_row())
    if caps.calibration is not None:
        rows.append(("CPU cost calibration", *cache.describe_status(dict(caps.calibration))))
    return rows


def queue_telemetry_row() -> tuple[str, str, str, str]:
    """Which queue telemetry a run can use here: the kernel's (``telemetry.bpf_queues``) beside the poller, or the
    poller alone and why."""
    from testbed.telemetry.qtelem import availability

    why = availability()
    if why is None:
        return ("Kernel queue telemetry (telemetry.bpf_queues)", "yes", "", "")
    return (
        "Kernel queue telemetry (telemetry.bpf_queues)",
        "MISSING",
        f"queues are polled only (1 kHz netlink): {why}",
        "Linux with BTF and tp_btf, libbpf1, clang; python3 -m testbed.bpf.build",
    )
