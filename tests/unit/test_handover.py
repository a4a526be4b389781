"""Records and reports made under sudo in a user's directory are handed to that user (results.handover).

No root: ``os.geteuid`` says root, ``os.chown`` is a fake that records its calls, and owners come from a table
(``_owner``), in which every path not named is root's. The files themselves are real, in a tmp directory.
"""

from __future__ import annotations

import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

from results import handover
from results.cli import defer_report, report_main
from results.metrics import finish_run
from results.record import RunRecord

USER, GROUP, OTHER = 1000, 1001, 2000
NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
DATA = Path(__file__).resolve().parents[1] / "data" / "runs"


class FakeOwners:
    """Owners by path (root's unless set) and the chown calls made, which change them."""

    def __init__(self) -> None:
        self.owners: dict[Path, tuple[int, int]] = {}
        self.calls: list[tuple[Path, int, int, bool]] = []

    def owner(self, path: Path) -> tuple[int, int]:
        os.lstat(path)  # a missing path raises, as the real one does
        return self.owners.get(Path(os.path.abspath(path)), (0, 0))

    def chown(self, path: os.PathLike[str] | str, uid: int, gid: int, *, follow_symlinks: bool = True) -> None:
        p = Path(os.path.abspath(path))
        self.calls.append((p, uid, gid, follow_symlinks))
        self.owners[p] = (uid, gid)

    def given(self) -> list[Path]:
        return [p for p, *_ in self.calls]


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeOwners:
    owners = FakeOwners()
    owners.owners[tmp_path / "home"] = (USER, GROUP)
    (tmp_path / "home").mkdir()
    monkeypatch.setattr(handover, "_owner", owners.owner)
    monkeypatch.setattr(os, "chown", owners.chown)
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(handover, "_invoker", {})  # the entry's ids, restored after the test
    handover.use_invoker({"SUDO_UID": str(USER), "SUDO_GID": str(GROUP)})
    return owners


def tree(top: Path) -> set[Path]:
    return {top} | set(top.rglob("*"))


def test_a_record_and_the_directories_made_for_it_go_to_the_user(fake: FakeOwners, tmp_path: Path) -> None:
    home = tmp_path / "home"
    rec = RunRecord.create(home / "runs" / "session", "x", now=NOW)
    rec.table("events").write({"t": 1.0, "kind": "k", "detail": ""})
    assert fake.calls == []  # nothing is handed over while the run writes
    finish_run(rec)
    assert (rec.path / "summary.json").exists()
    assert set(fake.given()) == {home / "runs", home / "runs" / "session"} | tree(rec.path)
    assert fake.given()[:3] == [home / "runs", home / "runs" / "session", rec.path]  # from the top down
    assert {(uid, gid, follow) for _, uid, gid, follow in fake.calls} == {(USER, GROUP, False)}
    assert home not in fake.given()  # the user's own directory is left alone


def test_a_manifest_rewritten_after_the_handover_keeps_the_users_owner(fake: FakeOwners, tmp_path: Path) -> None:
    rec = RunRecord.create(tmp_path / "home", "x", now=NOW)
    rec.finish("complete")
    fake.calls.clear()
    rec.set("late", 1)
    ((tmp, uid, gid, _),) = fake.calls
    assert tmp.name.startswith(".manifest.json.tmp") and (uid, gid) == (USER, GROUP)


def test_only_what_this_process_made_is_given(fake: FakeOwners, tmp_path: Path) -> None:
    home = tmp_path / "home"
    old = home / "runs"  # made by root before (an older sudo run): not this process's, so it stays root's
    old.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "secret").write_text("")
    rec = RunRecord.create(old, "x", now=NOW)
    (rec.path / "raw" / "link").symlink_to(elsewhere)
    theirs = rec.path / "raw" / "theirs.txt"
    theirs.write_text("")
    fake.owners[theirs] = (OTHER, OTHER)
    rec.finish("complete")
    given = fake.given()
    assert old not in given and theirs not in given
    assert rec.path / "raw" / "link" in given  # the link itself, never what it points to
    assert not [p for p in given if p.is_relative_to(elsewhere)]


def test_a_report_and_its_missing_parents_go_to_the_user(fake: FakeOwners, tmp_path: Path) -> None:
    out = tmp_path / "home" / "reports" / "r1"
    assert report_main([str(DATA / "sweep-buffer"), "-o", str(out), "--no-plots"]) == 0
    assert set(fake.given()) == {out.parent} | tree(out)
    assert {"comparison.csv", "comparison.md"} <= {p.name for p in fake.given()}
    assert not [p for p in fake.given() if p.is_relative_to(DATA)]  # never the records it read


def test_a_deferred_report_goes_to_the_user(fake: FakeOwners, tmp_path: Path) -> None:
    out = tmp_path / "home" / "report"
    path = defer_report([DATA / "sweep-buffer"], out)
    assert fake.given() == [out, path]


@pytest.mark.parametrize(
    "case",
    ["not root", "no sudo", "sudo to root", "root's tree", "another user's directory", "bad SUDO_UID"],
)
def test_nothing_is_given_outside_the_rule(
    case: str, fake: FakeOwners, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    parent = tmp_path / "home" / "runs"
    if case == "not root":
        monkeypatch.setattr(os, "geteuid", lambda: USER)
    elif case == "no sudo":
        handover.use_invoker({"SUDO_GID": str(GROUP)})
    elif case == "sudo to root":
        handover.use_invoker({"SUDO_UID": "0", "SUDO_GID": "0"})
    elif case == "bad SUDO_UID":
        handover.use_invoker({"SUDO_UID": "alice", "SUDO_GID": str(GROUP)})
    elif case == "root's tree":  # /tmp, /run, /var/lib: root's all the way up
        parent = tmp_path / "system" / "runs"
    elif case == "another user's directory":
        fake.owners[tmp_path / "home"] = (OTHER, OTHER)
    assert handover.plan(parent) is None
    rec = RunRecord.create(parent, "x", now=NOW)
    rec.finish("complete")
    assert fake.calls == []


def test_without_sudo_gid_the_group_is_left_alone(
    fake: FakeOwners, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    handover.use_invoker({"SUDO_UID": str(USER)})
    plan = handover.plan(tmp_path / "home" / "new")
    assert plan == handover.Handover(USER, -1, (tmp_path / "home" / "new",))


def test_the_records_owner_is_the_entrys_not_this_layers_environment(
    fake: FakeOwners, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """results/ reads no environment: a SUDO_UID set after the entry read its own changes nothing, and the CLI's
    entry (testbed.invocation.enter) is what hands the user's ids to this layer."""
    from testbed.invocation import enter

    monkeypatch.setattr("testbed.host.ownership.STATE_DIR", tmp_path / "state")
    handover.use_invoker({})
    monkeypatch.setenv("SUDO_UID", str(USER))
    assert handover.plan(tmp_path / "home" / "new") is None  # the entry saw no sudo
    enter({"SUDO_UID": str(USER), "SUDO_GID": str(GROUP), "TESTBED_STATE_DIR": str(tmp_path / "state")})
    assert handover.plan(tmp_path / "home" / "new") == handover.Handover(USER, GROUP, (tmp_path / "home" / "new",))
