#!/usr/bin/env bash
# Set up this machine for the testbed (idempotent), then run the default experiment or the tests.
#   sudo ./setup.sh demo     install what is missing, then run the default experiment and print its report's path
#   sudo ./setup.sh test     install what is missing, then run every test: harness tests and scenarios, then (where
#                            this kernel lacks kernel RED, netem or tcp_dctcp) the stock-kernel scenarios in the guest
#   sudo ./setup.sh stock    only the guest pass: the stock-kernel scenarios inside Debian's stock kernel under QEMU
#   sudo ./setup.sh install  only install
# Everything runs on the distribution's /usr/bin/python3, where apt puts mininet, pyroute2, scapy, numpy, ...; pip
# adds mlc-chakra and the `testbed` command (an editable install of this clone) in /usr/local. The first install
# calibrates the machine's CPU cost for the preflight's budget (about 35 s, once).
set -euo pipefail
cd "$(dirname "$0")"

if [ "$(id -u)" != 0 ]; then
  echo "setup.sh: run as root (sudo ./setup.sh $*): the testbed builds network namespaces and shapes links" >&2
  exit 1
fi

APT_PACKAGES=(
  mininet bridge-utils iputils-ping iproute2 ethtool nftables procps psmisc kmod
  iperf3 tcpdump iperf telnet
  python3 python3-pyroute2 python3-scapy python3-matplotlib python3-numpy python3-pandas python3-yaml python3-pytest python3-hypothesis python3-pexpect python3-scipy
  python3-venv python3-pip python3-setuptools python3-wheel python3-distributed openssl
  python3-nbclient python3-nbformat python3-ipykernel
  clang llvm libbpf-dev bpftool
)

missing=()
for p in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup.sh: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  # --no-install-recommends: mininet recommends Open vSwitch, which the routed fabric does not use
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

PY=/usr/bin/python3
# Chakra execution traces (kind: trace) are read with MLCommons' own package; Debian has neither it nor a protobuf
# new enough for its generated schema (6.31), so pip puts both in /usr/local; --no-deps: the trace reader needs
# only the schema and its reader, not mlc-chakra's converters (networkx, pydot, HolisticTraceAnalysis)
if ! $PY -c 'from chakra.schema.protobuf import et_def_pb2' 2>/dev/null; then
  echo "setup.sh: installing mlc-chakra and protobuf with pip (/usr/local)"
  $PY -m pip install -q --break-system-packages --no-deps 'mlc-chakra==1.0.0' 'protobuf>=6.31.1,<7'
fi
# The `testbed` command (/usr/local/bin/testbed) for this interpreter, so that `sudo testbed demo` and `testbed
# report` work from any directory: an editable install, so this clone stays the code that runs (and its git revision
# the one `testbed --version` and the records name). --no-deps: apt installed the dependencies above;
# --no-build-isolation: Debian's setuptools and wheel build it, nothing is downloaded. Skipped when this clone is
# already the one installed.
installed_from=$(cd / && $PY -c '
import json, os
from importlib.metadata import distribution
url = json.loads(distribution("ai-fabric-testbed").read_text("direct_url.json") or "{}")
print(os.path.realpath(url["url"].removeprefix("file://")) if url.get("dir_info", {}).get("editable") else "")
' 2>/dev/null || true)
if [ "$installed_from" != "$(pwd -P)" ] || [ ! -x /usr/local/bin/testbed ]; then
  echo "setup.sh: installing the testbed command for $PY (pip install -e $(pwd -P), /usr/local)"
  $PY -m pip install -q --break-system-packages --root-user-action=ignore --no-deps --no-build-isolation -e .
fi
# The guest pass: every stock_kernel scenario in one boot of Debian's stock kernel (testbed vm installs QEMU and
# virtme-ng on first use)
GUEST_PASS=($PY -m testbed vm -- $PY -m pytest -p no:cacheprovider -m stock_kernel scenarios)
# The software-emulated guest leaves its scenario reports to the host (scenarios/conftest.py): write them here.
write_guest_reports() { $PY -m testbed report --pending "${TESTBED_SCENARIO_RUNS:-runs/scenarios}" >/dev/null; }
# The eBPF ECN marker and BPF DCTCP, compiled from this repo's C sources for this kernel (build/bpf/)
$PY -W ignore::RuntimeWarning -m testbed.bpf.build >/dev/null
# The preflight's CPU budget reads this machine's calibration; without one it falls back to built-in constants
# (another machine's), which may refuse an ordinary scenario here. Calibrate once, when none matches this machine.
if ! $PY -c 'from testbed.calibrate.cache import load_matching; raise SystemExit(load_matching() is None)'; then
  echo "setup.sh: calibrating this machine's CPU cost for the preflight (once, about 35 s: builds a small fabric)"
  if ! out=$($PY -m testbed calibrate --wait 900 2>&1); then
    echo "setup.sh: calibration failed, so the preflight uses its built-in estimate: $(tail -n 1 <<<"$out")"
  fi
fi

case "${1:-install}" in
  install) echo "setup.sh: ready" ;;
  demo) shift; exec $PY -m testbed demo "$@" ;;
  test)
    shift
    rc=0
    $PY -m pytest --durations=25 tests scenarios "$@" || rc=$?
    # On a stock kernel the stock_kernel scenarios ran natively just now; elsewhere they skipped, saying what the
    # kernel lacks, and run here in one guest boot (after the native pass: the cross-check reads its eBPF record).
    # With pytest arguments (a subset) there is no guest pass: `./setup.sh stock` runs it alone.
    missing=$($PY -c 'from testbed.host.capabilities import stock_missing; from testbed.fabric.probe import probe; print(" ".join(stock_missing(probe())))') \
      || { echo "setup.sh: the capability probe failed: cannot tell whether the guest pass is needed" >&2; exit 1; }
    if [ -n "$missing" ] && [ $# -eq 0 ]; then
      echo "setup.sh: this kernel lacks $missing: the stock-kernel scenarios run in the guest kernel mode"
      "${GUEST_PASS[@]}" || rc=$?
      write_guest_reports || rc=$?
    elif [ -n "$missing" ]; then
      echo "setup.sh: no guest pass with pytest arguments ($*); this kernel lacks $missing: run ./setup.sh stock"
    fi
    exit $rc ;;
  stock)
    # The guest pass alone. Run `./setup.sh test` (or `pytest scenarios`) first: the RED vs eBPF cross-check
    # compares with the eBPF marker's record that the native scenarios write.
    shift; rc=0; "${GUEST_PASS[@]}" "$@" || rc=$?
    write_guest_reports || rc=$?
    exit $rc ;;
  *) echo "usage: sudo ./setup.sh [install|demo|test|stock]" >&2; exit 2 ;;
esac
