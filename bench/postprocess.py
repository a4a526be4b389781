"""Post-processing cost of run records, this checkout against a baseline revision, side by side.

    python3 -m bench.postprocess RUN_DIR... [--against REV] [--repeat 3] [--report-copies 10]

Per record: CPU seconds of what a run does after its traffic (read the tables, the fidelity guardrails, the
summary), in a fresh process, the median of ``--repeat``; the imports are timed apart. Then ``testbed report`` over
the records given (each copied ``--report-copies`` times, as more repetitions of the same points): wall seconds,
CPU seconds and peak memory (max RSS). The baseline is REV checked out in a temporary git worktree
(``bench.baseline``) and measured by the same child script (``bench/postprocess_child.py``). Reads records only:
no root, no emulation. See docs/bench.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.baseline import REPO, checkout

CHILD = Path(__file__).resolve().parent / "postprocess_child.py"


def _child(tree: Path, mode: str, paths: list[Path]) -> dict[str, Any]:
    got = subprocess.run(
        [sys.executable, str(CHILD), str(tree), mode, *map(str, paths)], capture_output=True, text=True, check=False
    )
    if got.returncode != 0:
        raise RuntimeError(f"{tree}: the child failed: {got.stderr.strip()[-2000:]}")
    return dict(json.loads(got.stdout.strip().splitlines()[-1]))


def post_cpu(tree: Path, paths: list[Path], repeat: int) -> dict[str, Any]:
    """Median over ``repeat`` fresh processes of each record's CPU seconds, and of the imports'."""
    takes = [_child(tree, "post", paths) for _ in range(repeat)]
    runs = {p.name: statistics.median(t["runs"][p.name]["cpu_s"] for t in takes) for p in paths}
    spread = {p.name: [round(t["runs"][p.name]["cpu_s"], 3) for t in takes] for p in paths}
    return {"import_cpu_s": statistics.median(t["import_cpu_s"] for t in takes), "runs": runs, "spread": spread}


def report_cost(tree: Path, paths: list[Path]) -> dict[str, float]:
    """``testbed report`` over ``paths`` run from ``tree``: wall s, CPU s and max RSS (MB) of that process."""
    with tempfile.TemporaryDirectory(prefix="tb-report-bench-") as out:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "testbed", "report", *map(str, paths), "-o", out],
            cwd=tree,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.monotonic() - t0
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
        proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise RuntimeError(f"{tree}: report failed: {err.strip()[-2000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "max_rss_mb": usage.ru_maxrss / 1024}


def copies(paths: list[Path], n: int, into: Path) -> list[Path]:
    """``n`` copies of each record (run_id and repeat index made distinct): a report over n x len(paths) runs."""
    out = []
    for i in range(n):
        for p in paths:
            dst = into / f"{p.name}-copy{i}"
            shutil.copytree(p, dst)
            mf = json.loads((dst / "manifest.json").read_text())
            mf["run_id"], mf["repeat_index"] = dst.name, int(mf.get("repeat_index") or 0) + 1000 * i
            (dst / "manifest.json").write_text(json.dumps(mf))
            out.append(dst)
    return out


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="python3 -m bench.postprocess", description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path, metavar="RUN_DIR")
    ap.add_argument("--against", default="HEAD", help="baseline git revision (default HEAD: the committed code)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--report-copies", type=int, default=10, help="copies of each record in the report measure")
    args = ap.parse_args(argv)
    paths = [p.resolve() for p in args.runs]
    with checkout(args.against) as base, tempfile.TemporaryDirectory(prefix="tb-report-runs-") as tmp:
        new, old = post_cpu(REPO, paths, args.repeat), post_cpu(base, paths, args.repeat)
        for p in paths:
            a, b = old["runs"][p.name], new["runs"][p.name]
            print(
                f"post-processing {p.name}: {args.against} {a:.3f} s CPU {old['spread'][p.name]} | this "
                f"{b:.3f} s {new['spread'][p.name]} | {args.against}/this {a / b:.1f}x"
            )
        print(f"imports: {args.against} {old['import_cpu_s']:.3f} s CPU | this {new['import_cpu_s']:.3f} s")
        many = copies(paths, args.report_copies, Path(tmp))
        ro, rn = report_cost(base, many), report_cost(REPO, many)
        print(
            f"report over {len(many)} records: {args.against} {ro['wall_s']:.1f} s wall, {ro['cpu_s']:.1f} s CPU, "
            f"{ro['max_rss_mb']:.0f} MB max RSS | this {rn['wall_s']:.1f} s, {rn['cpu_s']:.1f} s CPU, "
            f"{rn['max_rss_mb']:.0f} MB | wall {args.against}/this {ro['wall_s'] / rn['wall_s']:.1f}x"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
