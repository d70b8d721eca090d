#!/usr/bin/env bash
# Throughput of ddp_train for N = 1, 2, 4 ranks and the share of all-reduce time hidden behind
# backward, as reported in docs/performance.md ("Training (ddp_train)").
#
#   train/bench.sh [-b BUILD_DIR] [-r REPEATS] [-o OUT_DIR] [-n "1 2 4"] [--netns RATE]
#
# By default the ranks run under ringrun on this machine (loopback; ringcomm picks its
# transport). --netns RATE runs each rank in its own network namespace joined by links shaped
# to RATE (perf/netns/bed.sh: TCP over the veths, needs root; N >= 2).
#
# Three configurations, each run REPEATS times per N (default 3), the median reported:
#   mlp512-buckets  spirals, MLP 2-512-512-512-3 (528k parameters, 2.1 MB of gradients),
#                   --bucket-mb 0.5: three buckets (output layer + last 512x512 layer, middle
#                   layer, first layer); the first is issued about halfway through backward
#   mlp512-1bucket  the same in one 25 MiB bucket (first bucket too): issued when backward
#                   has finished every gradient, so almost nothing can overlap
#   demo            the demo's own spirals MLP 2-64-64-3 (4.5k parameters): latency-bound
# samples/s counts every rank's samples and leaves out the first epoch (warm-up); overlap is
# hidden / total all-reduce time over all ranks and updates (docs/training.md says how both are
# measured). Raw summaries go to OUT_DIR (default: a temporary directory, removed at the end).
# The host is shared: the first line records the load average; compare medians of runs taken
# one after the other.
set -euo pipefail

BUILD=build
REPEATS=3
OUT=""
NS="1 2 4"
NETNS=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        -b) BUILD=$2; shift 2 ;;
        -r) REPEATS=$2; shift 2 ;;
        -o) OUT=$2; shift 2 ;;
        -n) NS=$2; shift 2 ;;
        --netns) NETNS=$2; shift 2 ;;
        -h|--help) sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "bench.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
HERE=$(cd "$(dirname "$0")" && pwd)
RINGRUN=$BUILD/tools/ringrun
DDP=$BUILD/train/ddp_train
BED=$HERE/../perf/netns/bed.sh
[[ -x $RINGRUN && -x $DDP ]] || { echo "bench.sh: build $BUILD first (need $RINGRUN and $DDP)" >&2; exit 2; }
if [[ -z $OUT ]]; then
    OUT=$(mktemp -d "${TMPDIR:-/tmp}/ddp_bench.XXXXXX")
    trap 'rm -rf "$OUT"' EXIT
fi
mkdir -p "$OUT"

declare -A CONFIG=(
    [mlp512-buckets]="--task spirals --hidden 512,512,512 --epochs 4 --bucket-mb 0.5"
    [mlp512-1bucket]="--task spirals --hidden 512,512,512 --epochs 4 --bucket-mb 25 --first-bucket-mb 25"
    [demo]="--task spirals --epochs 6"
)

median() { sort -g | awk '{v[NR]=$1} END {print (NR % 2) ? v[(NR+1)/2] : (v[NR/2]+v[NR/2+1])/2}'; }

launch() { # n, then the ddp_train command
    local n=$1
    shift
    if [[ -n $NETNS ]]; then
        "$BED" -n "$n" --rate "$NETNS" --build "$BUILD" --timeout 900 -- "$@"
    else
        "$RINGRUN" -n "$n" "$@"
    fi
}

where="ringrun on this host"
[[ -n $NETNS ]] && where="network namespaces, links of $NETNS"
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg), $where"
echo "| config | N | samples/s (median of $REPEATS) | all samples/s | overlap (median) | all overlap |"
echo "| --- | ---: | ---: | --- | ---: | --- |"
for cfg in mlp512-buckets mlp512-1bucket demo; do
    for n in $NS; do
        [[ -n $NETNS && $n -lt 2 ]] && continue
        rates=() overlaps=()
        for ((i = 1; i <= REPEATS; i++)); do
            sum=$OUT/$cfg-n$n-$i.txt
            rm -f "$sum"
            # shellcheck disable=SC2086
            launch "$n" "$DDP" ${CONFIG[$cfg]} --quiet --no-plot --out "$OUT/$cfg-n$n" --summary "$sum" >/dev/null
            rates+=("$(awk '$1 == "samples_per_s" {print $2}' "$sum")")
            overlaps+=("$(awk '$1 == "overlap" {print $2}' "$sum")")
        done
        r=$(printf '%s\n' "${rates[@]}" | median)
        o=$(printf '%s\n' "${overlaps[@]}" | median)
        printf '| %s | %d | %.0f | %s | %.2f | %s |\n' "$cfg" "$n" "$r" "${rates[*]}" "$o" "${overlaps[*]}"
    done
done
