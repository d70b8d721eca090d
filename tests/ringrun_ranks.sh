#!/usr/bin/env bash
# ringrun_ranks.sh RINGRUN N PROGRAM ARGS...: run N ranks of PROGRAM under ringrun on two free
# loopback ports (the second as RING_TEST_ROOT2, for scenarios with two communicators).
set -euo pipefail
ringrun=$1 n=$2
shift 2
read -r p1 p2 < <(python3 "$(dirname "$0")/free_port.py" 2)
exec "$ringrun" -n "$n" --port "$p1" --timeout 900 -x RING_TEST_ROOT2="127.0.0.1:$p2" -x RING_TIMEOUT_MS=120000 -- "$@"
