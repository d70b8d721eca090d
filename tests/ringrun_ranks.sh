#!/usr/bin/env bash
# ringrun_ranks.sh RINGRUN N PROGRAM ARGS...: run N ranks of PROGRAM under ringrun on two free
# loopback ports (the second as RING_TEST_ROOT2, for scenarios with two communicators).
set -euo pipefail
ringrun=$1 n=$2
shift 2
read -r p1 p2 < <(python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
exec "$ringrun" -n "$n" --port "$p1" --timeout 900 -x RING_TEST_ROOT2="127.0.0.1:$p2" -x RING_TIMEOUT_MS=120000 -- "$@"
