#!/usr/bin/env bash
# Synchronous ring all-reduce (ddp) against the asynchronous parameter server (ps-async), the
# runs behind docs/training.md ("What stale gradients do"). Both use 3 ranks that compute
# gradients: ddp -n 3, and ps-async -n 4 (rank 0 serves, 3 workers), batch 32 per rank.
#
#   train/compare_sync_async.sh [-b BUILD_DIR] [-o OUT_DIR]
#
# Writes to OUT_DIR (default train/results/sync-async): lr-sweep.txt, edge.txt, the runs' CSV
# files and summaries, momentum.png, spirals-epoch.png, spirals-time.png, straggler.txt; and
# stale-sim.txt from train/stale_sim.py (the same questions without ringcomm).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=build
OUT=$HERE/results/sync-async
while [[ $# -gt 0 ]]; do
    case "$1" in
        -b) BUILD=$2; shift 2 ;;
        -o) OUT=$2; shift 2 ;;
        -h|--help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "compare_sync_async.sh: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
RINGRUN=$BUILD/tools/ringrun
DDP=$BUILD/train/ddp_train
[[ -x $RINGRUN && -x $DDP ]] || { echo "compare_sync_async.sh: build $BUILD first" >&2; exit 2; }
mkdir -p "$OUT"
PLOT=$HERE/plot_curves.sh

# A diverging run still ends normally (with an infinite loss); a run that fails keeps its log.
run() { # n, out prefix, args...
    local n=$1 prefix=$2
    shift 2
    rm -f "$OUT/$prefix.summary"
    if "$RINGRUN" -n "$n" "$DDP" "$@" --no-plot --out "$OUT/$prefix" --summary "$OUT/$prefix.summary" > "$OUT/$prefix.log" 2>&1; then
        rm -f "$OUT/$prefix.log"
    else
        echo "compare_sync_async.sh: ringrun -n $n ddp_train $* failed, see $OUT/$prefix.log" >&2
    fi
}
final() { awk '$1 == "final_loss" {print $2}' "$1" 2>/dev/null || echo "failed"; }

{
    echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# house, momentum 0, 4096 samples, 10 epochs: final loss over the whole set (noise floor 0.0099)"
    echo "# ps-async -n 2/3/4 = 1/2/3 workers; each lr twice (the interleaving of workers varies)"
    printf '%-8s' "lr"
    for n in 2 3 4; do printf '  %-26s' "$((n - 1)) worker(s)"; done
    echo
    for lr in 0.01 0.015 0.02 0.025 0.03 0.04 0.05; do
        printf '%-8s' "$lr"
        for n in 2 3 4; do
            vals=""
            for rep in 1 2; do
                run "$n" sweep --mode ps-async --task house --samples 4096 --epochs 10 --lr "$lr" --quiet
                vals+="$(final "$OUT/sweep.summary") "
            done
            printf '  %-26s' "$vals"
        done
        echo
    done
} > "$OUT/lr-sweep.txt"
rm -f "$OUT"/sweep*
cat "$OUT/lr-sweep.txt"

# Near the edge: 3 workers for 40 epochs at lr 0.015 and 0.02, with the server's trace of
# (update, worker, staleness): the per-epoch loss from epoch 10 on, and how stale updates were.
{
    echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# house, ps-async -n 4 (3 workers), momentum 0, 40 epochs"
    for lr in 0.015 0.02; do
        run 4 "edge-lr$lr" --mode ps-async --task house --samples 4096 --epochs 40 --lr "$lr" --quiet \
            --ps-trace "$OUT/edge-lr$lr.trace"
        awk -F, -v lr="$lr" 'NR > 1 && $1 >= 10 {s += $4; n++; if (!mn || $4 < mn) mn = $4; if ($4 > mx) mx = $4}
            END {printf "lr %s: epoch loss over epochs 10-40: mean %.5f, min %.5f, max %.5f\n", lr, s / n, mn, mx}' \
            "$OUT/edge-lr$lr-house-ps-async.csv"
        awk -v lr="$lr" '{c[$3]++; n++} END {printf "lr %s: staleness of %d updates:", lr, n;
            for (k = 0; k <= 12; k++) if (c[k]) printf " %d: %.1f%%", k, 100 * c[k] / n; printf "\n"}' "$OUT/edge-lr$lr.trace"
        echo "lr $lr: workers and staleness of updates 200-229: $(sed -n '200,229p' "$OUT/edge-lr$lr.trace" | awk '{printf "%s:%s ", $2, $3}')"
        rm -f "$OUT/edge-lr$lr.trace"
    done
} > "$OUT/edge.txt"
cat "$OUT/edge.txt"

