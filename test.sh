#!/usr/bin/env bash
# Quick start, command 2: set everything up, then run the whole test suite four ways:
#   build/       default features (-Dcuda/-Drdma/-Dhwloc=auto), -Werror
#   build-asan/  ASan + UBSan, every optional feature disabled
#   build-tsan/  ThreadSanitizer, the multi-threaded tests
#   build-fuzz/  clang + libFuzzer, the wire parsers for about 60 s each (tests/fuzz)
set -euo pipefail
cd "$(dirname "$0")"
start=$(date +%s)

scripts/setup.sh build
meson test -C build --print-errorlogs --num-processes 1

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

echo "test.sh: all suites passed in $(( $(date +%s) - start )) s"
