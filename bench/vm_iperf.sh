#!/bin/sh
# Runs INSIDE the guest (python3 -m testbed vm -- sh bench/vm_iperf.sh [MTU] [SECONDS]): h1 -> router -> h2 in
# three scratch namespaces, HTB 100 Mbit/s + bfifo 300 KB on the router's egress to h2, one iperf3 flow (cubic).
# Prints iperf3's JSON. Everything is deleted on exit.
set -eu
MTU=${1:-1500}
SECS=${2:-5}
A=tbvmb-h1 R=tbvmb-r B=tbvmb-h2
cleanup() { for n in $A $R $B; do ip netns del "$n" 2>/dev/null || true; done; }
trap cleanup EXIT
for n in $A $R $B; do ip netns add "$n"; ip -n "$n" link set lo up; done
ip link add h1-r netns $A mtu "$MTU" type veth peer name r-h1 netns $R mtu "$MTU"
ip link add r-h2 netns $R mtu "$MTU" type veth peer name h2-r netns $B mtu "$MTU"
ip -n $A addr add 10.99.1.1/24 dev h1-r; ip -n $R addr add 10.99.1.2/24 dev r-h1
ip -n $R addr add 10.99.2.1/24 dev r-h2; ip -n $B addr add 10.99.2.2/24 dev h2-r
for pair in "$A h1-r" "$R r-h1" "$R r-h2" "$B h2-r"; do set -- $pair; ip -n "$1" link set "$2" up; done
ip -n $A route add default via 10.99.1.2; ip -n $B route add default via 10.99.2.1
ip netns exec $R sysctl -qw net.ipv4.ip_forward=1
ip netns exec $R tc qdisc add dev r-h2 root handle 1: htb default 1
ip netns exec $R tc class add dev r-h2 parent 1: classid 1:1 htb rate 100mbit
ip netns exec $R tc qdisc add dev r-h2 parent 1:1 handle 10: bfifo limit 300000
ip netns exec $B iperf3 -s -1 -D
i=0  # wait (bounded) for the server to listen
until ip netns exec $B ss -Hltn 'sport = :5201' | grep -q .; do i=$((i+1)); [ $i -lt 100 ] || exit 3; sleep 0.1; done
ip netns exec $A iperf3 -c 10.99.2.2 -t "$SECS" -O 1 -C cubic -J
ip netns exec $R tc -s qdisc show dev r-h2 >&2
