"""The spec layer: what a scenario file says, parsed into typed, frozen specs, before anything is built.

Modules: ``fields`` (the one vocabulary every spec parses with), ``units`` (rates, sizes, durations), ``link``
(a port's rate, buffer, marking; ECMP; transport), ``fabric`` (the fabric's shape and overrides), ``topology``
(the address plan and static routes: a pure function of the fabric spec), ``workload`` (one spec per job kind),
``scaling`` (``fabric.scale``), ``scenario`` (a scenario file, its sweep and points) and ``schemas`` (the record's
table columns). It imports nothing of the project but ``testbed.errors``.
"""
