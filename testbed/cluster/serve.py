"""``testbed scheduler`` and ``testbed worker``: thin wrappers over Dask's scheduler and nanny, and TLS options.

The scheduler binds to localhost unless told otherwise. A worker runs as root after probing the machine, with one
thread and one ``fabric`` resource, under a nanny that restarts it if it dies; it tells the client its capabilities,
calibration and git revision (a worker metric). TLS comes from the three options, or from Dask's own configuration
(``distributed.comm.tls.*``, e.g. in ~/.config/dask/distributed.yaml) when none is given. Both stop on Ctrl-C
or SIGTERM; a stopping worker's nanny ends the worker process, whose running point is interrupted and torn down.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from testbed.errors import TestbedError
from testbed.spec.fields import SpecError

from .task import worker_options

DEFAULT_PORT = 8786


def security(ca_file: str | None, cert: str | None, key: str | None) -> Any:
    """Dask Security: mutual TLS with one CA, certificate and key for every role when they are given, else Dask's
    configuration (no TLS unless it says so)."""
    from distributed.security import Security

    given = [x for x in (ca_file, cert, key) if x]
    if not given:
        return Security()
    if len(given) != 3:
        raise SpecError("--tls-ca-file/--tls-cert/--tls-key", "give all three (the CA, a certificate and its key)")
    return Security(
        tls_ca_file=ca_file,
        tls_client_cert=cert,
        tls_client_key=key,
        tls_scheduler_cert=cert,
        tls_scheduler_key=key,
        tls_worker_cert=cert,
        tls_worker_key=key,
        require_encryption=True,
    )


def protocol(sec: Any) -> str:
    return "tls" if sec.require_encryption else "tcp"


async def _until_finished_or_sigterm(server: Any) -> None:
    """Serve until the server finishes or SIGTERM (a service manager's stop) asks it to close."""
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    finished = asyncio.ensure_future(server.finished())
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait([finished, stopped], return_when=asyncio.FIRST_COMPLETED)
    for fut in (finished, stopped):
        fut.cancel()


async def _serve_scheduler(host: str, port: int, sec: Any) -> None:
    from distributed import Scheduler

    async with Scheduler(host=host, port=port, security=sec, protocol=protocol(sec), dashboard_address=None) as s:
        print(
            f"scheduler at {s.address}: start a worker per machine with `python3 -m testbed worker {s.address}`",
            flush=True,
        )
        await _until_finished_or_sigterm(s)


def scheduler_main(host: str, port: int, sec: Any) -> int:
    try:
        asyncio.run(_serve_scheduler(host, port, sec))
    except OSError as exc:
        raise TestbedError(f"scheduler {host}:{port}: {exc.strerror or exc}") from None
    return 0


async def _serve_worker(address: str, sec: Any, caps: dict[str, Any]) -> None:
    from distributed import Nanny

    async with Nanny(address, security=sec, **worker_options(caps)) as nanny:
        print(f"worker {nanny.worker_address} joined {address}; one point at a time (Ctrl-C stops it)", flush=True)
        await _until_finished_or_sigterm(nanny)


def worker_main(address: str, sec: Any) -> int:
    from testbed.machine import probe

    caps = probe()
    if not caps.root:
        raise TestbedError("a worker builds fabrics: run `python3 -m testbed worker` as root")
    cal = (caps.calibration or {}).get("status", "not calibrated")
    print(f"worker on kernel {caps.kernel}, {caps.cpus} CPUs, {cal}; joining {address}")
    try:
        asyncio.run(_serve_worker(address, sec, caps.to_dict()))
    except (OSError, TimeoutError) as exc:
        raise TestbedError(f"cluster scheduler {address} did not answer: {exc}") from None
    return 0
