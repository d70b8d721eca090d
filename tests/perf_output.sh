#!/usr/bin/env bash
# perf-smoke checks of ring_perf's machine-readable output (meson runs them, see meson.build):
#
#   perf_output.sh json RINGRUN RING_PERF
#       4 ranks, --json, -A both: stdout must be one JSON object with the metadata and a row per
#       size and algorithm, all checked and correct (python3 parses it; skipped without python3).
#   perf_output.sh plot RINGRUN RING_PERF PLOT_SCRIPT OUT.png [MPI_ALLREDUCE]
#       4 ranks, --csv, -A both, then plot_busbw.sh (with an mpi_allreduce CSV when that program
#       and mpirun exist); OUT.png must be a non-empty PNG (skipped without gnuplot).
set -euo pipefail

SKIP=77
mode=${1:-}
shift || true
SWEEP=(-b 1K -e 1M -f 16 -n 3 -w 1 -c 1 --probe-bytes 4M)

case $mode in
json)
    ringrun=$1 perf=$2
    command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit $SKIP; }
    out=$("$ringrun" -n 4 --no-prefix --timeout 300 "$perf" -A both --json "${SWEEP[@]}")
    printf '%s\n' "$out" | python3 -c '
import json, sys
d = json.load(sys.stdin)
for k in ("program", "collective", "nranks", "dtype", "op", "alpha_us", "link_GBps", "link_Gbps", "date", "command", "rows"):
    assert k in d, "missing " + k
assert d["program"] == "ring_perf" and d["nranks"] == 4 and d["ok"] is True, d
assert d["alpha_us"] > 0 and d["link_GBps"] > 0, "probes gave no alpha or link"
algos = [r["algo"] for r in d["rows"]]
# 1K, 16K, 256K: the library labels each row with what it ran (recursive doubling "rd",
# recursive halving "rh", the ring), the parameter-server rows say "ps"
assert sum(algos.count(a) for a in ("ring", "rd", "rh")) == 3 and algos.count("ps") == 3, algos
assert algos[0] == "rd" and algos[2] == "ring", algos
for r in d["rows"]:
    assert r["wrong"] == 0 and r["time_us"] > 0 and r["model_us"] > 0 and r["eff"] > 0, r
print("json ok:", len(d["rows"]), "rows, alpha", d["alpha_us"], "us, link", d["link_GBps"], "GB/s")
'
    ;;
plot)
    ringrun=$1 perf=$2 plot=$3 png=$4 mpi=${5:-}
    command -v gnuplot >/dev/null || { echo "gnuplot not found: skipped"; exit $SKIP; }
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/perfplot.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    "$ringrun" -n 4 --timeout 300 "$perf" -A both --csv "${SWEEP[@]}" >"$tmp/ring.csv"
    args=(-o "$png" "$tmp/ring.csv")
    if [[ -n $mpi && -x $mpi ]] && command -v mpirun >/dev/null; then
        # The MPI curve is optional: a machine where mpirun cannot start still tests the plot.
        # Same ranks and sizes as the ring run; idle ranks yield, as there may be fewer cores.
        if timeout 120 mpirun --allow-run-as-root --oversubscribe --mca mpi_yield_when_idle 1 -np 4 "$mpi" \
            -b 1K -e 1M -f 16 -n 3 -w 1 --csv >"$tmp/mpi.csv" 2>"$tmp/mpi.err"; then
            args+=(--mpi "$tmp/mpi.csv")
        else
            echo "warning: mpi_allreduce did not run, plotting without it:" >&2
            tail -n 5 "$tmp/mpi.err" >&2
        fi
    fi
    rm -f "$png"
    "$plot" "${args[@]}"
    [[ -s $png ]] || { echo "no PNG written" >&2; exit 1; }
    [[ $(head -c 8 "$png" | od -An -tx1 | tr -d ' \n') == 89504e470d0a1a0a ]] || { echo "$png is not a PNG" >&2; exit 1; }
    echo "plot ok: $png ($(stat -c %s "$png") bytes)"
    ;;
*)
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
