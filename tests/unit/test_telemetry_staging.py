"""Sampler staging: where the run directory lives decides whether the sampler writes through tmpfs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.host import ownership, staging
from testbed.host.waiting import wait_until
from testbed.telemetry import control
from testbed.telemetry.sampler import SamplerError

# the guest's mounts, as `testbed vm` showed them (/proc/self/mountinfo of the 6.1 guest, shortened)
GUEST = """\
22 1 0:20 / / ro,relatime - 9p /dev/root ro,sync,dirsync,access=any,msize=512000,trans=virtio
23 22 0:21 / /run rw,relatime - tmpfs run rw,mode=755
24 22 0:22 / /dev/shm rw,nosuid,nodev - tmpfs tmpfs rw
31 22 0:30 / /work/main/runs rw,relatime - 9p virtme.initmount0 rw,sync,dirsync,trans=virtio
32 22 0:31 / /srv/my\\040runs rw - nfs4 host:/export rw
"""


@pytest.mark.parametrize(
    ("path", "fstype"),
    [
        ("/work/main/runs/scenarios/x/run1", "9p"),
        ("/work/main/runsx", "9p"),  # the root mount: not inside /work/main/runs
        ("/run/testbed", "tmpfs"),
        ("/dev/shm/tbstage-1-a", "tmpfs"),
        ("/srv/my runs/a", "nfs4"),
        ("/", "9p"),
    ],
)
def test_fs_type_takes_the_longest_mount_point(path, fstype):
    assert staging.fs_type(Path(path), GUEST) == fstype


def test_network_filesystems_are_staged_local_ones_are_not():
    assert all(staging.is_network_fs(t) for t in ("9p", "virtiofs", "nfs", "nfs4", "cifs", "fuse.sshfs"))
    assert not any(staging.is_network_fs(t) for t in ("ext4", "xfs", "tmpfs", "overlay", "btrfs"))


def _mounts(stage_root: Path, stage_type: str = "tmpfs") -> str:
    return GUEST + (
        f"40 22 0:40 / /srv/disk rw - ext4 /dev/vda rw\n41 22 0:41 / {stage_root} rw - {stage_type} tmpfs rw\n"
    )


@pytest.mark.parametrize(
    ("out", "why"), [("/work/main/runs/r1", "9p: sync writes"), ("/srv/disk/r1", "ext4: writes can block")]
)
def test_for_out_stages_network_and_disk_run_directories(tmp_path, out, why):
    st = staging.Stage.for_out(Path(out), _mounts(tmp_path), root=tmp_path)
    assert st is not None and st.dir.parent == tmp_path
    assert st.dir.name.startswith(f"tbstage-{os.getpid()}-") and why in st.reason


def test_for_out_writes_directly_when_staging_cannot_help(tmp_path, monkeypatch):
    assert staging.Stage.for_out(Path("/run/testbed"), _mounts(tmp_path), root=tmp_path) is None  # tmpfs already
    assert staging.Stage.for_out(Path("/srv/disk/r1"), _mounts(tmp_path, "ext4"), root=tmp_path) is None
    assert staging.Stage.for_out(Path("/srv/disk/r1"), _mounts(tmp_path), root=tmp_path / "missing") is None
    monkeypatch.setattr(staging, "MIN_FREE", 1 << 62)  # more than any disk has free
    assert staging.Stage.for_out(Path("/srv/disk/r1"), _mounts(tmp_path), root=tmp_path) is None
    assert list(tmp_path.iterdir()) == []


def test_commit_moves_everything_and_never_overwrites(tmp_path):
    out, stage = tmp_path / "out", tmp_path / "stage"
    out.mkdir()
    stage.mkdir()
    (stage / "queues.csv").write_text("rows")
    (stage / "links.csv").write_text("links")
    (out / "links.csv").write_text("earlier")
    st = staging.Stage(stage, out, "test")
    assert st.commit() == ["links.csv"]
    assert (out / "queues.csv").read_text() == "rows" and (out / "links.csv").read_text() == "earlier"
    assert (stage / "links.csv").read_text() == "links"  # kept, not lost
    (stage / "links.csv").unlink()
    assert st.commit() == [] and not stage.exists()


FAKE_SAMPLER = """
import json, pathlib, signal, sys, time
out = pathlib.Path(sys.argv[1])
stop = []
signal.signal(signal.SIGINT, lambda *a: stop.append(1))
(out / "queues.csv").write_text("t,node\\n")
(out / "sampler.ready").write_text("1")
while not stop:
    time.sleep(0.01)
