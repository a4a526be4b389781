"""Records and reports made under sudo inside a user's directory belong to that user.

``sudo testbed run`` writes its records and reports as root; left so, the user who asked for them cannot delete
or move them in their own clone. The rule, decided once before anything is created (``plan``):

- the process runs as root and sudo started it for another user (``SUDO_UID`` set and not 0; ``SUDO_GID`` gives
  the group, else the group is left alone);
- the target lies inside that user's directory: going up from the deepest directory that exists already, the
  first one not owned by root is owned by ``SUDO_UID``. A tree of root's own (/run, /var/lib, /tmp) or another
  user's gets no handover.

Then ``Handover.give`` hands over what this process created, by ownership of the paths it made, never by a name
pattern: the directories ``plan`` found missing above the target (each directory itself, not what others put in
it), and every entry of the tree it wrote that root owns. Links are handed over themselves and never followed. A
rewrite in place (``keep_owner``) keeps the owner of the file it replaces, so a manifest rewritten after the
handover stays the user's.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

ROOT_UID = 0


def _owner(path: Path) -> tuple[int, int]:
    """(uid, gid) of ``path`` itself (a link's own, not its target's)."""
    st = os.lstat(path)
    return st.st_uid, st.st_gid


def _uid(path: Path) -> int:
    return _owner(path)[0]


def _sudo_ids(env: Mapping[str, str]) -> tuple[int, int] | None:
    """(uid, gid) of the user sudo ran this process for, or None (not root, not sudo, or sudo to root)."""
    if os.geteuid() != ROOT_UID:
        return None
    try:
        uid = int(env.get("SUDO_UID", ""))
    except ValueError:
        return None
    try:
        gid = int(env.get("SUDO_GID", ""))
    except ValueError:
        gid = -1  # os.chown: leave the group as it is
    return (uid, gid) if uid != ROOT_UID else None


@dataclass(frozen=True)
class Handover:
    """What to give to whom: the sudo user's ids and the directories this process is about to create above the
    tree it writes (topmost first)."""

    uid: int
    gid: int
    made: tuple[Path, ...]

    def give(self, tree: Path | None = None) -> list[Path]:
        """Hand over the directories in ``made`` that root still owns and every root-owned entry of ``tree``
        (itself included); return the paths handed over, in the order they were."""
        paths = list(self.made)
        if tree is not None and os.path.isdir(tree) and not os.path.islink(tree):
            paths.append(Path(os.path.abspath(tree)))
            for top, dirs, files in os.walk(paths[-1], followlinks=False):
                dirs.sort()
                paths += [Path(top, name) for name in dirs + sorted(files)]
        given: list[Path] = []
        for path in dict.fromkeys(paths):  # once each, in order
            given += self._give_one(path)
        return given

    def _give_one(self, path: Path) -> list[Path]:
        try:
            if _uid(path) != ROOT_UID:
                return []
            os.chown(path, self.uid, self.gid, follow_symlinks=False)
        except FileNotFoundError:  # removed meanwhile (a tmp file renamed into place)
            return []
        return [path]


SUDO_KEYS = ("SUDO_UID", "SUDO_GID")
_invoker: dict[str, str] = {}  # the entry's SUDO_UID and SUDO_GID (``use_invoker``); empty: nothing handed over


def use_invoker(env: Mapping[str, str]) -> None:
    """Take the user sudo ran this process for from its entry's environment (the CLI, the API, the pytest plugin
    and the programs that write records call it once, before the first record), so that this layer reads no
    environment of its own."""
    _invoker.clear()
    _invoker.update({k: env[k] for k in SUDO_KEYS if k in env})


def plan(target: Path, env: Mapping[str, str] | None = None) -> Handover | None:
    """Before creating ``target`` (a directory, and any missing parents): the handover of what will be made there,
    or None when the rule above gives nothing to hand over. ``env``: the invoker's ids, else the entry's
    (``use_invoker``)."""
    ids = _sudo_ids(_invoker if env is None else env)
    if ids is None:
        return None
    path = Path(os.path.abspath(target))
    missing: list[Path] = []
    while not os.path.lexists(path):
        missing.append(path)
        if path.parent == path:
            return None
        path = path.parent
    while _uid(path) == ROOT_UID:  # root's directories between the user's and the target
        if path.parent == path:
            return None  # root's tree all the way up
        path = path.parent
    if _uid(path) != ids[0]:
        return None
    return Handover(ids[0], ids[1], tuple(reversed(missing)))


def keep_owner(new: Path, old: Path) -> None:
    """Give ``new`` (about to replace ``old``) the owner of ``old``, when root writes over another user's file."""
    if os.geteuid() != ROOT_UID:
        return
    try:
        uid, gid = _owner(old)
    except FileNotFoundError:
        return
    if uid != ROOT_UID:
        os.chown(new, uid, gid, follow_symlinks=False)
