#!/usr/bin/env bash
# netns-linklocal test: two hosts (network namespaces) joined by one veth link that has only
# IPv6 link-local addresses, with the link's interface numbered 2 on one host and 4 on the
# other. The root is given with its zone ([fe80::100%eth0]); each rank's data address is a
# link-local one whose zone is its own host's number, which the other rank must replace with
# its own (ring__addr_local_zone): connected as it came, it failed with "Network is
# unreachable". Skips (exit 77) with a reason when not root or without ip netns / veth.
#
#   tests/netns_linklocal.sh [RING_PERF]   (default: $RING_TEST_RING_PERF)
set -uo pipefail

ring_perf=${1:-${RING_TEST_RING_PERF:-}}
[[ -n $ring_perf ]] || { echo "netns_linklocal: usage: $0 RING_PERF" >&2; exit 2; }
skip() { echo "SKIP: netns-linklocal: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "not root (network namespaces need root)"
command -v ip >/dev/null || skip "ip (iproute2) not installed"

a=rcll-a$$ b=rcll-b$$
cleanup() { ip netns del "$a" 2>/dev/null; ip netns del "$b" 2>/dev/null; }
trap cleanup EXIT
ip netns add "$a" 2>/dev/null && ip netns add "$b" 2>/dev/null || skip "cannot create a network namespace"
for n in "$a" "$b"; do
    ip netns exec "$n" sysctl -q -w net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 ||
        skip "no IPv6 in the namespace"
    ip -n "$n" link set lo up
done
# Two interfaces made first on host b, so that its end of the link is number 4, not 2.
ip -n "$b" link add zz1 type veth peer name zz2 2>/dev/null || skip "no veth support"
ip link add "ll$$x" netns "$a" type veth peer name "ll$$y" netns "$b" || exit 1
ip -n "$a" link set "ll$$x" name eth0 && ip -n "$b" link set "ll$$y" name eth0 || exit 1
ip -n "$a" addr add fe80::100/64 dev eth0 nodad && ip -n "$b" addr add fe80::101/64 dev eth0 nodad || exit 1
ip -n "$a" link set eth0 up && ip -n "$b" link set eth0 up || exit 1
ia=$(ip netns exec "$a" cat /sys/class/net/eth0/ifindex) ib=$(ip netns exec "$b" cat /sys/class/net/eth0/ifindex)
[[ $ia != "$ib" ]] || { echo "netns_linklocal: both ends are interface $ia; the test needs them to differ"; exit 1; }

env=(RING_TRANSPORT=tcp RING_SECRET=0123456789abcdef0123456789abcdef RING_TIMEOUT_MS=15000 RING_NRANKS=2
     "RING_ROOT=[fe80::100%eth0]:29531")
args=(-b 4 -e 1M -f 64 -n 3 -w 1 -c 1 --no-probe --alpha-us 50 --link-gbps 1)
out=$(mktemp -d)
ip netns exec "$a" env "${env[@]}" RING_RANK=0 timeout 60 "$ring_perf" "${args[@]}" >"$out/0" 2>&1 &
ip netns exec "$b" env "${env[@]}" RING_RANK=1 timeout 60 "$ring_perf" "${args[@]}" >"$out/1" 2>&1
rc1=$?
wait $!
rc0=$?
cat "$out/0"
[[ $rc1 -ne 0 ]] && sed 's/^/[rank 1] /' "$out/1"
ok=0
[[ $rc0 -eq 0 && $rc1 -eq 0 ]] && grep -q "Out of bounds values : 0 OK" "$out/0" && ok=1
rm -rf "$out"
if [[ $ok -ne 1 ]]; then
    echo "netns_linklocal: FAILED (interfaces $ia and $ib; exit $rc0 / $rc1)"
    exit 1
fi
echo "netns_linklocal: link-local only, interfaces $ia and $ib: every result right"
