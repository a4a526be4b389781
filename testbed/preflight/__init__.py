"""Pre-flight estimate: will this machine keep up with a scenario's offered load? (pure; before anything is built)

``estimate(fabric_spec, workload, caps, model, telemetry) -> Estimate`` gives the numbers; ``preflight(...)`` the
warnings (empty = fits); ``check_budget(point, caps)`` / ``require_budget(point, caps)`` compare a scenario point's
predicted CPU load with the budget and refuse a point over it with ``BudgetError``. ``manifest_entry(...)`` is what
a run records under ``preflight``.

The modules: ``flows`` (the flows a workload keeps busy and the veths they cross), ``timeline`` (which jobs may
send at the same time), ``model`` (the cost coefficients, ``CostModel``, and what forwarding and the queue sampler
cost under them), ``load`` (a workload's predicted load, ``estimate``, and its warnings), ``labels`` (a point as
the user knows it) and ``budget`` (the budget, the refusal and the highest host-link rate that fits). The names
here are re-exported; a switch such as ``ENFORCE_UNCALIBRATED`` is read where it is defined
(``testbed.preflight.budget``), so that is where to change it.
"""

from testbed.preflight.budget import (
    BUDGET_ENV,
    CPU_BUDGET,
    ENFORCE_UNCALIBRATED,
    PEAK_LIMIT,
    BudgetError,
    BudgetVerdict,
    check_budget,
    cpu_budget,
    manifest_entry,
    max_host_rate,
    require_budget,
    within,
)
from testbed.preflight.flows import Flow, job_flows, resolve_ranks, routers_between
from testbed.preflight.labels import point_label, variant_text
from testbed.preflight.load import LOAD_WARN, Estimate, estimate, preflight
from testbed.preflight.model import (
    ACK_FRAME,
    ACKS_PER_DATA,
    COST_PER_BYTE_S,
    COST_PER_PACKET_S,
    ETH_HEADER,
    FALLBACK,
    KEYFRAME_S,
    SAMPLER_PER_NETNS_S,
    SAMPLER_PER_ROW_S,
    SAMPLER_PER_TICK_S,
    CostModel,
    current_model,
    forwarding_core_s,
    sampler_core_s,
    sampler_rows_per_s,
)
from testbed.preflight.timeline import intervals, job_span, phases

__all__ = [
    "ACKS_PER_DATA",
    "ACK_FRAME",
    "BUDGET_ENV",
    "COST_PER_BYTE_S",
    "COST_PER_PACKET_S",
    "CPU_BUDGET",
    "ENFORCE_UNCALIBRATED",
    "ETH_HEADER",
    "FALLBACK",
    "KEYFRAME_S",
    "LOAD_WARN",
    "PEAK_LIMIT",
    "SAMPLER_PER_NETNS_S",
    "SAMPLER_PER_ROW_S",
    "SAMPLER_PER_TICK_S",
    "BudgetError",
    "BudgetVerdict",
    "CostModel",
    "Estimate",
    "Flow",
    "check_budget",
    "cpu_budget",
    "current_model",
    "estimate",
    "forwarding_core_s",
    "intervals",
    "job_flows",
    "job_span",
    "manifest_entry",
    "max_host_rate",
    "phases",
    "point_label",
    "preflight",
    "require_budget",
    "resolve_ranks",
    "routers_between",
    "sampler_core_s",
    "sampler_rows_per_s",
    "variant_text",
    "within",
]
