#!/usr/bin/env bash
# Several ddp_train loss curves on one PNG, to compare runs (ddp against ps-async, learning
# rates, momentum).
#
#   train/plot_curves.sh [-o OUT.png] [-x epoch|time] [--title TEXT] [--logy] [--yrange LO:HI]
#                        LABEL=FILE.csv...
#
# FILE.csv: the PREFIX-TASK-MODE.csv that ddp_train writes (epoch, samples, time_s, loss, ...).
# -x time puts the training time in seconds on the x axis instead of the epoch; --yrange clips
# the loss axis (diverging runs otherwise flatten the others). Needs gnuplot (Debian:
# gnuplot-nox). Default output: curves.png.
set -euo pipefail

OUT=curves.png
XCOL=1
XLABEL=epoch
TITLE="training loss"
LOGY=0
YRANGE=""
SERIES=()

usage() { sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        -o) OUT=$2; shift 2 ;;
        -x)
            case "$2" in
                epoch) XCOL=1; XLABEL=epoch ;;
                time) XCOL=3; XLABEL="training time (s)" ;;
                *) echo "plot_curves.sh: -x takes epoch or time" >&2; exit 2 ;;
            esac
            shift 2 ;;
        --title) TITLE=$2; shift 2 ;;
        --logy) LOGY=1; shift ;;
        --yrange) YRANGE=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        -*) echo "plot_curves.sh: unknown option '$1'" >&2; usage >&2; exit 2 ;;
        *=*) SERIES+=("$1"); shift ;;
        *) echo "plot_curves.sh: expected LABEL=FILE.csv, got '$1'" >&2; exit 2 ;;
    esac
done
(( ${#SERIES[@]} > 0 )) || { usage >&2; exit 2; }
command -v gnuplot >/dev/null || { echo "plot_curves.sh: gnuplot not found (Debian: apt-get install gnuplot-nox)" >&2; exit 2; }

plot=""
for s in "${SERIES[@]}"; do
    label=${s%%=*} file=${s#*=}
    [[ -r $file ]] || { echo "plot_curves.sh: cannot read '$file'" >&2; exit 2; }
    # Diverged runs write inf/nan losses; gnuplot skips those points.
    plot+="${plot:+, }\"$file\" using $XCOL:4 skip 1 with linespoints title \"$label\""
done

gnuplot <<EOF
if (strstrt(GPVAL_TERMINALS, "pngcairo") > 0) {
    set terminal pngcairo size 900,540
} else {
    set terminal png size 900,540
}
set termoption noenhanced
set output "$OUT"
set datafile separator ","
set title "$TITLE"
set xlabel "$XLABEL"
set ylabel "training loss (mean over the epoch)"
$( ((LOGY)) && echo "set logscale y" )
$( [[ -n $YRANGE ]] && echo "set yrange [$YRANGE]" )
set grid
set key top right
plot $plot
EOF
echo "plot_curves.sh: wrote $OUT"
