"""Stage the sampler's files on tmpfs and move them into the run directory when it stops.

A flush of the sampler's buffered rows is one write() into the run directory, and that write can block the loop:
- in the guest (``testbed vm``) the run directory is the host's, shared over 9p mounted ``sync``, so every write
  waits for QEMU, and the sampler stops for as long as the flush takes;
- on a local disk under writeback pressure (many records being written) a flush waits for the writeback, and the
  sampler's gaps start at its flush ticks.
The stalls that showed this are in docs/bench.md ("Staging the sampler's files").
So the sampler writes into ``/dev/shm/tbstage-<pid>-*`` (tmpfs: memory, no writeback), and ``Stage.commit`` moves
every file into the run directory once the sampler has exited (whatever its exit status, so a crashed sampler's
rows still reach the record). It writes directly when the run directory is tmpfs already, or when /dev/shm is
missing, not tmpfs, or has less than ``MIN_FREE`` free (a run's telemetry is tens of MB natively, a few MB in the
guest: docs/bench.md).

A stage names its run directory (``OWNER``), so the rows of a run killed before its commit are not lost: ``recover``
(called by ``testbed clean`` and at the next run's start, once the stage's run is gone) moves them into that
directory and notes it in the record's manifest (``recovered``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

NETWORK_FS = ("9p", "virtiofs", "nfs", "nfs4", "cifs", "smb3")
STAGE_ROOT = Path("/dev/shm")
PREFIX = "tbstage-"
MIN_FREE = 512 << 20  # bytes free on the stage's filesystem, or the sampler writes directly
OWNER = ".owner"  # in a stage: the path of the run directory its files belong in


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
        (d / OWNER).write_text(str(Path(out).resolve()))
        why = "sync writes wait on the far end" if is_network_fs(fstype) else "writes can block under writeback"
        return cls(d, Path(out), f"run directory on {fstype}: {why}")

    def describe(self) -> dict[str, str]:
        return {"dir": str(self.dir), "reason": self.reason}

    def commit(self) -> list[str]:
        """Move every staged file into ``out`` (never over an existing one) and remove the stage.

        Returns the names it could not move because ``out`` already had them (those stay staged, and the stage
        with them, so nothing is lost)."""
        _, clashes = _move_into(self.dir, self.out)
        return clashes


def _move_into(stage: Path, out: Path) -> tuple[list[str], list[str]]:
    """Move the stage's files into ``out`` (never over an existing one); remove the stage when all moved.
    Returns (moved, clashes)."""
    moved, clashes = [], []
    for f in sorted(stage.iterdir()):
        if f.name == OWNER:
            continue
        dest = out / f.name
        if dest.exists():
            clashes.append(f.name)
            continue
        shutil.move(str(f), str(dest))
        moved.append(f.name)
    if not clashes:
        (stage / OWNER).unlink(missing_ok=True)
        stage.rmdir()
    return moved, clashes


def owner(stage: Path) -> Path | None:
    """The run directory a stage's files belong in, or None (a stage made before stages named it)."""
    try:
        return Path((stage / OWNER).read_text().strip())
    except OSError:
        return None


def discard_under(root: Path, stage_root: Path | None = None) -> list[Path]:
    """Remove every stage whose run directory lies under ``root`` (a directory about to be deleted whole, such as
    a cluster point's scratch: its stages would outlive it with nowhere to be recovered into); the stages removed."""
    gone = []
    for stage in sorted((stage_root or STAGE_ROOT).glob(PREFIX + "*")):
        out = owner(stage)
        if out is not None and (out == root or root in out.parents):
            shutil.rmtree(stage, ignore_errors=True)
            gone.append(stage)
    return gone


def recover(stage: Path) -> str:
    """Move a dead run's stage into its run directory and note it in that record's manifest (``recovered``:
    the stage, the files, when). A stage with no run directory to go to is removed. Returns what was done."""
    out = owner(stage)
    if out is None or not out.is_dir():
        shutil.rmtree(stage, ignore_errors=True)
        return f"removed sampler stage {stage} (no run directory to recover it into: {out})"
    moved, clashes = _move_into(stage, out)
    _note_recovered(out, {"stage": str(stage), "files": moved, "at": time.time()})
    kept = f"; kept in the stage, as the record already has them: {', '.join(clashes)}" if clashes else ""
    return f"recovered {', '.join(moved) or 'no files'} from sampler stage {stage} into {out}{kept}"


def _note_recovered(out: Path, entry: dict[str, object]) -> None:
    """Add ``entry`` to the manifest's ``recovered`` list (written atomically, as RunRecord writes it)."""
    path = out / "manifest.json"
    try:
        manifest = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # no readable manifest: the files are in the directory, which is what matters
    if not isinstance(manifest, dict):
        return
    manifest.setdefault("recovered", []).append(entry)
    tmp = path.with_name(path.name + ".recover")
    with open(tmp, "w") as fh:
        json.dump(manifest, fh, indent=2, default=str)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
