#!/usr/bin/env bash
# Line and branch coverage of the library (src/) by the test suite, with gcov and gcovr.
# Usage: scripts/coverage.sh [build-dir]   (default build-cov; root or sudo if a package is missing)
#
# Builds build-dir with -Db_coverage=true and runs `meson test` over it: the tests of ./test.sh's
# first build but `install`, whose static link of the instrumented library would need libgcov
# (46 min on the 2-vCPU VM). Then it writes per-file summaries of src/ to build-dir/coverage.txt
# (lines) and coverage-branches.txt (branches), and an HTML report of every line to
# build-dir/coverage/index.html. A failing test fails the script, after the report.
# -O2, as the sanitizer builds (-Dbuildtype=debugoptimized): at -O0 a 7-rank random all-reduce
# ran past its 120 s deadline, and the counts would leave out what a test did not reach. So a
# line the optimizer merged with another may count as the other.
# Not part of ./test.sh: it measures the tests, it does not test the library. The soft-RoCE
# guest runs rdma.c, which this does not count (docs/reliability.md, "What the tests reach").
set -euo pipefail
cd "$(dirname "$0")/.."

build=${1:-build-cov}
if ! command -v gcovr >/dev/null; then
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends gcovr
fi
scripts/setup.sh "$build" -Db_coverage=true -Dbuildtype=debugoptimized -Dlarge_tests=false
# Counts of an earlier run would add up with this one's.
find "$build" -name '*.gcda' -delete
mapfile -t tests < <(meson test -C "$build" --list 2>/dev/null | sed -n 's|^ringcomm:[^ ]* / ||p' | grep -vx install)
((${#tests[@]})) || { echo "coverage.sh: meson test --list gave no test" >&2; exit 2; }
rc=0
meson test -C "$build" --print-errorlogs --num-processes 1 "${tests[@]}" || rc=$?
# gcov runs from the build directory, where meson's objects name their sources ../src/...
mkdir -p "$build/coverage"
common=(--root . --filter 'src/' --object-directory "$build" --gcov-ignore-parse-errors)
gcovr "${common[@]}" --txt "$build/coverage.txt" --html-details "$build/coverage/index.html" --print-summary
gcovr "${common[@]}" --branches --txt "$build/coverage-branches.txt"
echo "coverage.sh: per file: $build/coverage.txt (lines), $build/coverage-branches.txt (branches);" \
    "every line: $build/coverage/index.html"
((rc == 0)) || echo "coverage.sh: meson test failed (exit $rc): the figures above miss what the failing tests did not run" >&2
exit "$rc"
