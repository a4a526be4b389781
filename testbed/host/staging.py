"""Stage the sampler's files on tmpfs and move them into the run directory when it stops.

A flush of the sampler's buffered rows is one write() into the run directory, and that write can block the loop:
- in the guest (``testbed vm``) the run directory is the host's, shared over 9p mounted ``sync``, so every write
  waits for QEMU; a CI guest pass saw the sampler stop for 0.40, 0.41 and 1.56 s, each gap starting at a flush;
- on a local disk under writeback pressure (a CI run writing many records, IO pressure "full" 1.5 %), a native CI
  pass saw gaps of 0.50-0.66 s starting exactly at 0.5 s flush ticks, and points failed the sampler guardrail.
So the sampler writes into ``/dev/shm/tbstage-<pid>-*`` (tmpfs: memory, no writeback), and ``Stage.commit`` moves
every file into the run directory once the sampler has exited (whatever its exit status, so a crashed sampler's
rows still reach the record). It writes directly when the run directory is tmpfs already, or when /dev/shm is
missing, not tmpfs, or has less than ``MIN_FREE`` free. A native run's telemetry is 12-27 MB (measured: 16 elephants
for 14 s at 500 Hz), the guest's a few MB.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

NETWORK_FS = ("9p", "virtiofs", "nfs", "nfs4", "cifs", "smb3")
STAGE_ROOT = Path("/dev/shm")
PREFIX = "tbstage-"
MIN_FREE = 512 << 20  # bytes free on the stage's filesystem, or the sampler writes directly


def _unescape(field: str) -> str:
    """mountinfo escapes space, tab, newline and backslash as octal (``\\040``)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1 : i + 4].isdigit():
            out.append(chr(int(field[i + 1 : i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def fs_type(path: Path, mountinfo: str | None = None) -> str:
    """The filesystem type of the mount holding ``path`` (longest mount point that contains it; the last such
    line wins, as a later mount hides an earlier one on the same point). Pure when ``mountinfo`` is given."""
    text = Path("/proc/self/mountinfo").read_text() if mountinfo is None else mountinfo
    target = os.path.realpath(path) if mountinfo is None else os.path.normpath(str(path))
    best, best_type = "", ""
    for line in text.splitlines():
        pre, sep, post = line.partition(" - ")
        fields = pre.split()
        if not sep or len(fields) < 5 or not post.split():
            continue
        mnt = _unescape(fields[4])
        inside = target == mnt or target.startswith(mnt.rstrip("/") + "/")
        if inside and len(mnt) >= len(best):
            best, best_type = mnt, post.split()[0]
    return best_type


def is_network_fs(fstype: str) -> bool:
    return fstype in NETWORK_FS or fstype.startswith("fuse")


@dataclass
class Stage:
    """A private staging directory for files that belong in ``out``."""

    dir: Path
    out: Path
    reason: str

    @classmethod
    def for_out(cls, out: Path, mountinfo: str | None = None, root: Path | None = None) -> Stage | None:
        """A new stage on ``root`` (default /dev/shm) for files that belong in ``out``, or None: write ``out``
        directly (it is tmpfs already, or the stage root is unusable)."""
        root = root or STAGE_ROOT
        fstype = fs_type(out, mountinfo)
        if fstype == "tmpfs" or not root.is_dir() or fs_type(root, mountinfo) != "tmpfs":
            return None
        if shutil.disk_usage(root).free < MIN_FREE:
            return None
        d = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=root))
        why = "sync writes wait on the far end" if is_network_fs(fstype) else "writes can block under writeback"
        return cls(d, Path(out), f"run directory on {fstype}: {why}")

    def describe(self) -> dict[str, str]:
        return {"dir": str(self.dir), "reason": self.reason}

    def commit(self) -> list[str]:
        """Move every staged file into ``out`` (never over an existing one) and remove the stage.

        Returns the names it could not move because ``out`` already had them (those stay staged, and the stage
        with them, so nothing is lost)."""
        clashes = []
        for f in sorted(self.dir.iterdir()):
            dest = self.out / f.name
            if dest.exists():
                clashes.append(f.name)
                continue
            shutil.move(str(f), str(dest))
        if not clashes:
            self.dir.rmdir()
        return clashes
