"""Sweeps on a Dask cluster: ``testbed scheduler``, ``testbed worker ADDRESS`` and ``testbed run --cluster``.

One emulation per machine stays the rule (the run lock): a worker has one ``fabric`` resource and runs one point at
a time. The client submits every point and repetition as a task carrying only scenario data, and writes the records
the workers return exactly where a local run would. Dask schedules, retries work lost with a worker, and secures
the connections (TLS); nothing here is a scheduler of its own.
"""
