#!/usr/bin/env bash
# ringrun_ranks.sh RINGRUN N PROGRAM ARGS...: run N ranks of PROGRAM under ringrun on two free
# loopback ports (the second as RING_TEST_ROOT2, for scenarios with two communicators).
set -euo pipefail
ringrun=$1 n=$2
shift 2
read -r p1 p2 < <(python3 -c '
import random, socket
lo = 32768
try:
    lo = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
except Exception:
    pass
def free(taken):
    # below the ephemeral range (tests/free_port.h): no outgoing connection or port-0 bind of
    # a rank can take it between this check and the bind of the root
    for _ in range(2000):
        p = random.randrange(10000, lo) if lo > 11000 else 0
        if p in taken:
            continue
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", p))
            return s.getsockname()[1]
        except OSError:
            pass
        finally:
            s.close()
    raise SystemExit("no free port")
a = free(())
print(a, free((a,)))')
exec "$ringrun" -n "$n" --port "$p1" --timeout 900 -x RING_TEST_ROOT2="127.0.0.1:$p2" -x RING_TIMEOUT_MS=120000 -- "$@"
