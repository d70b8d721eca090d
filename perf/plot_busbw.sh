#!/usr/bin/env bash
# Bus bandwidth against size, as a PNG, from ring_perf CSV output (and mpi_allreduce CSV).
#
#   perf/plot_busbw.sh [-o OUT.png] [--mpi MPI.csv]... [--title TEXT] [--logy] [--no-model] RING.csv...
#
# RING.csv: stdout of `ring_perf --csv` (with or without ringrun's "[rank] " prefixes; lines
# that are not data rows are skipped). Each file gives one curve per algorithm in its algo
# column: ringcomm (rows the library ran by recursive doubling or halving, the shared page or
# the tree belong to it) and the parameter-server baseline (ps), split by the mem column of -G
# both runs; and a dashed curve of the alpha-beta model for each where the
# model_us column is filled: model busbw = busbw * time_us / model_us (same bytes, same factor).
# CSV files of older builds without the algo column count as ringcomm. --mpi MPI.csv adds the
# curve of `mpi_allreduce --csv`; a `gloo_allreduce --csv` file given as RING.csv is a Gloo curve
# (its algo column says gloo). x: size in bytes, log2; y: busbw in GB/s (1e9). Needs gnuplot
# (Debian: gnuplot-nox). Default output: busbw.png.
set -euo pipefail

OUT=busbw.png
TITLE=""
LOGY=0
MODEL=1
RING_FILES=()
MPI_FILES=()

usage() {
    sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'
}

need_arg() { [[ $# -ge 2 && -n "$2" ]] || { echo "plot_busbw.sh: $1 needs a value" >&2; exit 2; }; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        -o) need_arg "$@"; OUT=$2; shift 2 ;;
        --mpi) need_arg "$@"; MPI_FILES+=("$2"); shift 2 ;;
        --title) need_arg "$@"; TITLE=$2; shift 2 ;;
        --logy) LOGY=1; shift ;;
        --no-model) MODEL=0; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; RING_FILES+=("$@"); break ;;
        -*) echo "plot_busbw.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
        *) RING_FILES+=("$1"); shift ;;
    esac
done

