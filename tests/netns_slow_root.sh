#!/usr/bin/env bash
# netns-slow-root test: a program with a periodic timer signal (a sampling profiler's SIGALRM,
# every 5 ms, SA_RESTART) joins a job whose root is a 30-50 ms round trip away. A signal ends
# poll() early; until 2026-12-06 the bootstrap then gave up its connection to the root as timed
# out and began another, one tick later: where the round trip was longer than the tick no
# connection ever completed, and init failed on every rank at RING_TIMEOUT_MS ("could not reach
# the root", "missing rank(s) 1").
#
# The slow link: one network namespace whose loopback goes through tbf at 2 Mbit/s, its 5000-byte
# queue kept nearly full by a UDP stream to the discard port (about 4 Mbit/s: faster, and most
# packets, handshakes too, find it full and are dropped), so every packet waits about 15 ms in it
# (netem, the plain way to delay, is not in every kernel: Debian's cloud kernels lack it).
# Skips (exit 77) with a reason when not root, without ip netns or tbf, or when the link it
# builds is not slow enough to tell.
#
#   tests/netns_slow_root.sh [MP_WORKER]   (default: $RING_TEST_WORKER)
set -uo pipefail

worker=${1:-${RING_TEST_WORKER:-}}
[[ -n $worker ]] || { echo "netns_slow_root: usage: $0 MP_WORKER" >&2; exit 2; }
skip() { echo "SKIP: netns-slow-root: $*"; exit 77; }
[[ $(id -u) -eq 0 ]] || skip "not root (network namespaces need root)"
command -v ip >/dev/null || skip "ip (iproute2) not installed"
command -v tc >/dev/null || skip "tc (iproute2) not installed"
command -v python3 >/dev/null || skip "python3 not installed"

ns=rcsr$$
out=$(mktemp -d)
flood=
cleanup() {
    [[ -z $flood ]] || kill "$flood" 2>/dev/null
    ip netns del "$ns" 2>/dev/null
    rm -rf "$out"
}
trap cleanup EXIT
ip netns add "$ns" 2>/dev/null || skip "cannot create a network namespace"
ip -n "$ns" link set lo up || exit 1
ip netns exec "$ns" tc qdisc add dev lo root tbf rate 2mbit burst 3000 limit 5000 2>/dev/null ||
    skip "no tbf queueing discipline"
ip netns exec "$ns" python3 -c '
import socket, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
b = bytes(1000)
while True:
    try: s.sendto(b, ("127.0.0.1", 9))
    except OSError: pass
    time.sleep(0.002)
' &
flood=$!
sleep 0.5
# The round trip a connection's handshake takes now (median of 5).
rtt_ms=$(ip netns exec "$ns" python3 -c '
import socket, time
l = socket.socket(); l.bind(("127.0.0.1", 0)); l.listen(8)
t = []
for _ in range(5):
    c = socket.socket(); t0 = time.monotonic(); c.connect(l.getsockname()); t.append(time.monotonic() - t0)
    c.close(); l.accept()[0].close()
print(int(sorted(t)[2] * 1000))
')
echo "netns-slow-root: connection round trip ${rtt_ms:-?} ms"
[[ ${rtt_ms:-0} -ge 15 ]] || skip "the queue did not slow the link (round trip ${rtt_ms:-?} ms, want >= 15)"

port=$((29600 + $$ % 300))
pids=()
for r in 0 1; do
    ip netns exec "$ns" env RING_RANK=$r RING_NRANKS=2 RING_ROOT=127.0.0.1:$port RING_TRANSPORT=tcp \
        RING_SECRET=0123456789abcdef0123456789abcdef RING_TIMEOUT_MS=20000 RING_TEST_TICK_US=5000 \
        timeout 60 "$worker" ticking >"$out/$r" 2>&1 &
    pids+=($!)
done
fail=0
for r in 0 1; do
    wait "${pids[$r]}"
    rc=$?
    if [[ $rc -ne 0 ]]; then
        echo "FAIL: netns-slow-root: rank $r exited $rc under a 5 ms timer signal over a ${rtt_ms} ms round trip:"
        sed 's/^/    /' "$out/$r"
        fail=1
    fi
done
[[ $fail -eq 0 ]] || exit 1
echo "PASS: netns-slow-root: both ranks joined and reduced under a 5 ms timer signal over a ${rtt_ms} ms round trip"
