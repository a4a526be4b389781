"""The guest kernel: resolved from the distribution's package archive, fetched once, cached, version recorded.

A kernel is named by an alias (``debian-6.1``: whatever ``linux-image-amd64`` depends on in this machine's apt
sources) or pinned exactly (``6.1.0-57-amd64``). It is fetched with ``apt-get download`` only, unpacked with
``dpkg-deb -x`` under ``<cache>/<version>/`` (vng finds ``lib/modules`` beside ``boot/``), ``depmod`` is run there
once, and the XZ-compressed bzImage is also unpacked to an ELF ``vmlinux`` (it boots faster under TCG: no
decompression by the emulated CPU; docs/bench.md). Once an alias is cached it stays pinned to that version until ``refresh=True``.
"""

from __future__ import annotations

import fcntl
import json
import lzma
import re
import shutil
import subprocess
import tempfile
import time
import zlib
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from testbed.vm.errors import KernelUnavailable

DEFAULT_CACHE = Path("/var/lib/testbed/kernels")
CACHE_ENV = "TESTBED_KERNEL_CACHE"  # moves the cache; read by the entries (`testbed vm`, `testbed run --kernel`)


def kernel_cache(env: Mapping[str, str]) -> Path:
    """The kernel cache the entry's environment ``env`` names (``TESTBED_KERNEL_CACHE``), else ``DEFAULT_CACHE``."""
    return Path(env.get(CACHE_ENV, str(DEFAULT_CACHE)))


# alias -> the apt meta package whose dependency names the concrete kernel
ALIASES: dict[str, str] = {"debian-6.1": "linux-image-amd64"}
VERSION_RE = re.compile(r"^\d+\.\d+\.\d+-\d+-[a-z0-9][a-z0-9-]*$")  # e.g. 6.1.0-57-amd64
IMAGE_PKG_RE = re.compile(r"^linux-image-(\d+\.\d+\.\d+-\d+-[a-z0-9][a-z0-9-]*)$")


@dataclass(frozen=True)
class KernelImage:
    alias: str
    version: str  # uname -r, e.g. 6.1.0-57-amd64
    package: str  # linux-image-6.1.0-57-amd64
    package_version: str  # Debian version of the package, e.g. 6.1.192-3
    root: Path  # the dpkg-deb -x directory (holds boot/ and lib/modules/)
    image: Path  # what QEMU boots: boot/vmlinux-VER when it could be unpacked, else boot/vmlinuz-VER

    def to_dict(self) -> dict[str, str]:
        return {k: str(v) for k, v in asdict(self).items()}


def parse_depends(text: str) -> str:
    """The concrete ``linux-image-X.Y.Z-N-flavour`` package named in ``apt-cache depends`` output."""
    for line in text.splitlines():
        m = re.match(r"^\s*\|?Depends:\s*(\S+)", line)
        if m and IMAGE_PKG_RE.match(m.group(1)):
            return m.group(1)
    raise KernelUnavailable(f"no linux-image-<version> dependency in apt-cache output: {text.strip()[:200]!r}")


def version_of_package(package: str) -> str:
    m = IMAGE_PKG_RE.match(package)
    if not m:
        raise KernelUnavailable(f"not a kernel image package name: {package}")
    return m.group(1)


def package_for(kernel: str) -> str | None:
    """The exact package for a pinned ``kernel`` (``6.1.0-57-amd64`` or its package name); None for an alias."""
    if kernel in ALIASES:
        return None
    if VERSION_RE.match(kernel):
        return f"linux-image-{kernel}"
    if IMAGE_PKG_RE.match(kernel):
        return kernel
    known = ", ".join(sorted(ALIASES))
    raise KernelUnavailable(f"unknown kernel {kernel!r}: use an alias ({known}) or a version like 6.1.0-57-amd64")


def _run(cmd: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600, check=False)
    except FileNotFoundError as e:
        raise KernelUnavailable(f"{cmd[0]} not found: fetching a kernel needs Debian's apt/dpkg") from e


def resolve_package(meta: str) -> str:
    """Ask apt which concrete kernel ``meta`` depends on (runs ``apt-get update`` once if apt knows nothing)."""
    res = _run(["apt-cache", "depends", meta])
    if res.returncode != 0 or "Depends:" not in res.stdout:
        _run(["apt-get", "update", "-qq"])
        res = _run(["apt-cache", "depends", meta])
    if res.returncode != 0:
        raise KernelUnavailable(f"apt knows no package {meta}: {_last_line(res.stderr)}")
    return parse_depends(res.stdout)


def _last_line(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip() and not ln.startswith("W:")]
    return lines[-1] if lines else "(no message)"


