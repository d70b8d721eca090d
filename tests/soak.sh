#!/usr/bin/env bash
# Soak: run the multi-process and reliability suites of one build again and again, each round
# with a new RING_TEST_SEED, and keep the log of every run that fails. The races these suites
# can hit show up once in a hundred runs or more rarely (a rank descheduled at the wrong moment,
# a reset that overtakes a refusal word); one `meson test` pass rarely meets them, hours of this
# do.
#
#   tests/soak.sh [-b BUILD] [-m MINUTES] [-r ROUNDS] [-o DIR] [-j JOBS] [SUITE...]
#
#   -b BUILD    build directory, relative to the source tree (default build); an ASan build gets
#               (b_sanitize=address...) ./test.sh's sanitizer options
#   -m MINUTES  stop starting runs after this long (default 60)
#   -r ROUNDS   stop after this many rounds (default: no limit)
#   -o DIR      where failing runs' logs go (default: a new directory under $TMPDIR or /tmp)
#   -j JOBS     suites run side by side (default 1; 2 loads a 2-core machine and widens the
#               windows races need)
#   SUITE       any of: collectives collectives-tcp collectives-mix collectives-rd
#               collectives-sm reliability reliability-tcp core ringrun (default: all)
#
# A round runs every suite once. Each run's line says round, suite, seed, seconds and ok/FAIL.
# test_collectives perturbs every job's seed with RING_TEST_SEED, so a failing collectives run
# can be repeated with the seed its line prints; the other suites rerun as they are, and what
# changes between their rounds is timing.
# Exit status: 0 when every run passed, 1 when any failed, 2 on a usage error.
set -uo pipefail
cd "$(dirname "$0")/.."

build=build minutes=60 rounds=0 out="" jobs=1
while getopts "b:m:r:o:j:h" o; do
    case $o in
        b) build=$OPTARG ;;
        m) minutes=$OPTARG ;;
        r) rounds=$OPTARG ;;
        o) out=$OPTARG ;;
        j) jobs=$OPTARG ;;
        *) sed -n '2,/^set -uo/p' "$0" | sed '$d' >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
all=(collectives collectives-tcp collectives-mix collectives-rd collectives-sm reliability reliability-tcp core ringrun)
suites=("$@")
[ ${#suites[@]} -eq 0 ] && suites=("${all[@]}")
for s in "${suites[@]}"; do
    case " ${all[*]} " in *" $s "*) ;; *) echo "soak.sh: unknown suite '$s' (one of: ${all[*]})" >&2; exit 2 ;; esac
done
case "$minutes$rounds$jobs" in *[!0-9]*) echo "soak.sh: -m, -r and -j take whole numbers" >&2; exit 2 ;; esac
[ "$jobs" -ge 1 ] || { echo "soak.sh: -j must be at least 1" >&2; exit 2; }
B=$(cd "$build" 2>/dev/null && pwd) || { echo "soak.sh: no build directory '$build'" >&2; exit 2; }
[ -x "$B/tests/test_collectives" ] || { echo "soak.sh: $B has no tests (build with tests: ninja -C $build)" >&2; exit 2; }
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/ringcomm-soak.XXXXXX")
mkdir -p "$out" || exit 2

# The suites run as `meson test` defines them (tests/meson.build: binary, filter, env), with the
# seed and ./test.sh's sanitizer options added to the environment meson passes on.
sanitize=$(python3 -c 'import json,sys
print(next((str(o["value"]) for o in json.load(open(sys.argv[1])) if o["name"] == "b_sanitize"), ""))' \
    "$B/meson-info/intro-buildoptions.json" 2>/dev/null)
[ "$sanitize" = none ] && sanitize=""
san_env=()
if [[ $sanitize == *address* ]]; then
    san_env=(ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
             LSAN_OPTIONS=suppressions=$PWD/tests/lsan.supp)
fi

run_one() { # round suite seed
    local r=$1 s=$2 seed=$3 t0 rc log="$out/$1-$2.log"
    t0=$(date +%s)
    env "${san_env[@]}" RING_TEST_SEED="$seed" timeout 1800 meson test -C "$B" --no-rebuild --num-processes 1 \
        --print-errorlogs --logbase "soak-$r-$s" "$s" >"$log" 2>&1
    rc=$?
    if [ $rc -eq 0 ]; then
        rm -f "$log" "$B/meson-logs/soak-$r-$s".*
        printf '%s round %d %-16s seed=%-10s %4ds ok\n' "$(date +%T)" "$r" "$s" "$seed" $(($(date +%s) - t0))
    else
        printf '%s round %d %-16s seed=%-10s %4ds FAIL (exit %d): %s\n' "$(date +%T)" "$r" "$s" "$seed" \
            $(($(date +%s) - t0)) $rc "$log"
        grep -E '^\[----\] .*(Assert|rank|error)|^\[FAIL\]' "$log" | head -6 | sed 's/^/    /'
    fi
    return $rc
}


limit="$minutes min"
[ "$rounds" -gt 0 ] && limit+=" or $rounds rounds"
echo "soak.sh: $B${sanitize:+ ($sanitize)}, suites: ${suites[*]}; $limit, $jobs side by side; failing logs in $out"
end=$(($(date +%s) + minutes * 60))
runs=0 fails=0 round=0
while [ $(date +%s) -lt $end ] && { [ "$rounds" -eq 0 ] || [ $round -lt "$rounds" ]; }; do
    round=$((round + 1))
    seed=$(( (RANDOM << 15 | RANDOM) ^ (round << 24) ))
    pids=()
    for s in "${suites[@]}"; do
        [ $(date +%s) -lt $end ] || break
        while [ ${#pids[@]} -ge "$jobs" ]; do
            wait "${pids[0]}" || fails=$((fails + 1))
            pids=("${pids[@]:1}")
        done
        run_one $round "$s" $seed &
        pids+=($!)
        runs=$((runs + 1))
    done
    for p in "${pids[@]}"; do wait "$p" || fails=$((fails + 1)); done
done
if [ $fails -eq 0 ]; then
    echo "soak.sh: $runs runs in $round rounds, none failed"
    rmdir "$out" 2>/dev/null
    exit 0
fi
echo "soak.sh: $runs runs in $round rounds, $fails failed (logs in $out)"
exit 1
