#!/usr/bin/env bash
# Set up this machine for the testbed (idempotent), then run the default experiment or the tests.
#   sudo ./setup.sh demo     install what is missing, then run the default experiment and print its report's path
#   sudo ./setup.sh test     install what is missing, then run every test (harness tests and scenarios)
#   sudo ./setup.sh stock    the stock-kernel scenarios, inside Debian's stock kernel under QEMU (after `test`)
#   sudo ./setup.sh install  only install
# Everything runs on the distribution's /usr/bin/python3, where apt puts mininet, pyroute2, scapy, numpy, ...
set -euo pipefail
cd "$(dirname "$0")"

if [ "$(id -u)" != 0 ]; then
  echo "setup.sh: run as root (sudo ./setup.sh $*): the testbed builds network namespaces and shapes links" >&2
  exit 1
fi

APT_PACKAGES=(
  mininet bridge-utils iputils-ping iproute2 ethtool nftables procps psmisc kmod
  iperf3 tcpdump
  python3 python3-pyroute2 python3-scapy python3-matplotlib python3-numpy python3-yaml python3-pytest python3-venv
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
# The eBPF ECN marker and BPF DCTCP, compiled from this repo's C sources for this kernel (build/bpf/)
$PY -W ignore::RuntimeWarning -m testbed.ecn.build >/dev/null

case "${1:-install}" in
  install) echo "setup.sh: ready" ;;
  demo) shift; exec $PY -m testbed demo "$@" ;;
  test) shift; exec $PY -m pytest tests scenarios "$@" ;;
  stock)
    # The stock-kernel scenarios (kernel RED, kernel DCTCP, netem delay, RED vs eBPF cross-check) inside Debian's
    # stock kernel (testbed vm: installs QEMU and virtme-ng on first use). Run `./setup.sh test` first: the
    # cross-check compares with the eBPF marker's record that the native scenarios write.
    shift; exec $PY -m testbed vm -- $PY -m pytest -p no:cacheprovider -m stock_kernel scenarios "$@" ;;
  *) echo "usage: sudo ./setup.sh [install|demo|test|stock]" >&2; exit 2 ;;
esac
