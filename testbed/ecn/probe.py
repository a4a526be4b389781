"""What marking and DCTCP implementations this machine will use (for `testbed doctor` and choose_impl)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from testbed.bpf.build import DEFAULT_OUT
from testbed.bpf.errors import BpfError
from testbed.bpf.sysrun import BPFFS, ensure_bpffs, run, tool
from testbed.ecn.cc import available
from testbed.ecn.errors import EcnError
from testbed.host.trials import RED_ECN_TRIAL

BTF = Path("/sys/kernel/btf/vmlinux")


def _btf_has(*names: str) -> dict[str, bool]:
    data = BTF.read_bytes() if BTF.exists() else b""
    return {n: (b"\0" + n.encode() + b"\0") in data for n in names}


def _probe_red(netns: str) -> tuple[bool, str]:
    args = ["tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", *RED_ECN_TRIAL]
    res = run(args, netns, check=False)
    if res.returncode == 0:
        run(["tc", "qdisc", "del", "dev", "lo", "root"], netns, check=False)
        return True, ""
    return False, f"sch_red is not in this kernel (tc: {res.stderr.strip()[-200:]})"


def _probe_marker(build_dir: Path) -> tuple[bool, str]:
    obj = build_dir / "marker.bpf.o"
    if not obj.exists():
        return False, f"{obj} is not built (`python3 -m testbed.bpf.build`)"
    if not _btf_has("bpf_cast_to_kern_ctx")["bpf_cast_to_kern_ctx"]:
        return (
            False,
            "kernel lacks the bpf_cast_to_kern_ctx kfunc (Linux >= 6.2 with BTF) the marker reads the backlog with",
        )
    ensure_bpffs()
    with tempfile.TemporaryDirectory(dir=BPFFS, prefix="tbprobe-") as pin:
        res = run(
            [tool("bpftool"), "prog", "load", str(obj), f"{pin}/prog", "type", "classifier", "pinmaps", pin],
            check=False,
        )
    if res.returncode != 0:
        return False, f"the marker does not load: {res.stderr.strip()[-300:]}"
    return True, ""


def probe(caps_scratch_netns: str, build_dir: Path = DEFAULT_OUT) -> dict[str, Any]:
    """Keys: sch_red, sch_red_reason, bpf_marker, bpf_marker_reason, marking_auto ("kernel"|"bpf"|None),
    dctcp ("kernel"|"bpf"|None), dctcp_reason. Loads nothing that outlives the call."""
    red_ok, red_why = _probe_red(caps_scratch_netns)
    try:
        bpf_ok, bpf_why = _probe_marker(Path(build_dir))
    except (EcnError, BpfError) as exc:
        bpf_ok, bpf_why = False, str(exc)
    dctcp: str | None
    if "dctcp" in available() or Path("/sys/module/tcp_dctcp").exists():
        dctcp, dctcp_why = "kernel", ""
    elif Path(f"/lib/modules/{Path('/proc/sys/kernel/osrelease').read_text().strip()}").exists() and (
        run(["modprobe", "-n", "-q", "tcp_dctcp"], check=False).returncode == 0
    ):
        dctcp, dctcp_why = "kernel", "tcp_dctcp module (loaded by the run)"
    else:
        has = _btf_has("bpf_struct_ops_tcp_congestion_ops", "tcp_reno_cong_avoid")
        built = (Path(build_dir) / "dctcp.bpf.o").exists()
        if all(has.values()) and built:
            dctcp, dctcp_why = "bpf", "no tcp_dctcp in this kernel: the project's BPF struct_ops DCTCP"
        else:
            dctcp = None
            dctcp_why = "no tcp_dctcp and " + (
                "no BPF struct_ops for tcp_congestion_ops" if not all(has.values()) else "dctcp.bpf.o not built"
            )
    return {
        "sch_red": red_ok,
        "sch_red_reason": red_why,
        "bpf_marker": bpf_ok,
        "bpf_marker_reason": bpf_why,
        "marking_auto": "kernel" if red_ok else ("bpf" if bpf_ok else None),
        "dctcp": dctcp,
        "dctcp_reason": dctcp_why,
    }