# Momentum: fine in ddp, fatal with stale gradients.
args=(--task house --samples 4096 --epochs 20 --lr 0.01)
series=()
for m in 0 0.5 0.9; do
    run 3 "mom$m-ddp" --mode ddp "${args[@]}" --momentum "$m"
    run 4 "mom$m-ps" --mode ps-async "${args[@]}" --momentum "$m"
    series+=("ddp -n 3, momentum $m=$OUT/mom$m-ddp-house-ddp.csv" "ps-async -n 4, momentum $m=$OUT/mom$m-ps-house-ps-async.csv")
done
"$PLOT" -o "$OUT/momentum.png" --logy --yrange 0.005:1e8 --title "house regression, lr 0.01: momentum with and without stale gradients" "${series[@]}"

# The spirals MLP with momentum 0 in both modes, and one worker (no staleness) for reference.
# ddp makes one update of 96 samples where the workers make three of 32: lr 0.3 is its learning
# rate scaled by the batch (the linear scaling rule), so that both move as far per epoch.
args=(--task spirals --epochs 40 --lr 0.1 --momentum 0)
run 3 spirals-ddp --mode ddp "${args[@]}"
run 3 spirals-ddp-lr0.3 --mode ddp --task spirals --epochs 40 --lr 0.3 --momentum 0
run 4 spirals-ps3 --mode ps-async "${args[@]}"
run 2 spirals-ps1 --mode ps-async "${args[@]}"
curves=("ddp -n 3=$OUT/spirals-ddp-spirals-ddp.csv" "ddp -n 3, lr 0.3=$OUT/spirals-ddp-lr0.3-spirals-ddp.csv"
        "ps-async -n 4 (3 workers)=$OUT/spirals-ps3-spirals-ps-async.csv"
        "ps-async -n 2 (1 worker)=$OUT/spirals-ps1-spirals-ps-async.csv")
"$PLOT" -o "$OUT/spirals-epoch.png" --logy --title "spirals MLP 2-64-64-3, momentum 0, lr 0.1 unless said" "${curves[@]}"
"$PLOT" -o "$OUT/spirals-time.png" -x time --logy --title "spirals MLP 2-64-64-3, momentum 0, lr 0.1 unless said" "${curves[@]}"

# Who waits for a slow rank: rank 2 sleeps 5 ms per step.
{
    echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), load average $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "# spirals, 10 epochs, momentum 0, lr 0.1; times are each rank's training time in seconds"
    echo "| mode | straggler | samples/s | rank 1 s | rank 2 s | rank 3 s | final loss |"
    echo "| --- | --- | ---: | ---: | ---: | ---: | ---: |"
    for mode in ddp ps-async; do
        n=3
        [[ $mode == ps-async ]] && n=4
        for strag in none 2:5; do
            extra=()
            [[ $strag != none ]] && extra=(--straggler "$strag")
            p="strag-$mode-${strag/:/-}"
            run "$n" "$p" --mode "$mode" --task spirals --epochs 10 --lr 0.1 --momentum 0 --quiet "${extra[@]}"
            s=$OUT/$p.summary
            t() { awk -v r="$1" '$1 == "rank_time_s" && $2 == r {printf "%.2f", $3}' "$s"; }
            printf '| %s -n %d | %s | %.0f | %s | %s | %s | %.4f |\n' "$mode" "$n" "$strag" \
                "$(awk '$1 == "samples_per_s" {print $2}' "$s")" "$(t 1)" "$(t 2)" "$( ((n == 4)) && t 3 || echo -)" "$(final "$s")"
        done
    done
} > "$OUT/straggler.txt"
cat "$OUT/straggler.txt"

python3 "$HERE/stale_sim.py" --pattern 1,1,4 > "$OUT/stale-sim.txt"
cat "$OUT/stale-sim.txt"
