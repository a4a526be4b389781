"""``testbed calibrate``: measure this machine's CPU cost of forwarding and of the queue sampler, once, and cache it.

The preflight (``testbed.preflight``) predicts a point's load with the coefficients measured here, while the
kernel, CPU count and CPU model match; a run without a calibration uses the built-in constants and says so.

The modules: ``cpu`` (the machine's busy core-seconds over a window, other processes' apart), ``rig`` (the
calibration fabric, its ports and counters, the queue sampler on it), ``trials`` (the traffic and idle windows,
and ``measure``: all of them, then the fit), ``fit`` (the least-squares fit, pure), ``record`` (``Calibration``,
the machine it is valid for, its JSON form), ``cache`` (the cached file and its status for doctor) and ``cli``
(``main``: measure, ``--show``, ``--predict``).
"""

from testbed.calibrate.cache import CACHE, describe_status, load, load_matching, save, status
from testbed.calibrate.cli import format_calibration, format_predictions, main, predict_rows
from testbed.calibrate.cpu import CLK_TCK, PF_KTHREAD, CpuWindow, settle
from testbed.calibrate.fit import calibration_from, fit_forwarding, fit_sampler
from testbed.calibrate.record import (
    FORMAT,
    REPO,
    Calibration,
    CalibrationError,
    ForwardingSample,
    Machine,
    SamplerSample,
    cpu_model,
    git_revision,
)
from testbed.calibrate.rig import SAMPLER_CPU_HZ, SAMPLER_HZ, SAMPLER_LINK_HZ, fabric_spec_dict
from testbed.calibrate.trials import (
    BUSY_WARN,
    FOREIGN_WARN,
    IDLE_S,
    OMIT_S,
    PLAN,
    PORT,
    SUBSET_NAMESPACES,
    WINDOW_S,
    measure,
    ring_flows,
)

__all__ = [
    "BUSY_WARN",
    "CACHE",
    "CLK_TCK",
    "FOREIGN_WARN",
    "FORMAT",
    "IDLE_S",
    "OMIT_S",
    "PF_KTHREAD",
    "PLAN",
    "PORT",
    "REPO",
    "SAMPLER_CPU_HZ",
    "SAMPLER_HZ",
    "SAMPLER_LINK_HZ",
    "SUBSET_NAMESPACES",
    "WINDOW_S",
    "Calibration",
    "CalibrationError",
    "CpuWindow",
    "ForwardingSample",
    "Machine",
    "SamplerSample",
    "calibration_from",
    "cpu_model",
    "describe_status",
    "fabric_spec_dict",
    "fit_forwarding",
    "fit_sampler",
    "format_calibration",
    "format_predictions",
    "git_revision",
    "load",
    "load_matching",
    "main",
    "measure",
    "predict_rows",
    "ring_flows",
    "save",
    "settle",
    "status",
]
