"""Guest kernel resolution (no root, no apt, no network): parsing apt output, names, the cache, vmlinux unpacking."""

from __future__ import annotations

import json
import lzma
from pathlib import Path

import pytest

from testbed.vm.errors import KernelUnavailable
from testbed.vm.kernel import (
    cached_kernel,
    ensure_kernel,
    extract_vmlinux,
    package_for,
    parse_depends,
    version_of_package,
)

# `apt-cache depends linux-image-amd64` on Debian 12, as printed here
DEPENDS = """linux-image-amd64
  Depends: linux-image-6.1.0-57-amd64
"""
# an older meta package that also names a non-image dependency and an alternative
DEPENDS_OTHER = """linux-image-amd64
  PreDepends: debconf
 |Depends: linux-image-6.1.0-21-amd64
  Recommends: firmware-linux-free
"""


def test_parse_depends_finds_the_concrete_image() -> None:
    assert parse_depends(DEPENDS) == "linux-image-6.1.0-57-amd64"
    assert parse_depends(DEPENDS_OTHER) == "linux-image-6.1.0-21-amd64"


def test_parse_depends_rejects_output_without_an_image() -> None:
    with pytest.raises(KernelUnavailable, match="no linux-image"):
        parse_depends("linux-image-amd64\n  Depends: initramfs-tools\n")
    with pytest.raises(KernelUnavailable):
        parse_depends("")


def test_version_and_package_names() -> None:
    assert version_of_package("linux-image-6.1.0-57-amd64") == "6.1.0-57-amd64"
    assert package_for("6.1.0-57-amd64") == "linux-image-6.1.0-57-amd64"
    assert package_for("linux-image-6.1.0-57-cloud-amd64") == "linux-image-6.1.0-57-cloud-amd64"
    assert version_of_package("linux-image-6.1.0-57-cloud-amd64") == "6.1.0-57-cloud-amd64"
    assert package_for("debian-6.1") is None  # an alias: apt resolves it
    with pytest.raises(KernelUnavailable, match="unknown kernel"):
        package_for("ubuntu-99")
    with pytest.raises(KernelUnavailable):
        version_of_package("linux-image-amd64")


def _fake_cache(cache: Path, version: str = "6.1.0-57-amd64") -> Path:
    root = cache / version
    (root / "boot").mkdir(parents=True)
    image = root / "boot" / f"vmlinux-{version}"
    image.write_bytes(b"\x7fELF")
    meta = {
        "version": version,
        "package": f"linux-image-{version}",
        "package_version": "6.1.192-3",
        "root": str(root),
        "image": str(image),
    }
    (root / "kernel.json").write_text(json.dumps(meta))
    return image


def test_cached_alias_stays_pinned_without_asking_apt(tmp_path: Path) -> None:
    assert cached_kernel("debian-6.1", tmp_path) is None
    image = _fake_cache(tmp_path)
    (tmp_path / "debian-6.1.json").write_text(json.dumps({"alias": "debian-6.1", "version": "6.1.0-57-amd64"}))
    k = ensure_kernel("debian-6.1", tmp_path)  # would fail (no apt in tmp) if it tried to fetch
    assert k.version == "6.1.0-57-amd64" and k.image == image and k.package_version == "6.1.192-3"
    assert cached_kernel("6.1.0-57-amd64", tmp_path) is not None
    assert cached_kernel("6.1.0-58-amd64", tmp_path) is None


def test_cache_entry_with_missing_image_is_not_used(tmp_path: Path) -> None:
    _fake_cache(tmp_path).unlink()
    assert cached_kernel("6.1.0-57-amd64", tmp_path) is None


def test_extract_vmlinux_from_xz_bzimage(tmp_path: Path) -> None:
    elf = b"\x7fELF" + bytes(range(256)) * 64
    bz = tmp_path / "vmlinuz"
    bz.write_bytes(b"MZ setup code \xfd7zX not-a-stream " + lzma.compress(elf, format=lzma.FORMAT_XZ) + b"\0" * 32)
    out = tmp_path / "vmlinux"
    assert extract_vmlinux(bz, out)
    assert out.read_bytes() == elf


def test_extract_vmlinux_says_no_when_nothing_is_compressed(tmp_path: Path) -> None:
    bz = tmp_path / "vmlinuz"
    bz.write_bytes(b"MZ" + b"\0" * 1000)
    assert not extract_vmlinux(bz, tmp_path / "vmlinux")
    assert not (tmp_path / "vmlinux").exists()


def test_the_cache_is_moved_by_the_entrys_environment_only(monkeypatch: pytest.MonkeyPatch) -> None:
    from testbed.vm.kernel import DEFAULT_CACHE, kernel_cache
    from testbed.vm.tools import VNG_VENV, vng_venv

    monkeypatch.setenv("TESTBED_KERNEL_CACHE", "/elsewhere")  # this process's environment is not read
    assert kernel_cache({}) == DEFAULT_CACHE == Path("/var/lib/testbed/kernels")
    assert kernel_cache({"TESTBED_KERNEL_CACHE": "/x/k"}) == Path("/x/k")
    assert vng_venv({}) == VNG_VENV and vng_venv({"TESTBED_VNG_VENV": "/x/v"}) == Path("/x/v")
