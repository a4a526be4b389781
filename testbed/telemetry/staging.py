"""Stage the sampler's files on tmpfs when the run directory is on a network filesystem; move them at the end.

In the guest (``testbed vm``) the run directory is the host's, shared over 9p mounted ``sync``: every write waits
for QEMU, and a CI guest pass saw the queue sampler stop for 0.40, 0.41 and 1.56 s, each gap starting at one of
its 0.5 s flushes. So when ``out`` is on 9p, virtiofs, NFS, SMB or FUSE the sampler writes into
``/dev/shm/tbstage-<pid>-*`` instead, and ``Stage.commit`` moves every file into ``out`` once the sampler has
exited (whatever its exit status, so a crashed sampler's rows still reach the record). Local filesystems are
written directly. The stage holds one run's telemetry in memory: at the guest's 50 Hz that is a few MB.
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


def needs_staging(fstype: str) -> bool:
    return fstype in NETWORK_FS or fstype.startswith("fuse")


@dataclass
class Stage:
    """A private staging directory for files that belong in ``out``."""

    dir: Path
    out: Path
    reason: str

    @classmethod
    def for_out(cls, out: Path, mountinfo: str | None = None) -> Stage | None:
        """A new stage when ``out`` is on a network filesystem, else None (write ``out`` directly)."""
        fstype = fs_type(out, mountinfo)
        if not needs_staging(fstype):
            return None
        d = Path(tempfile.mkdtemp(prefix=f"{PREFIX}{os.getpid()}-", dir=STAGE_ROOT))
        return cls(d, Path(out), f"run directory on {fstype}: its writes can stall the sampler")

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
