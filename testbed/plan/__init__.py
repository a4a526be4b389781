"""A scenario point's plan, made before anything is built (pure): will this machine keep up with its offered load,
does it fit the guest, and what each port gets.

``estimate(fabric_spec, workload, caps, model, telemetry) -> Estimate`` gives the numbers; ``preflight(...)`` the
warnings (empty = fits); ``check_budget(point, caps)`` / ``require_budget(point, caps)`` compare a scenario point's
predicted CPU load with the budget and refuse a point over it with ``BudgetError``. ``manifest_entry(...)`` is what
a run records under ``preflight``.

The modules: ``flows`` (the flows a workload keeps busy and the veths they cross), ``timeline`` (which jobs may
send at the same time), ``model`` (the cost coefficients, ``CostModel``, and what forwarding and the queue sampler
cost under them), ``load`` (a workload's predicted load, ``estimate``, and its warnings), ``labels`` (a point as
the user knows it), ``budget`` (the budget, the refusal and the highest host-link rate that fits), ``guestfit``
(what a software-emulated guest emulates faithfully), ``point`` (every refusal of a point as one ``SpecError``)
and ``text`` (a point's plan as text). Import a name from the module that defines it: the package re-exports
nothing, so that the calibration's record can use the cost model without importing the budget that reads the
calibration.
"""
