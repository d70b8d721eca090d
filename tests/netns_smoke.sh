#!/usr/bin/env bash
# netns-bed test: a small allreduce sweep over the network-namespace bed of perf/netns/bed.sh
# (3 hosts, links shaped to 1 Gbit/s). Skips (exit 77) with a reason when the machine cannot
# host the bed: not root, no `ip netns`, or no veth/bridge/tbf in the kernel.
#
#   tests/netns_smoke.sh [BED_SH RING_PERF]   (default: $RING_TEST_NETNS_BED, $RING_TEST_RING_PERF)
set -uo pipefail

bed=${1:-${RING_TEST_NETNS_BED:-}}
ring_perf=${2:-${RING_TEST_RING_PERF:-}}
[[ -n $bed && -n $ring_perf ]] || { echo "netns_smoke: usage: $0 BED_SH RING_PERF" >&2; exit 2; }

skip() { echo "SKIP: netns-bed: $*"; exit 77; }

[[ $(id -u) -eq 0 ]] || skip "not root (network namespaces need root)"
command -v ip >/dev/null || skip "ip (iproute2) not installed"
command -v tc >/dev/null || skip "tc (iproute2) not installed"
ip netns list >/dev/null 2>&1 || skip "'ip netns' is not available"

# Probe what the bed needs in a throw-away namespace, so that a container without the
# privileges or a kernel without the modules is a skip, not a failure.
probe=rcbprobe$$
trap 'ip netns del "$probe" 2>/dev/null' EXIT
ip netns add "$probe" 2>/dev/null || skip "cannot create a network namespace (ip netns add failed)"
ip -n "$probe" link add pa type veth peer name pb 2>/dev/null || skip "no veth support"
ip -n "$probe" link add pbr type bridge 2>/dev/null || skip "no bridge support"
tc -n "$probe" qdisc replace dev pa root tbf rate 1gbit burst 256kb latency 10ms 2>/dev/null ||
    skip "no tbf qdisc"
ip netns del "$probe"
trap - EXIT

out=$(mktemp "${TMPDIR:-/tmp}/netns_smoke.XXXXXX")
logs=$(mktemp -d "${TMPDIR:-/tmp}/netns_smoke_logs.XXXXXX")
prefix=rcbt$$-
# A namespace and a directory whose names only start with the prefix are somebody else's: the
# bed's clean-up must leave them (it removed both until 2026-11-30).
decoy=${prefix}decoy
decoy_dir=${TMPDIR:-/tmp}/${prefix}decoys # six characters after the prefix, as mktemp's XXXXXX
ip netns add "$decoy"
mkdir -p "$decoy_dir" && echo keep >"$decoy_dir/data"
trap 'rm -rf "$out" "$logs" "$decoy_dir"; ip netns del "$decoy" 2>/dev/null' EXIT
rc=0
# The check below is of the default: a RING_TCP_CONGESTION from the caller would pass through.
unset RING_TCP_CONGESTION
RING_DEBUG=INFO RING_DEBUG_SUBSYS=NET RING_DEBUG_FILE="$logs/rank.%p.log" \
    "$bed" -n 3 --timeout 45 --prefix "$prefix" -- "$ring_perf" -C allreduce -b 4 -e 1M -f 16 -n 3 -w 1 -c 1 >"$out" || rc=$?
cat "$out"
if ((rc != 0)); then
    echo "FAIL: netns-bed: bed.sh exited with status $rc" >&2
    exit 1
fi
# Rank 0's table: rows "size count type redop root time algbw busbw #wrong", all checked.
rows=$(awk '$1 ~ /^[0-9]+$/ && NF >= 9 { n++ } END { print n + 0 }' "$out")
if ((rows < 4)); then
    echo "FAIL: netns-bed: expected at least 4 table rows from rank 0, got $rows" >&2
    exit 1
fi
grep -q '^# Out of bounds values : 0 OK' "$out" || { echo "FAIL: netns-bed: wrong elements reported" >&2; exit 1; }
# The namespaces share one kernel: only TCP crosses the shaped links (bed.sh forces it).
grep -q '^# transport (rank 0.s ring edges): from the left tcp, to the right tcp' "$out" ||
    { echo "FAIL: netns-bed: the ranks did not talk TCP over the links" >&2; exit 1; }
# Between hosts RING_TCP_CONGESTION=auto leaves the system's algorithm (new namespaces start
# with the host's default); only connections inside one host get CUBIC. Both the connecting and
# the accepting side of every connection log what their sockets use.
sys_cc=$(cat /proc/sys/net/ipv4/tcp_congestion_control)
ncc=$(cat "$logs"/rank.*.log 2>/dev/null | grep -c 'congestion control ')
other=$(cat "$logs"/rank.*.log 2>/dev/null | grep 'congestion control ' | grep -v "congestion control $sys_cc\b" | head -n 3)
((ncc >= 6)) || { echo "FAIL: netns-bed: expected every rank to log its TCP connections' congestion control, found $ncc lines" >&2; exit 1; }
[[ -z $other ]] || { echo "FAIL: netns-bed: connections between hosts should keep the system's $sys_cc: $other" >&2; exit 1; }
# The plain-socket floor (perf/netns/sock_floor.c) on 2 hosts: both patterns run and add up.
floor=${RING_TEST_SOCK_FLOOR:-}
if [[ -n $floor ]]; then
    frc=0
    "$bed" -n 2 --timeout 45 --prefix "${prefix}f" -- "$floor" -b 4096 -n 50 -w 5 -r 1 >"$out" 2>&1 || frc=$?
    cat "$out"
    ((frc == 0)) || { echo "FAIL: netns-bed: sock_floor exited with status $frc" >&2; exit 1; }
    [[ $(grep -cE '^round 1 (rd|a2a) +[0-9.]+$' "$out") -eq 2 ]] ||
        { echo "FAIL: netns-bed: sock_floor printed no time for rd and a2a" >&2; exit 1; }
fi
ip netns list | awk '{ print $1 }' | grep -qx "$decoy" ||
    { echo "FAIL: netns-bed: bed.sh removed namespace $decoy, which only starts with its prefix" >&2; exit 1; }
[[ $(cat "$decoy_dir/data" 2>/dev/null) == keep ]] ||
    { echo "FAIL: netns-bed: bed.sh removed $decoy_dir, which only starts with its prefix" >&2; exit 1; }
ip netns del "$decoy"
left=$(ip netns list | awk -v p="$prefix" 'index($1, p) == 1 { print $1 }')
[[ -z $left ]] || { echo "FAIL: netns-bed: namespaces left behind: $left" >&2; exit 1; }
echo "PASS: netns-bed: $rows sizes over 3 namespaces, $ncc connections with the system's congestion control $sys_cc${floor:+; sock_floor ran}"
