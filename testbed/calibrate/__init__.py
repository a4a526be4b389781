"""``testbed calibrate``: measure this machine's CPU cost of forwarding and of the queue sampler, once, and cache it.

The preflight (``testbed.plan``) predicts a point's load with the coefficients measured here, while the
kernel, CPU count and CPU model match; a run without a calibration uses the built-in constants and says so.

The modules: ``cpu`` (the machine's busy core-seconds over a window, other processes' apart), ``rig`` (the
calibration fabric, its ports and counters, the queue sampler on it), ``trials`` (the traffic and idle windows,
and ``measure``: all of them, then the fit), ``fit`` (the least-squares fit, pure), ``record`` (``Calibration``,
the machine it is valid for, its JSON form), ``cache`` (the cached file and its status for doctor) and ``cli``
(``main``: measure, ``--show``, ``--predict``).
Import from the module that defines a name: the package imports nothing, so that the preflight can read the cache
without importing the fabric the trials build.
"""
