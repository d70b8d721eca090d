#!/usr/bin/env bash
# The GPU checks of the CUDA code (docs/cuda.md), in one command, on a machine with an NVIDIA
# GPU, nvcc, meson, ninja and a C compiler (Criterion, hwloc, MPI and a package mirror are not
# needed):
#
#   perf/cuda/gpu_checks.sh [--build DIR] [--results DIR] [--steps LIST] [--step-timeout SEC]
#                           [--no-build] [--no-bench] [--no-sanitizer]
#
# LIST: comma-separated steps below (default tests,coll,bench,sanitizer, run in that order);
# the build always runs (a no-op when up to date), so a session with a per-command time limit
# can run `--steps tests,coll` and `--steps sanitizer,bench` as two commands (`allreduce` is
# an old name of `coll`). --step-timeout: kill a step (and fail it) after SEC seconds, so that
# one hang on a borrowed machine cannot eat the rest of its time (default: no limit).
# --no-build: DIR was built elsewhere (same configuration, an x86-64 machine with an older or
# equal glibc and the same CUDA major version) and is used as it is, to save a borrowed
# machine the compile (the binaries find the library by relative RPATH).
#
#  1. build:      meson setup DIR -Dcuda=enabled -Drdma=disabled (release, no -Werror:
#                 another machine's compilers may warn differently), ninja
#  2. tests:      the kernel checks (perf/cuda/cuda_kernel_check: every dtype x op against the
#                 host reduction, odd lengths and offsets, the public API on device memory).
#                 `meson test --suite cuda` runs the same program, but also the emulated
#                 tests that CI already runs: not worth a borrowed GPU's time
#  3. coll:       device-buffer all-reduce, reduce-scatter, all-gather and broadcast over 2 and
#                 4 local ranks (cuda_coll_check under ringrun): direct over CUDA IPC (the
#                 default on one host; worked by rank 0 alone and by every rank for its part,
#                 RING_CUDA_DIRECT_WORK), staged through host memory (RING_CUDA_IPC=0, 64 KiB
#                 chunks so that the ring has many messages; over shared memory, and over TCP
#                 with 4 ranks) and over the ring's CUDA IPC links
#                 (RING_CUDA_IPC=ring); 3 ranks mixing host and device buffers in one call; a
#                 rank that dies and a call that differs, in a direct collective; a caller's
#                 kernel that does not end (--gpu-stuck: staged, over CUDA IPC links, direct)
#  4. bench:      reduce_bw, every dtype, 1 MiB .. 1 GiB, against a device-to-device copy
#                 (target: ratio >= 0.9 at >= 256 MiB), and the many-input kernel; ring_perf -G
#                 both over TCP with 2 ranks (device within 15 % of host busbw), -G cuda with 4
#                 ranks direct (RING_CUDA_DIRECT_WORK auto, one, each) and over the ring's
#                 CUDA IPC links; reported, not
#                 a failure
#  5. sanitizer:  compute-sanitizer memcheck, racecheck, synccheck and initcheck on the kernel
#                 checks (--quick: short lengths), memcheck and racecheck on 2 ranks' collectives
#
# Logs go to DIR (default perf/results/cuda-<UTC date>-<GPU>/), at most 8 files so that a
# remote session can bring them back: summary.txt (machine, GPU, driver, date, every command
# and its result), build.log, tests.log, sanitizer.log, coll.log, bench.log.
# Exit status: 0 when every check passed (the benchmark's ratio does not count), 77 when no
# usable GPU was found (everything GPU-side skipped), else 1.
set -u -o pipefail
cd "$(dirname "$0")/../.."
root=$PWD
args="$*"

build=build-gpu
results=
steps=tests,coll,bench,sanitizer
step_timeout=0
no_build=0
while [ $# -gt 0 ]; do
    case $1 in
    --build) build=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --step-timeout) step_timeout=$2; shift 2 ;;
    --no-build) no_build=1; shift ;;
    --no-bench) steps=${steps//bench/}; shift ;;
    --no-sanitizer) steps=${steps//sanitizer/}; shift ;;
    -h | --help) awk 'NR > 1 && !/^#/ { exit } NR > 1' "$0"; exit 0 ;;
    *) echo "gpu_checks.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
