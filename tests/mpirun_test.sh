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

# A port free now, below the kernel's ephemeral range (as tests/free_port.h picks them), so no
# rank's own connection or listener can take it before rank 0 binds it.
port=$(python3 "$(dirname "$0")/free_port.py")

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
