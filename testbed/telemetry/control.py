"""Start and stop the sampler process from the harness: ``start_sampler(...)`` -> ``SamplerHandle.stop()``.

The sampler runs in the root namespace as its own session (through the run's ``ProcessGroup`` when given, so the
run's cleanup stops it too); ``start_sampler`` returns once the sampler reports READY (every queue found) and
raises ``SamplerError`` with the sampler's own message otherwise. The sampler writes into a tmpfs stage and
``stop`` moves its files into ``out`` (``staging``: a flush into 9p or a disk under writeback can block it).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from testbed.host.procs import Proc, ProcessGroup
from testbed.host.staging import Stage
from testbed.telemetry.ports import PortRef, SamplerConfig
from testbed.telemetry.sampler import SamplerError

WRITTEN = ("queues.csv", "links.csv", "cpu.csv", "senders.csv", "sampler_health.json")

PYTHON = "/usr/bin/python3"
REPO = Path(__file__).resolve().parents[2]


class SamplerHandle:
    def __init__(self, proc: Proc | subprocess.Popen[bytes], out: Path, log: Path, stage: Stage | None = None):
        self.proc, self.out, self.log, self.stage = proc, out, log, stage
        self.health: dict[str, Any] | None = None

    @property
    def pid(self) -> int:
        return self.proc.pid

    def _rc(self) -> int | None:
        return self.proc.poll()

    def _log_tail(self) -> str:
        try:
            return " | ".join(self.log.read_text().strip().splitlines()[-5:])
        except OSError:
            return ""

    def stop(self, timeout: float = 10.0) -> dict[str, Any]:
        """SIGINT, wait for the final flush (then TERM/KILL); return sampler_health.json. Idempotent."""
        if self.health is not None:
            return self.health
        try:
            self._stop(timeout)
        finally:
            self._commit()
        health = self._read_health()
        if self.stage is not None:  # the record says where its telemetry was written first, and why
            health["staging"] = self.stage.describe()
            (self.out / "sampler_health.json").write_text(json.dumps(health, indent=1, sort_keys=True) + "\n")
        self.health = health
        return health

    def _commit(self) -> None:
        if self.stage is None or not self.stage.dir.exists():
            return
        clashes = self.stage.commit()
        if clashes:
            raise SamplerError(f"{self.out} already has {', '.join(clashes)}: staged copies kept in {self.stage.dir}")

    def _stop(self, timeout: float) -> None:
        if self._rc() is None:
            if isinstance(self.proc, Proc):
                self.proc.signal_group(signal.SIGINT)
            else:
                self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout)
            except (TimeoutError, subprocess.TimeoutExpired):
                self.proc.stop(grace=1.0) if isinstance(self.proc, Proc) else self.proc.kill()
                self.proc.wait(5)
                raise SamplerError(f"sampler pid {self.pid} did not stop within {timeout:g} s; killed") from None

    def _read_health(self) -> dict[str, Any]:
        rc = self._rc()
        path = self.out / "sampler_health.json"
        try:
            health = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise SamplerError(f"sampler exited {rc} without a health file ({exc}): {self._log_tail()}") from None
        if rc != 0 or health.get("status") != "stopped":
            raise SamplerError(f"sampler exited {rc} (status {health.get('status')}): {self._log_tail()}")
        return dict(health)


def start_sampler(
    procs: ProcessGroup | None,
    ports: list[PortRef],
    out: Path,
    rate_hz: float = 1000,
    ready_timeout: float = 10.0,
    **settings: Any,
) -> SamplerHandle:
    """Write DIR/sampler_config.json, spawn the sampler, wait for READY. ``settings``: other SamplerConfig keys."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = SamplerConfig(ports=list(ports), rate_hz=rate_hz, **settings)
    cfg_path = out / "sampler_config.json"
    cfg_path.write_text(json.dumps(cfg.to_dict(), indent=1) + "\n")
    log = out / "sampler.log"
    stage = Stage.for_out(out)
    if stage is not None:  # the sampler refuses existing files itself; staged, it cannot see them
        existing = [n for n in WRITTEN if (out / n).exists()]
        if existing:
            stage.dir.rmdir()
            raise SamplerError(f"{out} has {', '.join(existing)} already: a run record is never overwritten")
    write_dir = stage.dir if stage is not None else out
    ready = write_dir / "sampler.ready"
    argv = [
        PYTHON if Path(PYTHON).exists() else sys.executable,
        "-m",
        "testbed.telemetry.sampler",
        "--config",
        str(cfg_path),
        "--out",
        str(write_dir),
    ]
    proc: Proc | subprocess.Popen[bytes]
    if procs is not None:
        proc = procs.spawn("telemetry-sampler", argv, stderr=log, cwd=REPO)
    else:
        with open(log, "wb") as err:
            proc = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, cwd=REPO, start_new_session=True
            )
    handle = SamplerHandle(proc, out, log, stage)
    deadline = time.monotonic() + ready_timeout
    while not ready.exists():
        if proc.poll() is not None:
            handle._commit()
            raise SamplerError(f"sampler exited {proc.poll()} before READY: {handle._log_tail()}")
        if time.monotonic() > deadline:
            proc.kill() if isinstance(proc, subprocess.Popen) else proc.stop(grace=0.5)
            proc.wait(5)
            handle._commit()
            raise SamplerError(f"sampler not READY within {ready_timeout:g} s: {handle._log_tail()}")
        time.sleep(0.01)
    return handle