want() { [[ ",$steps," == *",$1,"* ]]; }
# A mistyped step would otherwise run nothing and report "all checks passed".
for s_ in ${steps//,/ }; do
    case $s_ in tests | coll | allreduce | bench | sanitizer) ;;
    *) echo "gpu_checks.sh: unknown step '$s_' in --steps (tests, coll, allreduce, bench, sanitizer)" >&2; exit 2 ;;
    esac
done
bench=0
sanitizer=0
want bench && bench=1
want sanitizer && sanitizer=1

# nvcc and compute-sanitizer live here on NVIDIA's images; keep whatever PATH already has first.
for d in /usr/local/cuda/bin /usr/local/cuda/compute-sanitizer; do
    [ -d "$d" ] && PATH=$PATH:$d
done
export PATH

gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n1)
driver=$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1)
slug=$(printf '%s' "${gpu:-nogpu}" | tr -c 'A-Za-z0-9' '-' | tr -s '-' | sed 's/-$//')
stamp=$(date -u +%Y%m%dT%H%M%SZ)
[ -n "$results" ] || results=perf/results/cuda-$stamp-$slug
mkdir -p "$results"
results=$(cd "$results" && pwd)
summary=$results/summary.txt
failed=0
gpu_skip=0

{
    echo "# ringcomm GPU checks (perf/cuda/gpu_checks.sh)"
    echo "date:     $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
    echo "command:  $0 $args"
    echo "host:     $(uname -n) $(uname -sr)"
    echo "gpu:      ${gpu:-none found by nvidia-smi}"
    echo "driver:   ${driver:-?}"
    echo "nvcc:     $(nvcc --version 2>/dev/null | tail -n1 || echo missing)"
    echo "cc:       $(${CC:-cc} --version 2>/dev/null | head -n1 || echo missing)"
    echo "meson:    $(meson --version 2>/dev/null || echo missing), ninja $(ninja --version 2>/dev/null || echo missing)"
    echo "revision: $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown) $(git -C "$root" status --porcelain 2>/dev/null | grep -q . && echo '(with local changes)')"
    echo "sanitizer: $(command -v compute-sanitizer || echo missing)"
    echo
    nvidia-smi 2>&1 || true
    echo
    echo "# steps: status, seconds, log, command"
} >"$summary"