(( ${#RING_FILES[@]} + ${#MPI_FILES[@]} > 0 )) || { echo "plot_busbw.sh: no CSV file given" >&2; usage >&2; exit 2; }
for f in "${RING_FILES[@]}" "${MPI_FILES[@]}"; do
    [[ -r $f ]] || { echo "plot_busbw.sh: cannot read '$f'" >&2; exit 2; }
done
command -v gnuplot >/dev/null || { echo "plot_busbw.sh: gnuplot not found (Debian: apt-get install gnuplot-nox)" >&2; exit 2; }

TMP=$(mktemp -d "${TMPDIR:-/tmp}/plotbusbw.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

# Split one CSV into TMP/s<k>.<algo>.dat files ("size busbw model_busbw"), one per algorithm, and
# list "file<TAB>algo<TAB>nranks<TAB>collective<TAB>has_model" for each in TMP/series.
nseries_file=0
split_csv() { # file default_algo
    local f=$1 def=$2 k=$nseries_file
    nseries_file=$((nseries_file + 1))
    awk -F, -v pfx="$TMP/s$k" -v def="$def" -v src="$f" -v list="$TMP/series" '
        { sub(/^\[[0-9]+\] /, "") }
        NF < 12 || $1 == "collective" || $1 ~ /^#/ || $3 !~ /^[0-9]+$/ || $3 == 0 { next }
        {
            algo = (NF >= 15 && $15 != "") ? $15 : def
            # Whichever algorithm the library picked for a size (recursive doubling or halving,
            # the shared page, the tree): one ringcomm curve.
            if (algo == "rd" || algo == "rh" || algo == "sm" || algo == "tree") algo = "ring"
            # -G both: host and device rows of one run are two curves, not one that jumps back.
            if (NF >= 18 && $18 != "") algo = algo "-" $18
            model = "NaN"
            if (NF >= 13 && $13 != "" && $13 + 0 > 0) { model = $11 * $9 / $13; has[algo] = 1 }
            out = pfx "." algo ".dat"
            if (!(algo in seen)) { seen[algo] = 1; order[++n] = algo; nr[algo] = $2; coll[algo] = $1 }
            print $3, $11, model > out
        }
        END {
            for (i = 1; i <= n; i++) {
                a = order[i]
                printf("%s\t%s\t%s\t%s\t%d\t%s\n", src, a, nr[a], coll[a], (a in has) ? 1 : 0, pfx "." a ".dat") >> list
            }
        }' "$f"
}

: >"$TMP/series"
for f in "${RING_FILES[@]}"; do split_csv "$f" ring; done
for f in "${MPI_FILES[@]}"; do split_csv "$f" mpi; done
[[ -s $TMP/series ]] || { echo "plot_busbw.sh: no data rows (size > 0) in the given files" >&2; exit 2; }

nfiles=$(( ${#RING_FILES[@]} + ${#MPI_FILES[@]} ))
colls=$(cut -f4 "$TMP/series" | sort -u | paste -sd/ -)
[[ -n $TITLE ]] || TITLE="ringcomm ${colls} bus bandwidth"

# gnuplot quotes: the strings go into '...' literals, where only ' needs doubling.
q() { printf "'%s'" "${1//\'/\'\'}"; }

{
    # gnuplot lists its terminals on stderr; pngcairo draws dashes and antialiased lines, the
    # libgd png terminal is the fallback.
    terms=$(gnuplot -e 'set terminal' 2>&1 || true)
    if [[ $terms == *pngcairo* ]]; then
        echo "set terminal pngcairo size 1100,700 noenhanced font ',10'"
    else
        echo "set terminal png size 1100,700 noenhanced"
    fi
    echo "set output $(q "$OUT")"
    echo "set title $(q "$TITLE")"
    echo "set xlabel 'size (bytes)'"
    echo "set ylabel 'busbw (GB/s)'"
    echo "set logscale x 2"
    # Tics at powers of two with K/M/G labels (powers of 1024, like the size options), at most
    # about 14 of them.
    cut -f6 "$TMP/series" | xargs -d '\n' cat | awk '
        function lbl(p) { return p >= 40 ? 2^(p-40) "T" : p >= 30 ? 2^(p-30) "G" : p >= 20 ? 2^(p-20) "M" : p >= 10 ? 2^(p-10) "K" : 2^p }
        NR == 1 || $1 < lo { lo = $1 } NR == 1 || $1 > hi { hi = $1 }
        END {
            p0 = 0; while (2^(p0+1) <= lo) p0++
            p1 = p0; while (2^p1 < hi) p1++
            step = int((p1 - p0) / 14) + 1
            s = ""
            for (p = p0; p <= p1; p += step) s = s (s == "" ? "" : ", ") sprintf("\"%s\" %.0f", lbl(p), 2^p)
            printf("set xtics (%s)\n", s)
            # Room around the end points, so the first and last tic and point are not on the border.
            printf("set xrange [%.17g:%.17g]\n", lo / 1.25, hi * 1.25)
        }'
    if (( LOGY )); then echo "set logscale y 10"; else echo "set yrange [0:*]"; fi
    echo "set grid"
    echo "set key top left"
    echo "set datafile missing 'NaN'"
    plots=()
    i=0
    while IFS=$'\t' read -r src algo nr _ hasmodel dat; do
        i=$((i + 1))
        base=${algo%%-*}
        case $base in
            ring) name="ringcomm" ;;
            ps) name="parameter server" ;;
            mpi) name="MPI_Allreduce" ;;
            gloo) name="Gloo (gloo::allreduce)" ;;
            *) name=$base ;;
        esac
        [[ $algo == *-* ]] && name="$name, ${algo#*-} buffers"
        label="$name (n=$nr)"
        (( nfiles > 1 )) && label="$label, $(basename "$src")"
        plots+=("$(q "$dat") using 1:2 with linespoints linecolor $i pointtype $((i % 13 + 1)) linewidth 2 title $(q "$label")")
        if (( MODEL && hasmodel )); then
            plots+=("$(q "$dat") using 1:3 with lines linecolor $i dashtype 2 linewidth 1.5 title $(q "$label: model")")
        fi
    done <"$TMP/series"
    (IFS=,; echo "plot ${plots[*]}")
} >"$TMP/plot.gp"

gnuplot "$TMP/plot.gp"
[[ -s $OUT ]] || { echo "plot_busbw.sh: gnuplot wrote no $OUT" >&2; exit 1; }
echo "plot_busbw.sh: wrote $OUT"
