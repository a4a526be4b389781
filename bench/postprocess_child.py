"""Child of ``bench.postprocess``: one measurement against the code tree given first, printed as one JSON line.

    python3 bench/postprocess_child.py TREE post RUN_DIR...   # per record: CPU s of read + guardrails + summary
    python3 bench/postprocess_child.py TREE summary RUN_DIR... # the summary and guardrail verdict of each record

Only the standard library is imported before TREE goes first on sys.path, so the same file measures any revision.
"""

from __future__ import annotations

import inspect
import json
import sys
import time
from pathlib import Path
from typing import Any


def _window(manifest: dict[str, Any]) -> tuple[float, float] | None:
    w = manifest.get("traffic_window")
    return (float(w[0]), float(w[1])) if w else None


def _evaluate(path: Path) -> tuple[Any, dict[str, Any], dict[str, Any]]:
    """What a run does after its traffic, as the tree's own run_point does it: one reading shared when the tree's
    ``finish_run`` takes the read run, else the guardrails on the directory and a second reading for the summary."""
    from results import fidelity, metrics
    from results.record import load_run

    shared = "run" in inspect.signature(metrics.finish_run).parameters
    if shared:
        run = load_run(path)
        verdict = fidelity.evaluate_run(run, window=_window(run.manifest))
    else:
        manifest = json.loads((path / "manifest.json").read_text())
        verdict = fidelity.evaluate_run(path, window=_window(manifest))
        run = load_run(path)
    return run, verdict, metrics.summarize(run)


def main(argv: list[str]) -> int:
    tree, mode, paths = argv[0], argv[1], [Path(p) for p in argv[2:]]
    sys.path.insert(0, tree)
    c0 = time.process_time()
    import results.fidelity
    import results.metrics  # noqa: F401

    out: dict[str, Any] = {"import_cpu_s": time.process_time() - c0, "runs": {}}
    for p in paths:
        c1 = time.process_time()
        _run, verdict, summary = _evaluate(p)
        cpu = time.process_time() - c1
        out["runs"][p.name] = {"cpu_s": cpu} if mode == "post" else {"summary": summary, "fidelity": verdict}
    print(json.dumps(out, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
