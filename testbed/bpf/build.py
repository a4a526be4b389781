"""Build the project's eBPF objects: ``python3 -m testbed.bpf.build [--out DIR]`` (default: build/bpf/ in the repo).

Needs clang (-target bpf), libbpf-dev (headers) and bpftool (to dump vmlinux.h from the running kernel's BTF at
/sys/kernel/btf/vmlinux, or from --btf FILE). Exits non-zero with the reason when something is missing.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from testbed.bpf.errors import BpfError

SRC_DIR = Path(__file__).resolve().parent / "src"
REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "build" / "bpf"
# (source, object name, -D defines): qtelem_compat reads the skb's shared info with a helper (kernels before 6.2)
OBJECTS = (
    ("marker.bpf.c", "marker", ()),
    ("dctcp.bpf.c", "dctcp", ()),
    ("qtelem.bpf.c", "qtelem", ()),
    ("qtelem.bpf.c", "qtelem_compat", ("QT_PROBE_READ",)),
    ("flowlet.bpf.c", "flowlet", ()),
    ("pfc.bpf.c", "pfc", ()),
)
# objects built for BPF ISA v3 (kernel 5.12 on): atomics that return the old value, compare-and-swap
CPU_V3 = {"pfc"}
DCTCP_NAME_PLACEHOLDER = b"dctcp_XXXXXXXXX"
BTF = Path("/sys/kernel/btf/vmlinux")


def _tool(name: str, pkg: str) -> str:
    path = shutil.which(name) or (f"/usr/sbin/{name}" if Path(f"/usr/sbin/{name}").exists() else None)
    if not path:
        raise BpfError(f"{name} not found: install it with `apt-get install {pkg}`")
    return path


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(cmd, capture_output=True, text=True, **kw)  # type: ignore[call-overload]
    if res.returncode != 0:
        raise BpfError(f"{' '.join(cmd)} failed ({res.returncode}): {res.stderr.strip()[-2000:]}")
    return res  # type: ignore[no-any-return]


def build(out: Path = DEFAULT_OUT, btf: Path = BTF) -> dict[str, Path]:
    """Compile every source into ``out``; return name -> object path."""
    clang = _tool("clang", "clang")
    bpftool = _tool("bpftool", "bpftool")
    if not Path("/usr/include/bpf/bpf_helpers.h").exists():
        raise BpfError("libbpf headers missing (/usr/include/bpf/bpf_helpers.h): `apt-get install libbpf-dev`")
    if not btf.exists():
        raise BpfError(f"no kernel BTF at {btf}: the kernel needs CONFIG_DEBUG_INFO_BTF=y (or pass --btf FILE)")
    out.mkdir(parents=True, exist_ok=True)
    vmlinux_h = out / "vmlinux.h"
    vmlinux_h.write_text(_run([bpftool, "btf", "dump", "file", str(btf), "format", "c"]).stdout)
    arch = {"x86_64": "x86", "aarch64": "arm64"}.get(
        subprocess.run(["uname", "-m"], capture_output=True, text=True).stdout.strip(), "x86"
    )
    objs: dict[str, Path] = {}
    for src, name, defines in OBJECTS:
        obj = out / f"{name}.bpf.o"
        cmd = [clang, "-target", "bpf", "-O2", "-g", f"-D__TARGET_ARCH_{arch}", *(f"-D{d}" for d in defines)]
        cmd += ["-mcpu=v3"] if name in CPU_V3 else []
        _run([*cmd, "-I", str(out), "-c", str(SRC_DIR / src), "-o", str(obj)])
        objs[name] = obj
    if objs["dctcp"].read_bytes().count(DCTCP_NAME_PLACEHOLDER) != 1:
        raise BpfError(f"{objs['dctcp']}: the DCTCP name placeholder must occur exactly once (the loader rewrites it)")
    return objs


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m testbed.bpf.build", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"output directory (default {DEFAULT_OUT})")
    ap.add_argument("--btf", type=Path, default=BTF, help="BTF file to generate vmlinux.h from")
    args = ap.parse_args(argv)
    try:
        objs = build(args.out, args.btf)
    except BpfError as exc:
        print(f"build failed: {exc}", file=sys.stderr)
        return 1
    for name, path in objs.items():
        print(f"{name}: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
