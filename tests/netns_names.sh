#!/usr/bin/env bash
# netns-names test: RING_ROOT given as a host name that stands for several addresses. Two
# hosts (network namespaces) on one veth link, 10.78.N.1 and 10.78.N.2, each with its own
# /etc/hosts (ip netns exec mounts /etc/netns/NAME/hosts over it).
#  1. "ringroot" is fd78:N::3 (on the link, but no host has it) and 10.78.N.1, the IPv6 one
#     first in getaddrinfo's order on both hosts. The root must listen on the one it has, and
#     the other rank must go on to it when the first does not answer. With only the first
#     address tried, the root failed with "cannot bind" and the rank timed out.
#  2. Debian's trap: on the root's host its own name is 127.0.1.1 (/etc/hosts), elsewhere its
#     network address. The rank on the other host cannot reach a loopback address: the root's
#     timeout must say that it listens on one.
#  3. and 4. Below.
# Skips (exit 77) with a reason when not root or without ip netns / veth.
#
#   tests/netns_names.sh [RING_PERF]   (default: $RING_TEST_RING_PERF)
set -uo pipefail

ring_perf=${1:-${RING_TEST_RING_PERF:-}}
[[ -n $ring_perf ]] || { echo "netns_names: usage: $0 RING_PERF" >&2; exit 2; }
skip() { echo "SKIP: netns-names: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "not root (network namespaces need root)"
command -v ip >/dev/null || skip "ip (iproute2) not installed"

a=rcnm-a$$ b=rcnm-b$$
net=10.78.$(($$ % 200 + 20))
out=$(mktemp -d)
made_etc_netns=0
[[ -d /etc/netns ]] || made_etc_netns=1
cleanup() {
    ip netns del "$a" 2>/dev/null
    ip netns del "$b" 2>/dev/null
    rm -rf "/etc/netns/$a" "/etc/netns/$b" "$out"
    [[ $made_etc_netns -eq 0 ]] || rmdir /etc/netns 2>/dev/null
}
trap cleanup EXIT
ip netns add "$a" 2>/dev/null && ip netns add "$b" 2>/dev/null || skip "cannot create a network namespace"
ip link add "nm$$x" netns "$a" type veth peer name "nm$$y" netns "$b" 2>/dev/null || skip "no veth support"
ip -n "$a" link set "nm$$x" name eth0 && ip -n "$b" link set "nm$$y" name eth0 || exit 1
ip -n "$a" addr add "$net.1/24" dev eth0 && ip -n "$b" addr add "$net.2/24" dev eth0 || exit 1
net6=fd78:${net##*.}
for n in "$a" "$b"; do
    ip netns exec "$n" sysctl -q -w net.ipv6.conf.all.accept_dad=0 net.ipv6.conf.default.accept_dad=0 ||
        skip "no IPv6 in the namespace"
done
ip -n "$a" addr add "$net6::1/64" dev eth0 nodad && ip -n "$b" addr add "$net6::2/64" dev eth0 nodad || exit 1
for n in "$a" "$b"; do ip -n "$n" link set lo up && ip -n "$n" link set eth0 up || exit 1; done
mkdir -p "/etc/netns/$a" "/etc/netns/$b" || skip "cannot write /etc/netns"

env=(RING_TRANSPORT=tcp RING_SECRET=0123456789abcdef0123456789abcdef RING_NRANKS=2 RING_ROOT=ringroot:29533)
args=(-b 4 -e 64K -f 64 -n 3 -w 1 -c 1 --no-probe --alpha-us 50 --link-gbps 1)
env1=() # rank 1's own
# run TIMEOUT_MS: both ranks, exit codes in rc0 and rc1, output in $out/0 and $out/1.
run() {
    ip netns exec "$a" env "${env[@]}" RING_TIMEOUT_MS="$1" RING_RANK=0 timeout 60 "$ring_perf" "${args[@]}" >"$out/0" 2>&1 &
    local p0=$!
    ip netns exec "$b" env "${env[@]}" "${env1[@]}" RING_TIMEOUT_MS="$1" RING_RANK=1 timeout 60 "$ring_perf" "${args[@]}" >"$out/1" 2>&1
    rc1=$?
    wait $p0
    rc0=$?
}
fail=0
# verdict WHAT RESULT: RESULT is 0 when the run did what it should.
verdict() {
    if [[ $2 -eq 0 ]]; then
        echo "netns_names: $1: as expected"
    else
        sed 's/^/[rank 0] /' "$out/0"
        sed 's/^/[rank 1] /' "$out/1"
        echo "netns_names: FAILED: $1 (exit $rc0 / $rc1)"
        fail=1
    fi
}

printf '%s ringroot\n%s ringroot\n' "$net.1" "$net6::3" | tee "/etc/netns/$a/hosts" >"/etc/netns/$b/hosts"
for n in "$a" "$b"; do
    got=$(ip netns exec "$n" getent ahosts ringroot | awk '$2 == "STREAM" {print $1}' | tr '\n' ' ')
    [[ $got == "$net6::3 $net.1 " ]] || skip "the resolver does not put the IPv6 address first (got: $got)"
done
run 20000
[[ $rc0 -eq 0 && $rc1 -eq 0 ]] && grep -q "Out of bounds values : 0 OK" "$out/0"
verdict "a name whose first address no host has: both joined, every result right" $?

echo "127.0.1.1 ringroot" >"/etc/netns/$a/hosts"
echo "$net.1 ringroot" >"/etc/netns/$b/hosts"
run 3000
[[ $rc0 -ne 0 && $rc1 -ne 0 ]] && grep -q "missing rank(s) 1 (the root listens on a loopback address" "$out/0"
verdict "the root's own name on 127.0.1.1: both fail, the root says why" $?

# 3. A rank whose RING_SOCKET_IFNAME leaves only lo, on a host of its own network namespace: its
#    peer cannot reach that address, and the connection timeout must say why (the first to
#    time out may be either rank; the other then reports its failure). Both hosts share
#    this kernel, so init's check for loopback across machines does not see it.
echo "$net.1 ringroot" >"/etc/netns/$a/hosts"
env1=(RING_SOCKET_IFNAME=lo)
run 6000
[[ $rc0 -ne 0 && $rc1 -ne 0 ]] && grep -q "data address is a loopback one" "$out/0" &&
    grep -q "data address is a loopback one" "$out/1"
verdict "rank 1 on lo: both connection timeouts say that a data address is a loopback one" $?

# 4. A dual-stack name whose first address is the root's IPv6 one, and a rank with no IPv6
#    route (its address removed): it reaches the root through the IPv4 address, where the root
#    listens too. The root listened on the first address only, and the rank timed out.
env1=()
ip -n "$b" addr del "$net6::2/64" dev eth0 || exit 1
printf '%s ringroot\n%s ringroot\n' "$net6::1" "$net.1" | tee "/etc/netns/$a/hosts" >"/etc/netns/$b/hosts"
got=$(ip netns exec "$a" getent ahosts ringroot | awk '$2 == "STREAM" {print $1}' | tr '\n' ' ')
if [[ $got != "$net6::1 $net.1 " ]]; then
    echo "netns_names: scenario 4 skipped: the root's resolver does not put its IPv6 address first (got: $got)"
else
    run 20000
    [[ $rc0 -eq 0 && $rc1 -eq 0 ]] && grep -q "Out of bounds values : 0 OK" "$out/0"
    verdict "a dual-stack name, the rank without IPv6: joined through IPv4, every result right" $?
fi
exit $fail
