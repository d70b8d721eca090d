#!/usr/bin/env bash
# Runs the libFuzzer harnesses for meson's 'fuzz' suite (tests/fuzz/meson.build).
#   run FUZZER SEED_DIR WORK_DIR          fuzz for RING_FUZZ_SECONDS (default 60) from a copy of
#                                         the seeds; the corpus grows in WORK_DIR, never in the source tree
#   regress REGRESSION_DIR FUZZER...      every saved crash input through every harness, once
#   seeds GENERATOR SEED_ROOT WORK_DIR    regenerate the seeds and compare with the committed ones
set -euo pipefail

# Per-input limits: a hang (10 s) or a leak-like growth (2 GiB) is reported as a failure too.
# libFuzzer exits 77 on a crash by default, which meson reads as "skipped": make it 1.
limits=(-rss_limit_mb=2048 -timeout=10 -error_exitcode=1 -timeout_exitcode=1)

case "${1:-}" in
run)
    fuzzer=$2 seeds=$3 work=$4
    rm -rf "$work"
    mkdir -p "$work/corpus" "$work/artifacts"
    cp "$seeds"/* "$work/corpus/"
    rc=0
    "$fuzzer" "${limits[@]}" -max_total_time="${RING_FUZZ_SECONDS:-60}" -print_final_stats=1 \
        -artifact_prefix="$work/artifacts/" "$work/corpus" || rc=$?
    if [ "$rc" -ne 0 ]; then
        echo "run_fuzzer: $(basename "$fuzzer") failed (exit $rc); the input is in $work/artifacts/:" >&2
        ls "$work/artifacts" >&2
        echo "run_fuzzer: copy it to tests/fuzz/regressions/ (see the README there)." >&2
        exit 1
    fi
    ;;
regress)
    dir=$2
    shift 2
    inputs=()
    for f in "$dir"/*; do
        [ -f "$f" ] && [[ "$(basename "$f")" != README* ]] && inputs+=("$f")
    done
    if ((${#inputs[@]} == 0)); then
        echo "run_fuzzer: no saved inputs in $dir"
        exit 0
    fi
    rc=0
    for fuzzer in "$@"; do
        echo "== $(basename "$fuzzer"): ${#inputs[@]} input(s)"
        "$fuzzer" "${limits[@]}" "${inputs[@]}" || rc=1
    done
    exit "$rc"
    ;;
seeds)
    gen=$2 root=$3 work=$4
    rm -rf "$work"
    "$gen" "$work"
    diff -r "$root" "$work" || {
        echo "run_fuzzer: the committed seeds differ from what gen_corpus writes; regenerate them with" >&2
        echo "run_fuzzer:   rm -r tests/fuzz/corpus && $gen tests/fuzz/corpus" >&2
        exit 1
    }
    ;;
*)
    echo "usage: $0 run|regress|seeds ..." >&2
    exit 2
    ;;
esac
