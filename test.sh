#!/usr/bin/env bash
# Quick start, command 2: set everything up, then run the whole test suite four ways:
#   build/       default features (-Dcuda/-Drdma/-Dhwloc=auto), -Werror; then the collective
#                tests over RDMA verbs in a QEMU guest with soft-RoCE (tests/rdma, 2-7 min)
#   build-asan/  ASan + UBSan, every optional feature disabled
#   build-tsan/  ThreadSanitizer, the multi-threaded tests
#   build-fuzz/  clang + libFuzzer, the wire parsers for about 60 s each (tests/fuzz)
set -euo pipefail
cd "$(dirname "$0")"
start=$(date +%s)

scripts/setup.sh build
meson test -C build --print-errorlogs --num-processes 1

# The verbs transport needs an RDMA device, and this machine's kernel has none: the tests run
# in a throw-away QEMU guest whose stock Debian kernel has rdma_rxe (soft-RoCE), on build/'s
# binaries (tests/rdma/run-in-vm.sh, docs/rdma.md). Where the guest cannot run, say why and
# go on; where it runs, any failure in it fails test.sh. RING_SKIP_RDMA_VM=1 skips it.
rdma_vm_skipped=""
rdma_vm_stage() { # build dir
    local why=""
    if [ "${RING_SKIP_RDMA_VM:-0}" = 1 ]; then
        why="RING_SKIP_RDMA_VM=1"
    elif [ "$(id -u)" -ne 0 ]; then
        why="not root (the guest exports / over 9p; missing packages are installed with apt-get)"
    elif [ "$(uname -m)" != x86_64 ]; then
        why="not x86_64 (the guest boots Debian's amd64 kernel)"
    elif ! grep -qx '#define RING_HAVE_RDMA 1' "$1/ring_config.h" 2>/dev/null; then
        why="$1/ has no RDMA support (libibverbs-dev was not found at meson setup)"
    elif ! command -v qemu-system-x86_64 >/dev/null &&
         ! apt-cache policy qemu-system-x86 2>/dev/null | grep -q 'Candidate: [0-9]'; then
        why="qemu-system-x86 is neither installed nor installable"
    fi
    if [ -n "$why" ]; then
        rdma_vm_skipped=$why
        echo "test.sh: SKIPPING the soft-RoCE stage (tests/rdma/suite.sh in a QEMU guest): $why"
        return 0
    fi
    echo "test.sh: soft-RoCE stage: tests/rdma/suite.sh $1 in a QEMU guest (2-7 min)"
    RDMA_VM_PASSENV="${RDMA_VM_PASSENV:-} RING_VM_TRANSPORT RING_VM_MAX_BYTES RING_VM_FAULT_TRIALS
        RING_VM_FAULT_BOUND_MS RING_VM_STAGE_TIMEOUT RING_TEST_SEED" \
        tests/rdma/run-in-vm.sh "$PWD" tests/rdma/suite.sh "$1"
}
rdma_vm_stage build

scripts/setup.sh build-asan -Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized \
    -Dlarge_tests=false -Dcuda=disabled -Drdma=disabled -Dhwloc=disabled
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp \
    meson test -C build-asan --print-errorlogs --num-processes 1 --timeout-multiplier 3

scripts/setup.sh build-tsan -Db_sanitize=thread -Db_lundef=false -Dbuildtype=debugoptimized \
    -Dlarge_tests=false -Dcuda=disabled -Drdma=disabled -Dhwloc=disabled
TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
    meson test -C build-tsan --print-errorlogs --num-processes 1 --timeout-multiplier 3 --suite tsan

# Only the fuzz suite runs here: the rest of the tests already ran in the builds above.
CC=clang scripts/setup.sh build-fuzz -Dfuzz=true -Db_lundef=false -Dtests=enabled -Dlarge_tests=false \
    -Dcuda=disabled -Drdma=disabled -Dhwloc=disabled
meson test -C build-fuzz --suite fuzz --print-errorlogs --num-processes 1

# What build/ had: the tail of a CI log is often all one sees of a run.
cuda_state="not built"
if grep -qx '#define RING_HAVE_CUDA 1' build/ring_config.h 2>/dev/null; then
    cuda_state="built (GPU tests skip without a GPU)"
else
    nvcc_path=$(command -v nvcc || ls /usr/local/cuda/bin/nvcc 2>/dev/null || true)
    if [ -z "$nvcc_path" ]; then
        cuda_state="not built: no nvcc on PATH or at /usr/local/cuda/bin"
    else
        cuda_state="not built: $nvcc_path found, but no libcudart_static.a under $(dirname "$(dirname "$nvcc_path")")"
    fi
fi
echo "test.sh: CUDA code $cuda_state"
echo "test.sh: all suites passed in $(( $(date +%s) - start )) s${rdma_vm_skipped:+ (soft-RoCE stage skipped: $rdma_vm_skipped)}"