def extract_vmlinux(bzimage: Path, out: Path) -> bool:
    """Unpack the ELF kernel from an XZ- or gzip-compressed bzImage; False when neither is found.

    Own code because no Debian 12 package ships ``extract-vmlinux`` outside a kernel source tree.
    """
    data = bzimage.read_bytes()
    candidates = [
        (b"\xfd7zXZ\x00", lambda b: lzma.LZMADecompressor().decompress(b)),
        (b"\x1f\x8b\x08", lambda b: zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(b)),
    ]
    for magic, decompress in candidates:
        start = data.find(magic)
        while start >= 0:
            try:
                elf = decompress(data[start:])
            except (lzma.LZMAError, zlib.error):
                elf = b""
            if elf[:4] == b"\x7fELF":
                tmp = out.with_suffix(".tmp")
                tmp.write_bytes(elf)
                tmp.rename(out)
                return True
            start = data.find(magic, start + 1)
    return False


def _alias_file(cache: Path, alias: str) -> Path:
    return cache / f"{alias}.json"


def _load(cache: Path, version: str, alias: str) -> KernelImage | None:
    meta_path = cache / version / "kernel.json"
    if not meta_path.exists():
        return None
    meta = json.loads(meta_path.read_text())
    image = Path(meta["image"])
    if not image.exists():
        return None
    return KernelImage(
        alias=alias,
        version=meta["version"],
        package=meta["package"],
        package_version=meta["package_version"],
        root=Path(meta["root"]),
        image=image,
    )


def cached_kernel(kernel: str, cache: Path = DEFAULT_CACHE) -> KernelImage | None:
    """The cached kernel for an alias or pinned version, without asking apt; None when not cached."""
    pkg = package_for(kernel)
    if pkg is not None:
        return _load(cache, version_of_package(pkg), kernel)
    alias_path = _alias_file(cache, kernel)
    if not alias_path.exists():
        return None
    return _load(cache, json.loads(alias_path.read_text())["version"], kernel)


def _fetch(package: str, cache: Path, alias: str) -> KernelImage:
    version = version_of_package(package)
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=cache) as tmp_s:
        tmp = Path(tmp_s)
        res = _run(["apt-get", "download", "-o", "APT::Sandbox::User=root", package], cwd=tmp)
        debs = list(tmp.glob("*.deb"))
        if res.returncode != 0 or not debs:
            raise KernelUnavailable(f"kernel package {package} unavailable from the archive: {_last_line(res.stderr)}")
        deb = debs[0]
        pkg_version = _run(["dpkg-deb", "-f", str(deb), "Version"]).stdout.strip()
        root = tmp / "root"
        res = _run(["dpkg-deb", "-x", str(deb), str(root)])
        if res.returncode != 0:
            raise KernelUnavailable(f"dpkg-deb -x {deb.name} failed: {_last_line(res.stderr)}")
        _run(["depmod", "-a", "-b", str(root), version])  # the .deb ships no modules.dep; postinst would make it
        final = cache / version
        vmlinuz = final / "boot" / f"vmlinuz-{version}"
        vmlinux = final / "boot" / f"vmlinux-{version}"
        if not (root / "boot" / vmlinuz.name).exists():
            raise KernelUnavailable(f"{package} holds no boot/{vmlinuz.name}")
        image = vmlinux if extract_vmlinux(root / "boot" / vmlinuz.name, root / "boot" / vmlinux.name) else vmlinuz
        meta = {
            "version": version,
            "package": package,
            "package_version": pkg_version,
            "root": str(final),
            "image": str(image),
            "fetched_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        (root / "kernel.json").write_text(json.dumps(meta, indent=1) + "\n")
        if final.exists():
            shutil.rmtree(final)
        root.rename(final)
    loaded = _load(cache, version, alias)
    assert loaded is not None
    return loaded


def ensure_kernel(kernel: str = "debian-6.1", cache: Path = DEFAULT_CACHE, refresh: bool = False) -> KernelImage:
    """The cached kernel, fetching it from the package archive on first use (one lock per cache dir)."""
    if not refresh:
        found = cached_kernel(kernel, cache)
        if found is not None:
            return found
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not refresh:
            found = cached_kernel(kernel, cache)  # someone else fetched it while we waited
            if found is not None:
                return found
        pkg = package_for(kernel)
        if pkg is None:
            pkg = resolve_package(ALIASES[kernel])
        found = _load(cache, version_of_package(pkg), kernel) or _fetch(pkg, cache, kernel)
        if kernel in ALIASES:
            _alias_file(cache, kernel).write_text(json.dumps({"alias": kernel, "version": found.version}) + "\n")
        return found
