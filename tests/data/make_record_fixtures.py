"""Make the recorded fixtures of tests/unit/test_record_fixtures.py from real run records.

    python3 tests/data/make_record_fixtures.py RUN_DIR... --golden-from REV

Each record is cut to ``SLICE_S`` seconds of its traffic window (the time-series tables; the per-flow and
per-iteration tables are kept whole) and packed into ``records.tar.xz`` beside this file with ``expected.json``:
the summary and guardrail verdict that revision REV's code computes on the cut record (``bench/postprocess_child.py
TREE summary``), which the test holds today's code to.
"""

from __future__ import annotations

import argparse
import csv
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))

from bench.baseline import checkout  # noqa: E402

SLICE_S = 0.8
TIME_COLUMN = {"queues": "t", "links": "t", "cpu": "t", "senders": "t", "flow_samples": "t", "rtt": "t_send"}
OUT = HERE / "records.tar.xz"


def cut(src: Path, dst: Path) -> None:
    """Copy a record with its time-series tables cut to SLICE_S seconds from the traffic window's start + 1 s."""
    dst.mkdir(parents=True)
    manifest = json.loads((src / "manifest.json").read_text())
    t0 = float(manifest["traffic_window"][0]) + 1.0
    shutil.copy(src / "manifest.json", dst / "manifest.json")
    for name in ("sampler_health.json", "raw/sampler_health.json"):
        if (src / name).exists():
            shutil.copy(src / name, dst / "sampler_health.json")
            break
    for table in sorted(src.glob("*.csv")):
        col = TIME_COLUMN.get(table.stem)
        with open(table, newline="") as fin, open(dst / table.name, "w", newline="") as fout:
            rows = csv.reader(fin)
            out = csv.writer(fout, lineterminator="\n")
            header = next(rows)
            out.writerow(header)
            i = header.index(col) if col in header else None
            for r in rows:
                if i is None or (r[i] and t0 <= float(r[i]) <= t0 + SLICE_S):
                    out.writerow(r)


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--golden-from", required=True, help="the revision whose code computes expected.json")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tb-fixtures-") as tmp:
        root = Path(tmp) / "records"
        names = []
        for src in args.runs:
            name = json.loads((src / "manifest.json").read_text())["scenario_name"]
            cut(src, root / name)
            names.append(name)
        with checkout(args.golden_from) as tree:
            got = subprocess.run(
                [sys.executable, str(HERE.parent.parent / "bench/postprocess_child.py"), str(tree), "summary"]
                + [str(root / n) for n in names],
                capture_output=True,
                text=True,
                check=True,
            )
        expected = json.loads(got.stdout.strip().splitlines()[-1])["runs"]
        for n in names:
            (root / n / "expected.json").write_text(json.dumps(expected[n], indent=1, sort_keys=True) + "\n")
        with tarfile.open(OUT, "w:xz") as tar:
            tar.add(root, arcname="records")
    print(f"{OUT}: {len(names)} records ({OUT.stat().st_size / 1e3:.0f} KB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
