#!/usr/bin/env bash
# examples/allreduce started by Open MPI's mpirun instead of ringrun. The example is not an MPI
# program: ring_comm_init_env reads rank and size from OMPI_COMM_WORLD_RANK/SIZE, and RING_ROOT
# is the one ringcomm setting passed. Exit 77 (skip) with a reason when mpirun is missing.
#   mpirun_test.sh PATH/TO/allreduce
set -euo pipefail

prog=$1
skip() { echo "SKIP: $*"; exit 77; }

command -v mpirun >/dev/null || skip "mpirun not found (Debian: apt-get install openmpi-bin)"
mpirun --version 2>/dev/null | grep -qi 'open mpi' || skip "mpirun is not Open MPI: $(mpirun --version 2>&1 | head -n1)"
command -v python3 >/dev/null || skip "python3 not found (used to pick a free port)"

# A port free now, as ringrun picks it: bind port 0 and read what the kernel chose. It is free
# only until someone else takes it, the race every launcher that picks ports this way accepts.
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')

out=$(mktemp "${TMPDIR:-/tmp}/ringcomm-mpirun.XXXXXX")
trap 'rm -f "$out"' EXIT

# RING_RANK/RING_NRANKS would win over Open MPI's variables: make sure they are not inherited.
# mpi_yield_when_idle: 4 ranks share 2 cores here, so nothing may spin.
rc=0
env -u RING_RANK -u RING_NRANKS -u RING_ROOT \
    timeout 120 mpirun --allow-run-as-root --oversubscribe -np 4 --mca mpi_yield_when_idle 1 \
    -x RING_ROOT="127.0.0.1:$port" "$prog" >"$out" 2>&1 || rc=$?
cat "$out"
[ "$rc" -eq 0 ] || { echo "FAIL: mpirun exited $rc" >&2; exit 1; }
# Exit 0 alone would also pass if every process had run as a 1-rank job: each rank must report
# a distinct rank of 4.
n=$( (grep -o 'rank [0-9]* of 4:' "$out" || true) | sort -u | wc -l)
[ "$n" -eq 4 ] || { echo "FAIL: expected 4 distinct 'rank r of 4' lines, got $n" >&2; exit 1; }
echo "mpirun test passed"