(out / "sampler_health.json").write_text(json.dumps({"status": "stopped", "rate_hz_min": 50}))
"""


def test_stop_moves_the_staged_files_and_records_the_staging(tmp_path):
    out, stage = tmp_path / "run", tmp_path / "stage"
    out.mkdir()
    stage.mkdir()
    proc = subprocess.Popen([sys.executable, "-c", FAKE_SAMPLER, str(stage)])
    handle = control.SamplerHandle(proc, out, out / "sampler.log", staging.Stage(stage, out, "run directory on 9p"))

    def ready() -> bool:
        assert proc.poll() is None, "the fake sampler exited before it was ready"
        return (stage / "sampler.ready").exists()

    wait_until(ready, 10, "the fake sampler to install its SIGINT handler (sampler.ready)")
    health = handle.stop(timeout=10)
    assert health["staging"] == {"dir": str(stage), "reason": "run directory on 9p"}
    assert json.loads((out / "sampler_health.json").read_text())["staging"]["reason"] == "run directory on 9p"
    assert (out / "queues.csv").exists() and not stage.exists()


def test_a_sampler_that_dies_still_leaves_its_rows_in_the_record(tmp_path):
    out, stage = tmp_path / "run", tmp_path / "stage"
    out.mkdir()
    stage.mkdir()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import pathlib,sys; pathlib.Path(sys.argv[1], 'queues.csv').write_text('t\\n1\\n'); sys.exit(3)",
            str(stage),
        ]
    )
    proc.wait(10)
    handle = control.SamplerHandle(proc, out, out / "sampler.log", staging.Stage(stage, out, "test"))
    with pytest.raises(SamplerError, match="exited 3 without a health file"):
        handle.stop()
    assert (out / "queues.csv").read_text() == "t\n1\n" and not stage.exists()


def test_clean_removes_only_stages_of_dead_owners(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    mine = tmp_path / f"tbstage-{os.getpid()}-abc"
    gone = tmp_path / f"tbstage-{dead.pid}-def"
    other = tmp_path / f"notours-{dead.pid}-x"
    for d in (mine, gone, other):
        d.mkdir()
    log = ownership.clean_stages(tmp_path)
    assert mine.exists() and other.exists() and not gone.exists()
    assert log == [
        f"removed sampler stage {gone} (no run directory to recover it into: None) (its run, pid {dead.pid}, is gone)"
    ]


def test_clean_recovers_a_killed_runs_stage_into_its_record(tmp_path):
    """`testbed clean` deleted a killed run's stage, and with it every queue, link and CPU row."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    run = tmp_path / "runs" / "20261204T000000Z-x"
    run.mkdir(parents=True)
    (run / "manifest.json").write_text(json.dumps({"status": "running", "pid": dead.pid}))
    (run / "links.csv").write_text("written by the record itself")
    root = tmp_path / "shm"
    root.mkdir()
    stage = root / f"tbstage-{dead.pid}-q1"
    stage.mkdir()
    (stage / staging.OWNER).write_text(str(run))
    (stage / "queues.csv").write_text("t,backlog_bytes\n1.0,9014\n")
    (stage / "links.csv").write_text("staged")
    (log,) = ownership.clean_stages(root)
    assert log.startswith(f"recovered queues.csv from sampler stage {stage} into {run}; kept in the stage")
    assert (run / "queues.csv").read_text() == "t,backlog_bytes\n1.0,9014\n"
    assert (run / "links.csv").read_text() == "written by the record itself"  # never overwritten
    assert (stage / "links.csv").read_text() == "staged"  # and the staged copy is kept, not lost
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "running" and manifest["recovered"][0]["files"] == ["queues.csv"]
    assert manifest["recovered"][0]["stage"] == str(stage)


def test_a_stage_names_its_run_directory(tmp_path):
    st = staging.Stage.for_out(Path("/srv/disk/r1"), _mounts(tmp_path), root=tmp_path)
    assert st is not None and staging.owner(st.dir) == Path("/srv/disk/r1")
    out = tmp_path / "out"
    out.mkdir()
    st = staging.Stage(st.dir, out, "test")
    (st.dir / "queues.csv").write_text("rows")
    assert st.commit() == [] and not st.dir.exists() and sorted(p.name for p in out.iterdir()) == ["queues.csv"]


def test_discard_under_removes_only_stages_of_runs_in_that_directory(tmp_path):
    """CI24: a cluster point interrupted as its sampler started left /dev/shm/tbstage-* naming a run in the
    point's scratch directory, which the task then deleted; `testbed clean` found the stage. The task now
    discards the stages of its scratch's runs before deleting it, and only those."""
    shm = tmp_path / "shm"
    shm.mkdir()
    scratch, elsewhere = tmp_path / "tbpoint-x", tmp_path / "runs"
    mine, theirs = shm / f"{staging.PREFIX}1-a", shm / f"{staging.PREFIX}2-b"
    for stage, out in ((mine, scratch / "runs" / "20261205T000000Z-p"), (theirs, elsewhere / "20261205T000000Z-q")):
        stage.mkdir()
        (stage / staging.OWNER).write_text(str(out))
        (stage / "queues.csv").write_text("t\n")
    assert staging.discard_under(scratch, shm) == [mine]
    assert not mine.exists() and theirs.exists()
