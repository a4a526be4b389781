"""Bad scenario files through the real command line (no root needed): exit code 2, ONE line on stderr naming the key
and the reason, and nothing built (no namespace, no state file, no run directory)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PY = "/usr/bin/python3" if Path("/usr/bin/python3").exists() else sys.executable
STATE_DIR = Path("/run/testbed")
RUN_NETNS = re.compile(r"^(tb[0-9a-f]{4})-")

GOOD_FABRIC = "fabric: {spines: 2, leaves: 2, hosts_per_leaf: 1}\n"

CASES = {
    "unknown-key": ("name: x\nfabric: {spinez: 2}\n", ["fabric.spinez", "unknown key"]),
    "unknown-top-key": ("name: x\n" + GOOD_FABRIC + "duraton: 5s\n", ["duraton", "unknown key"]),
    "negative-rate": (
        "name: x\nfabric:\n  host_link: {rate: -100Mbit}\n",
        ["fabric.host_link.rate", "must be positive"],
    ),
    "negative-bare-rate": ("name: x\nfabric:\n  fabric_link: {rate: -5}\n", ["fabric.fabric_link.rate", "positive"]),
    "missing-name": (GOOD_FABRIC, ["name", "required key is missing"]),
    "missing-fabric": ("name: x\n", ["fabric", "required key is missing"]),
    "missing-ecn-k": (
        "name: x\nfabric:\n  host_link: {ecn: {mode: step}}\n",
        ["fabric.host_link.ecn.k", "required key is missing"],
    ),
    "k-above-buffer": (
        "name: x\nfabric:\n  host_link: {buffer: 50KB, ecn: {mode: step, k: 60KB}}\n",
        ["fabric.host_link.ecn.k", "above the buffer"],
    ),
    "odd-fat-tree": ("name: x\nfabric: {topology: fat-tree, k: 3}\n", ["fabric.k", "even k"]),
    "override-missing-link": (
        "name: x\nfabric:\n  overrides: [{port: 'l9->l9h1', rate: 5Mbit}]\n",
        ["fabric.overrides[0]", "names no link"],
    ),
    "bad-sweep-point": (
        "name: x\n" + GOOD_FABRIC + "sweep:\n  fabric.spines: [2, 0]\n",
        ["fabric.spines", "in sweep point fabric.spines=0"],
    ),
    "bad-workload": ("name: x\n" + GOOD_FABRIC + "workload: [{kind: teleport, name: j}]\n", ["workload[0].kind"]),
    "invalid-yaml": ("name: x\nfabric: {spines: 2\n", ["not valid YAML", "line "]),
    "invalid-yaml-indent": ("name: x\nfabric:\n  spines: 2\n   leaves: 3\n", ["not valid YAML (line 4, column 10)"]),
    "not-a-mapping": ("- name\n- fabric\n", ["must hold a mapping"]),
    # these crashed (TypeError) or were accepted and failed after the build
    "null-fabric": ("name: x\nfabric: null\n", ["fabric", "expected a mapping"]),
    "zero-duration": ("name: x\n" + GOOD_FABRIC + "duration: 0\n", ["duration", "must be above 0"]),
    "zero-queue-hz": ("name: x\n" + GOOD_FABRIC + "telemetry: {queue_hz: 0}\n", ["telemetry.queue_hz"]),
    "zero-link-hz": ("name: x\n" + GOOD_FABRIC + "telemetry: {link_hz: 0}\n", ["telemetry.link_hz"]),
    # this failed after the build (the sampler's ConfigError) instead of before it
    "link-hz-above-queue-hz": (
        "name: x\n" + GOOD_FABRIC + "telemetry: {queue_hz: 50, link_hz: 100}\n",
        ["telemetry.link_hz", "above queue_hz (50 Hz)"],
    ),
    "huge-size": (
        "name: x\n" + GOOD_FABRIC + "workload: [{kind: allreduce, name: ar, size: 1e18}]\n",
        ["workload[0].size", "above the job's timeout"],
    ),
    "job-longer-than-run": (
        "name: x\n"
        + GOOD_FABRIC
        + "duration: 10s\nworkload: [{kind: iperf, name: f, src: l1h1, dst: l2h1, duration: 30}]\n",
        ["workload[0].duration", "above the scenario's duration of 10 s"],
    ),
    "huge-buffer": (
        "name: x\nfabric:\n  host_link: {buffer: 100GB}\n",
        ["fabric.host_link.buffer", "32-bit"],
    ),
}


def netns() -> set[str]:
    if not shutil.which("ip"):
        return set()
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=10).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def state_files() -> set[str]:
    return {p.name for p in STATE_DIR.glob("tb*.json")} if STATE_DIR.is_dir() else set()


def run_cli(*argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {**os.environ, **(env or {})}
    full_env.pop("TESTBED_DEBUG", None)
    return subprocess.run(
        [PY, "-m", "testbed", *argv], cwd=REPO, capture_output=True, text=True, timeout=60, env=full_env
    )


def check_one_line(cp: subprocess.CompletedProcess[str], needles: list[str]) -> str:
    lines = cp.stderr.splitlines()
    assert cp.returncode == 2, f"rc {cp.returncode}, stderr: {cp.stderr!r}"
    assert len(lines) == 1, f"expected one line on stderr, got {len(lines)}: {cp.stderr!r}"
    line = lines[0]
    assert line.startswith("error: "), line
    assert "Traceback" not in cp.stderr
    for needle in needles:
        assert needle in line, f"{needle!r} not in {line!r}"
    return line


@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[subprocess.CompletedProcess[str], Path]]:
    """Every case through `python3 -m testbed run`, all at once (they are independent; this halves the wall time)."""
    root = tmp_path_factory.mktemp("bad")
    jobs = {}
    for case, (text, _) in CASES.items():
        (root / f"{case}.yaml").write_text(text)
        out = root / f"{case}-runs"
        out.mkdir()
        jobs[case] = (str(root / f"{case}.yaml"), out)
    ns_before = netns()
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        futures = {
            case: pool.submit(run_cli, "run", f, "-o", str(out), "--no-report") for case, (f, out) in jobs.items()
        }
        results = {case: (fut.result(), jobs[case][1]) for case, fut in futures.items()}
    # nothing built: no namespace of a run that is not live (another person's live run may come and go meanwhile)
    live = {Path(name).stem for name in state_files()}
    new_ns = {ns for ns in netns() - ns_before if (m := RUN_NETNS.match(ns)) and m.group(1) not in live}
    assert new_ns == set(), f"bad scenario files left namespaces behind: {sorted(new_ns)}"
    return results


@pytest.mark.parametrize("case", sorted(CASES))
def test_run_bad_file(case: str, bad_runs: dict[str, tuple[subprocess.CompletedProcess[str], Path]]) -> None:
    cp, out = bad_runs[case]
    check_one_line(cp, CASES[case][1])
    assert cp.stdout == ""
    assert list(out.iterdir()) == []  # no run directory, no report


def test_run_file_not_utf8(tmp_path: Path) -> None:
    f = tmp_path / "latin1.yaml"
    f.write_bytes(b"name: x\ndescription: caf\xe9\n" + GOOD_FABRIC.encode())
    check_one_line(run_cli("run", str(f), "-o", str(tmp_path / "runs"), "--no-report"), ["not UTF-8", "0xe9"])


def test_run_missing_file(tmp_path: Path) -> None:
    out = tmp_path / "runs"
    out.mkdir()
    cp = run_cli("run", str(tmp_path / "nope.yaml"), "-o", str(out))
    check_one_line(cp, ["nope.yaml", "does not exist"])
    assert list(out.iterdir()) == []


def test_run_directory_as_file(tmp_path: Path) -> None:
    cp = run_cli("run", str(tmp_path), "-o", str(tmp_path / "runs"))
    check_one_line(cp, ["cannot read scenario file"])
    assert not (tmp_path / "runs").exists()


def test_mininet_cli_bad_file(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(CASES["negative-rate"][0])
    check_one_line(run_cli("cli", str(scenario)), ["fabric.host_link.rate", "must be positive"])


GUARD = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    marker = Path(sys.argv[1])
    def refuse(*a, **k):
        marker.write_text("build attempted")
        raise SystemExit(99)
    import testbed.fabric.build, testbed.host.ownership
    testbed.fabric.build.Fabric.__init__ = refuse
    testbed.host.ownership.RunLock.__enter__ = refuse
    testbed.host.ownership.clean = refuse
    from testbed.cli import main
    raise SystemExit(main(sys.argv[2:]))
    """
)


@pytest.mark.parametrize("case", ["unknown-key", "negative-rate", "missing-name", "bad-sweep-point"])
def test_run_bad_file_never_reaches_the_build(case: str, tmp_path: Path) -> None:
    """Deterministic form of "builds nothing": any attempt to build a fabric or take the run lock is caught."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(CASES[case][0])
    marker = tmp_path / "built"
    cp = subprocess.run(
        [PY, "-c", GUARD, str(marker), "run", str(scenario), "-o", str(tmp_path / "runs")],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert not marker.exists(), "the run tried to build or lock before rejecting the file"
    check_one_line(cp, CASES[case][1])
