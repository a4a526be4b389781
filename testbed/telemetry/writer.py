"""The sampler's record files, written off its sampling loop.

A write can block: on the guest's shared root (virtme-ng) a flush of queues.csv stalled the loop 0.19-1.56 s, and
every such gap in a guest pass's queue rows began at a flush tick (three of three over 0.25 s in one CI pass; natively
35 of 140 gaps over 30 ms, against 6% by chance). So the loop only formats rows into memory; one writer thread does
the writes, in the order they were handed over.
"""

from __future__ import annotations

import csv
import io
import json
import os
import queue
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any


class WriterError(RuntimeError):
    """A record file could not be written (the first error; later writes are skipped)."""


class BackgroundWriter:
    """One thread running write jobs in order. ``submit`` never blocks; ``close`` drains, joins and re-raises."""

    def __init__(self, name: str = "record-writer") -> None:
        self._jobs: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Callable[[], None]) -> None:
        if self.error is not None:
            raise WriterError(f"writing the record failed: {self.error}") from self.error
        self._jobs.put(job)

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            if self.error is None:
                try:
                    job()
                except BaseException as exc:  # kept for the loop's next submit() and for close()
                    self.error = exc

    def close(self, timeout_s: float = 60.0) -> None:
        self._jobs.put(None)
        self._thread.join(timeout_s)
        if self._thread.is_alive():
            raise WriterError(f"the record writer did not finish within {timeout_s:g} s")
        if self.error is not None:
            raise WriterError(f"writing the record failed: {self.error}") from self.error


class CsvTable:
    """A CSV file whose rows are formatted into memory by ``row`` and handed to the writer by ``flush``."""

    def __init__(self, path: Path, header: tuple[str, ...], writer: BackgroundWriter):
        if path.exists() and path.stat().st_size > 0:
            raise WriterError(f"{path} exists already: a run record is never overwritten")
        self.path, self.writer = path, writer
        self.fh = open(path, "w", newline="")  # noqa: SIM115 (closed by close(), on the writer thread)
        self._buf = io.StringIO()
        self._csv = csv.writer(self._buf)
        self._csv.writerow(header)
        self.rows = 0

    def row(self, r: tuple[Any, ...]) -> None:
        self._csv.writerow(r)
        self.rows += 1

    def flush(self) -> None:
        text = self._buf.getvalue()
        if text:
            self._buf.seek(0)
            self._buf.truncate()
            fh = self.fh

            def write() -> None:
                fh.write(text)
                fh.flush()

            self.writer.submit(write)

    def close(self) -> None:
        """Flush what is left and close the file after it (the writer must still be open)."""
        self.flush()
        self.writer.submit(self.fh.close)


def replace_json(writer: BackgroundWriter, path: Path, doc: dict[str, Any]) -> None:
    """Write ``doc`` to ``path`` atomically (a .tmp file, then rename), on the writer thread."""
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    tmp = path.with_name(path.name + ".tmp")

    def write() -> None:
        tmp.write_text(text)
        os.replace(tmp, path)

    writer.submit(write)
