#!/usr/bin/env bash
# Quick start, command 1: set everything up, then run the main job: the allreduce benchmark
# on 4 local ranks, 4 B .. 256 MiB, every result checked.
set -euo pipefail
cd "$(dirname "$0")"
scripts/setup.sh build
exec build/tools/ringrun -n 4 build/perf/ring_perf -b 4 -e 256M -f 4 -c 1 "$@"