# step NAME LOG CMD...: run, append the output to LOG, record the result.
step() {
    local name=$1 log=$2
    shift 2
    local t0=$SECONDS rc limit=()
    # timeout(1) runs programs, not this script's functions (the build): those run unlimited.
    # --foreground keeps a Ctrl-C reaching the step (timeout(1) would otherwise run it in a
    # process group of its own).
    [ "$step_timeout" != 0 ] && ! declare -F "$1" >/dev/null && limit=(timeout --foreground -k 10 "$step_timeout")
    echo "==== $name: $*" | tee -a "$log"
    "${limit[@]}" "$@" >>"$log" 2>&1
    rc=$?
    local status=PASS
    if [ $rc -eq 77 ]; then status=SKIP; gpu_skip=1
    elif [ $rc -eq 124 ] && [ ${#limit[@]} -gt 0 ]; then status="TIMEOUT(${step_timeout}s)"; failed=1
    elif [ $rc -ne 0 ]; then status="FAIL(rc=$rc)"; failed=1; fi
    printf '%-12s %-24s %5ss  %s  %s\n' "$status" "$name" $((SECONDS - t0)) "$(basename "$log")" "$*" | tee -a "$summary"
    return $rc
}

build_it() {
    if [ $no_build = 1 ]; then
        echo "--no-build: using $build as it is"
        ls -l "$build/perf/cuda" "$build/perf/ring_perf" "$build/tools/ringrun"
        return
    fi
    # RDMA is not what these checks are about: leave it out of the build.
    local opts=(-Dcuda=enabled -Drdma=disabled -Dbuildtype=release -Dlarge_tests=false)
    if [ -d "$build/meson-private" ]; then meson setup --reconfigure "$build" "${opts[@]}"; else meson setup "$build" "${opts[@]}"; fi &&
        ninja -C "$build"
}
if ! step build "$results/build.log" build_it; then
    echo "build failed: $results/build.log" >&2
    exit 1
fi

if want tests; then
    step kernel-check "$results/tests.log" "$build/perf/cuda/cuda_kernel_check"
fi

# The device-buffer collectives across processes (built only where the device path is).
if { want coll || want allreduce; } && [ -x "$build/perf/cuda/cuda_coll_check" ]; then
    cc=$build/perf/cuda/cuda_coll_check
    rr=("$build/tools/ringrun" --timeout 300)
    # Ranks take device rank % GPUs: on one GPU rank 0 works every direct call alone (auto),
    # on several each rank works its part; RING_CUDA_DIRECT_WORK forces either.
    auto_work=each
    [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" = 1 ] && auto_work=one
    for n in 2 4; do
        step "coll-direct-n$n" "$results/coll.log" "${rr[@]}" -n $n "$cc" --expect-direct --expect-work $auto_work
        for w in one each; do
            [ $w = $auto_work ] && continue
            step "coll-direct-$w-n$n" "$results/coll.log" env RING_CUDA_DIRECT_WORK=$w "${rr[@]}" -n $n "$cc" \
                --expect-direct --expect-work $w
        done
        # 64 KiB chunks: the ring has many messages and reuses every staging slot.
        step "coll-staged-n$n" "$results/coll.log" env RING_CUDA_IPC=0 RING_CHUNK_BYTES=64K "${rr[@]}" -n $n "$cc" \
            --expect-no-direct
        step "coll-ipc-n$n" "$results/coll.log" env RING_CUDA_IPC=ring RING_CHUNK_BYTES=64K "${rr[@]}" -n $n "$cc" \
            --expect-ipc
    done
    # Staged over TCP instead of shared memory (not one host's transport: never direct).
    for n in 2 4; do
        step "coll-staged-tcp-n$n" "$results/coll.log" env RING_TRANSPORT=tcp RING_CHUNK_BYTES=64K "${rr[@]}" -n $n "$cc" \
            --expect-no-direct
    done
    # Host and device buffers in one call (odd ranks host): never direct, staged for all.
    step "coll-mixed-n3" "$results/coll.log" "${rr[@]}" -n 3 "$cc" --mixed --expect-no-direct
    for f in dies mismatch; do
        step "coll-direct-$f" "$results/coll.log" env RING_TIMEOUT_MS=30000 "${rr[@]}" -n 3 "$cc" --direct-$f
    done
    # Rank 1 queues a kernel that does not end on the legacy default stream before a call: it
    # must return RING_ERR_TIMEOUT after its 3 s RING_TIMEOUT_MS, the others an error within
    # 10 s, and its ring_comm_destroy must not wait for the GPU (a 60 s launcher limit: a
    # destroy that waits would hang until then).
    sr=("$build/tools/ringrun" --timeout 60 -n 3)
    step "coll-gpu-stuck-small" "$results/coll.log" env RING_TIMEOUT_MS=3000 RING_CUDA_IPC=0 RING_TRANSPORT=tcp \
        "${sr[@]}" "$cc" --gpu-stuck small
    step "coll-gpu-stuck-ring" "$results/coll.log" env RING_TIMEOUT_MS=3000 RING_CUDA_IPC=0 RING_TRANSPORT=tcp \
        RING_CHUNK_BYTES=64K "${sr[@]}" "$cc" --gpu-stuck ring
    step "coll-gpu-stuck-ring-ipc" "$results/coll.log" env RING_TIMEOUT_MS=3000 RING_CUDA_IPC=ring \
        RING_CHUNK_BYTES=64K "${sr[@]}" "$cc" --gpu-stuck ring --expect-ipc
    step "coll-gpu-stuck-direct" "$results/coll.log" env RING_TIMEOUT_MS=3000 RING_CUDA_DIRECT_WORK=each "${sr[@]}" "$cc" \
        --gpu-stuck direct
fi

if [ $bench = 1 ]; then
    # Reported, not a failure: the ratio is a target (docs/cuda.md).
    step bench "$results/bench.log" "$build/perf/cuda/reduce_bw" -b 1M -e 1G -f 4 -d all -o sum
    # Device against host buffers over TCP staging, same run (target: ratio >= 0.85), and the
    # all-reduce over CUDA IPC with 4 ranks on this GPU (target: <= 1.25 x 5S(N-1)/BW_copy,
    # BW_copy from reduce_bw's copy column above).
    step bench-staged "$results/bench.log" env RING_TRANSPORT=tcp "$build/tools/ringrun" -n 2 --timeout 500 \
        "$build/perf/ring_perf" -G both -C allreduce -b 1M -e 1G -f 4 -n 10 -w 3 -c 1
    for w in auto one each; do
        step bench-direct-$w "$results/bench.log" env RING_CUDA_DIRECT_WORK=$w "$build/tools/ringrun" -n 4 \
            --timeout 500 "$build/perf/ring_perf" -G cuda -C allreduce -b 1M -e 1G -f 4 -n 10 -w 3 -c 1
    done
    step bench-ipc "$results/bench.log" env RING_CUDA_IPC=ring "$build/tools/ringrun" -n 4 --timeout 500 \
        "$build/perf/ring_perf" -G cuda -C allreduce -b 64M -e 256M -f 4 -n 5 -w 2 -c 1
    step bench-ops "$results/bench.log" "$build/perf/cuda/reduce_bw" -b 256M -e 256M -d float32,bfloat16,float16 -o all \
        --final 4
    # The direct all-reduce's kernel for 4 ranks: 4 inputs, 4 outputs, (4 + 4) x bytes moved.
    step bench-multi "$results/bench.log" "$build/perf/cuda/reduce_bw" -b 16M -e 256M -f 4 -d float32,bfloat16 -o sum \
        --inputs 4 --outputs 4
    grep -h '^# lowest ratio' "$results/bench.log" | sed 's/^# /bench:  /' >>"$summary"
fi

if [ $sanitizer = 1 ]; then
    if command -v compute-sanitizer >/dev/null; then
        for tool in memcheck racecheck synccheck initcheck; do
            extra=()
            [ $tool = memcheck ] && extra=(--leak-check full)
            step "sanitizer-$tool" "$results/sanitizer.log" compute-sanitizer --tool $tool "${extra[@]}" \
                --error-exitcode 3 "$build/perf/cuda/cuda_kernel_check" --quick
        done
        if [ -x "$build/perf/cuda/cuda_coll_check" ]; then
            step "coll-memcheck" "$results/sanitizer.log" env RING_CUDA_IPC=0 RING_CHUNK_BYTES=64K "$build/tools/ringrun" \
                -n 2 --timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 "$build/perf/cuda/cuda_coll_check" \
                --quick
            for w in one each; do
                step "coll-direct-$w-memcheck" "$results/sanitizer.log" env RING_CUDA_DIRECT_WORK=$w "$build/tools/ringrun" \
                    -n 2 --timeout 300 compute-sanitizer --tool memcheck --error-exitcode 3 \
                    "$build/perf/cuda/cuda_coll_check" --quick
            done
            # The kernels as the collectives launch them (many inputs, staged slots).
            step "coll-racecheck" "$results/sanitizer.log" env RING_CUDA_IPC=0 RING_CHUNK_BYTES=64K "$build/tools/ringrun" \
                -n 2 --timeout 300 compute-sanitizer --tool racecheck --error-exitcode 3 "$build/perf/cuda/cuda_coll_check" \
                --quick
            step "coll-direct-racecheck" "$results/sanitizer.log" "$build/tools/ringrun" -n 2 --timeout 300 \
                compute-sanitizer --tool racecheck --error-exitcode 3 "$build/perf/cuda/cuda_coll_check" --quick
        fi
    else
        echo "SKIP         sanitizer                    compute-sanitizer not found" | tee -a "$summary"
    fi
fi


echo >>"$summary"
if [ $failed != 0 ]; then
    echo "RESULT: some checks FAILED" | tee -a "$summary"
elif [ $gpu_skip = 1 ]; then
    echo "RESULT: no usable GPU here: the GPU checks were skipped (the build and the CPU-side tests passed)" | tee -a "$summary"
    failed=77
else
    echo "RESULT: all checks passed" | tee -a "$summary"
fi
echo "logs: $results"
exit $failed
