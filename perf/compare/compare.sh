#!/usr/bin/env bash
# Side-by-side allreduce (float sum) bus bandwidth, same sizes, one table joined by size:
# ringcomm with its defaults (shared memory on one host) against Open MPI with its defaults
# (shared memory), and ringcomm over TCP against Open MPI over TCP loopback and against Gloo
# (TCP, its only transport; gloo::allreduce as PyTorch calls it, perf/compare/gloo_allreduce.cc)
# where DIR/perf/gloo_allreduce was built (libgloo-dev; --no-gloo leaves it out). Each pair runs on
# the same transport and the same TCP congestion control: the TCP run of ringcomm gets
# RING_TRANSPORT=tcp and RING_TCP_CONGESTION=system (the host's, which Open MPI's sockets get;
# ringcomm's own default, auto, would pick cubic inside a host, which on a host whose default
# is bbr is a large advantage that has nothing to do with the libraries). Export
# RING_TCP_CONGESTION to override; the header says what each ran with. --cc NAME (root) makes
# NAME the host's default (net.ipv4.tcp_congestion_control) while the script runs, for both
# libraries alike: --cc cubic compares them as on a stock Debian host.
#
#   perf/compare/compare.sh [-n NRANKS] [-b MIN] [-e MAX] [-f F] [--build DIR]
#                           [--iters N] [--warmup N] [--check 0|1] [--repeat R] [--cc NAME] [--no-gloo]
#                           [--netns [--rate R | --no-shape] [--mtu M] [--timeout SEC]]
#
# Sizes accept K/M/G suffixes (powers of 1024). --repeat R runs every library R times,
# interleaved (ringcomm, ring-TCP, OMPI-TCP, OMPI-default, Gloo, ringcomm, ...), and reports per size the median of the R runs'
# times, with the spread (min-max) of ringcomm and Open MPI default: oversubscribed runs vary
# from run to run more than the libraries differ, and on a VM even 2 ranks do: the cost of moving
# data between two vCPUs changes in steps that last milliseconds to seconds (perf/micro/xcore_pair.c,
# docs/performance.md 2026-11-27 (2)), so use a large R (20 or more) there. Needs DIR/tools/ringrun, DIR/perf/ring_perf and
# DIR/perf/mpi_allreduce (built by meson when it finds MPI) and mpirun on PATH.
# --netns (root): one rank per network namespace on the rate-limited bed of perf/netns/
# (default 1gbit each way), ringcomm, Open MPI ob1/tcp and Gloo on the same bed; no shared-memory run.
set -euo pipefail

NRANKS=4
MINB=4
MAXB=64M
FACTOR=2
BUILD=build
ITERS=20
WARMUP=5
CHECK=1
REPEAT=1

NETNS=0
RATE=1gbit
MTU=1500
TIMEOUT=600
CC=""
GLOO=1

usage() {
    sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'
}

need_arg() { [[ $# -ge 2 && -n "$2" ]] || { echo "compare.sh: $1 needs a value" >&2; exit 2; }; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        -n) need_arg "$@"; NRANKS=$2; shift 2 ;;
        -b) need_arg "$@"; MINB=$2; shift 2 ;;
        -e) need_arg "$@"; MAXB=$2; shift 2 ;;
        -f) need_arg "$@"; FACTOR=$2; shift 2 ;;
        --build) need_arg "$@"; BUILD=$2; shift 2 ;;
        --build=*) BUILD=${1#--build=}; shift ;;
        --iters) need_arg "$@"; ITERS=$2; shift 2 ;;
        --warmup) need_arg "$@"; WARMUP=$2; shift 2 ;;
        --check) need_arg "$@"; CHECK=$2; shift 2 ;;
        --repeat) need_arg "$@"; REPEAT=$2; shift 2 ;;
        --netns) NETNS=1; shift ;;
        --rate) need_arg "$@"; RATE=$2; shift 2 ;;
        --no-shape) RATE=""; shift ;;
        --mtu) need_arg "$@"; MTU=$2; shift 2 ;;
        --timeout) need_arg "$@"; TIMEOUT=$2; shift 2 ;;
        --cc) need_arg "$@"; CC=$2; shift 2 ;;
        --no-gloo) GLOO=0; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "compare.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done

[[ $NRANKS =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: -n must be a positive integer" >&2; exit 2; }
[[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: --timeout must be a positive number of seconds" >&2; exit 2; }
[[ $REPEAT =~ ^[1-9][0-9]*$ ]] || { echo "compare.sh: --repeat must be a positive integer" >&2; exit 2; }

CC_FILE=/proc/sys/net/ipv4/tcp_congestion_control
CC_WAS=""
if [[ -n $CC ]]; then
    [[ $CC =~ ^[a-z0-9_-]{1,15}$ ]] || { echo "compare.sh: --cc '$CC': not a congestion control name" >&2; exit 2; }
    CC_WAS=$(cat "$CC_FILE")
    echo "$CC" >"$CC_FILE" 2>/dev/null || {
        echo "compare.sh: --cc $CC: cannot write $CC_FILE (root? available: $(cat /proc/sys/net/ipv4/tcp_available_congestion_control 2>/dev/null))" >&2
        exit 2
    }
fi
restore_cc() { [[ -z $CC_WAS ]] || echo "$CC_WAS" >"$CC_FILE" || true; }
trap restore_cc EXIT

RINGRUN=$BUILD/tools/ringrun
RING_PERF=$BUILD/perf/ring_perf
MPI_BENCH=$BUILD/perf/mpi_allreduce
for f in "$RINGRUN" "$RING_PERF" "$MPI_BENCH"; do
    [[ -x $f ]] || { echo "compare.sh: $f not found or not executable (build first; mpi_allreduce needs MPI at meson setup)" >&2; exit 2; }
done
command -v mpirun >/dev/null || { echo "compare.sh: mpirun not found" >&2; exit 2; }
GLOO_BENCH=$BUILD/perf/gloo_allreduce
GLOO_WHY=""
if ((GLOO)) && [[ ! -x $GLOO_BENCH ]]; then
    GLOO=0
    GLOO_WHY="not built: $GLOO_BENCH (meson builds it where g++ and libgloo-dev are)"
elif ((!GLOO)); then
    GLOO_WHY="left out (--no-gloo)"
fi

BENCH_ARGS=(-b "$MINB" -e "$MAXB" -f "$FACTOR" -n "$ITERS" -w "$WARMUP" -c "$CHECK" -d float --csv)

MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np "$NRANKS")
# More ranks than cores: let idle Open MPI ranks yield instead of spinning on the cores the
# others need (ringcomm's progress threads block in poll() and need no such knob).
NCPU=$(nproc 2>/dev/null || echo 1)
if (( NRANKS > NCPU )); then
    MPIRUN+=(--mca mpi_yield_when_idle 1)
fi
export OMPI_MCA_rmaps_base_oversubscribe=1

# --no-probe: ring_perf would otherwise stream 64 MiB between neighbours (its alpha and link
# probe) before the sweep, which mpi_allreduce does not do: both start cold. (No effect seen on
# 2026-12-06, 2 ranks over TCP under bbr, 1 MiB: 475-571 us after the probe, 555-576 without.)
# compare.sh reads no model column.
CMD_RING=("$RINGRUN" -n "$NRANKS" -- "$RING_PERF" -C allreduce --no-probe "${BENCH_ARGS[@]}")
RING_TCP_CC=${RING_TCP_CONGESTION:-system}
CMD_RTCP=(env RING_TRANSPORT=tcp RING_TCP_CONGESTION="$RING_TCP_CC" "${CMD_RING[@]}")
HOST_CC=$(cat "$CC_FILE" 2>/dev/null || echo unknown)
CMD_TCP=("${MPIRUN[@]}" --mca pml ob1 --mca btl "tcp,self" --mca btl_tcp_if_include lo "$MPI_BENCH" "${BENCH_ARGS[@]}")
CMD_DEF=("${MPIRUN[@]}" "$MPI_BENCH" "${BENCH_ARGS[@]}")

TMP=$(mktemp -d "${TMPDIR:-/tmp}/ringcmp.XXXXXX")
trap 'restore_cc; rm -rf "$TMP"' EXIT
# Gloo's ranks meet in a FileStore directory, a fresh one per run (its keys stay): "STORE" in
# the command is replaced by it. On one host over lo; on the bed the ranks take the bed's
# interface from RING_SOCKET_IFNAME, which bed_run sets. Unbound, as torchrun starts them:
# every Gloo rank has a device thread that must run while its caller waits, and with ringrun's
# one core per rank the two took turns at the scheduler's tick (4.0 ms per call from 16 B at
# N = 2 on this project's 2-vCPU VM, 0.3-0.7 ms unbound; docs/performance.md 2026-12-07 (4)).
CMD_GLOO=("$RINGRUN" -n "$NRANKS" --bind-to none -- env GLOO_SOCKET_IFNAME=lo "$GLOO_BENCH" --store STORE "${BENCH_ARGS[@]}")

# Every RING_* setting of the caller (not the job's secret), so that the table says how it was made.
print_ring_env() {
    local v
    for v in $(compgen -e | grep '^RING_' | grep -v '^RING_SECRET$'); do
        echo "# env: $v=${!v}"
    done
}

if ((NETNS)); then
    # shellcheck source-path=SCRIPTDIR source=../netns/lib.sh
    source "$(dirname "${BASH_SOURCE[0]}")/../netns/lib.sh"
    LINK_GBPS=""
    if [[ -n $RATE ]]; then
        bps=$(bed_rate_bps "$RATE") || { echo "compare.sh: --rate '$RATE': not a tc rate (e.g. 1gbit, 500mbit)" >&2; exit 2; }
        LINK_GBPS=$(awk -v b="$bps" 'BEGIN { printf("%.6f", b / 8e9) }')
    fi
    trap 'bed_down; restore_cc; rm -rf "$TMP"' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    bed_init ""
    bed_up "$NRANKS" "$RATE" "$MTU"
    bed_mpirun_init
    # Over TCP on the bed's links, as Open MPI: a caller's RING_TRANSPORT=auto would let
    # ringcomm's ranks share memory past the shaped links (lib.sh bed_run).
    export RING_TRANSPORT=tcp
    CMD_RING=("$RING_PERF" -C allreduce --no-probe "${BENCH_ARGS[@]}")
    # Every host is a node of its own to Open MPI: keep the ranks unbound, as ringcomm's are.
    # --foreground: timeout(1) in a process group of its own would keep a Ctrl-C from mpirun
    # and from this script's trap until the limit.
    CMD_TCP=(timeout --foreground -k 10 "$TIMEOUT" "${BED_MPIRUN[@]}" --bind-to none "$MPI_BENCH" "${BENCH_ARGS[@]}")
    CMD_GLOO=("$GLOO_BENCH" --store STORE "${BENCH_ARGS[@]}")
    echo "# compare.sh --netns: allreduce float sum, $NRANKS ranks, one per network namespace, on $(hostname), $NCPU cores, $(date '+%Y-%m-%d %H:%M:%S %z')"
    echo "# bed          : $(bed_describe)"
    echo "# load         : $(uptime | sed 's/^ *//')"
    echo "# ringcomm     : rank i in $(bed_ns_host i): RING_RANK=i RING_NRANKS=$NRANKS RING_ROOT=$(bed_addr 0):$BED_PORT RING_SOCKET_IFNAME=$BED_IF RING_SECRET=<random> ${CMD_RING[*]}"
    echo "# OMPI-TCP     : ${CMD_TCP[*]}"
    if ((GLOO)); then echo "# Gloo         : as ringcomm, one rank per namespace: ${CMD_GLOO[*]}"; else echo "# Gloo         : $GLOO_WHY"; fi
    echo "# TCP congestion control: host default $HOST_CC${CC:+ (--cc; $CC_WAS before)}; between namespaces every library keeps the system's"
    print_ring_env
    echo "# time: median over iterations of the max over ranks (us); busbw = bytes/time * 2(n-1)/n (GB/s, 1e9)"
    [[ -n $LINK_GBPS ]] && echo "# link: $RATE = $LINK_GBPS GB/s each way; busbw/link 1.0 = the shaped rate (TCP payload ceiling at MTU 1500: 1448/1514 = 0.956)"
fi

if ((!NETNS)); then
echo "# compare.sh: allreduce float sum, $NRANKS ranks on $(hostname), $NCPU cores, $(date '+%Y-%m-%d %H:%M:%S %z')"
echo "# ringcomm     : ${CMD_RING[*]}"
echo "# ring-TCP     : ${CMD_RTCP[*]}"
echo "# OMPI-TCP     : ${CMD_TCP[*]}"
echo "# OMPI-default : ${CMD_DEF[*]}"
if ((GLOO)); then echo "# Gloo         : ${CMD_GLOO[*]}"; else echo "# Gloo         : $GLOO_WHY"; fi
echo "# TCP congestion control: host default $HOST_CC${CC:+ (--cc; $CC_WAS before)} (Open MPI's and Gloo's sockets); ring-TCP RING_TCP_CONGESTION=$RING_TCP_CC"
echo "# ring/TCP = OMPI-TCP time / ring-TCP time; ring/def = OMPI-default time / ringcomm time; ring/Gloo = Gloo time / ring-TCP time"
print_ring_env
echo "# time: median over iterations of the max over ranks (us); busbw = bytes/time * 2(n-1)/n (GB/s, 1e9)"
fi
((REPEAT > 1)) && echo "# repeat: $REPEAT runs of each, interleaved; time = median of the runs, range = min-max over the runs"

status=0
rep=0
run() { # name outfile cmd...
    local name=$1 out=$2
    shift 2
    local rc=0
    if [[ $name == ringcomm || $name == Gloo ]] && ((NETNS)); then
        # One rank per host of the bed; rank 0's stdout, and every rank's stderr ("[i] " lines).
        bed_run "$out.ranks" "$TIMEOUT" "$@" || rc=$?
        cp "$out.ranks/rank0.out" "$out.raw"
        for ((i = 0; i < NRANKS; i++)); do sed "s/^/[$i] /" "$out.ranks/rank$i.err"; done >"$out.err"
    else
        "$@" >"$out.raw" 2>"$out.err" || rc=$?
    fi
    if (( rc != 0 )); then
        echo "# $name FAILED (exit $rc); its stderr:" >&2
        sed 's/^/#   /' "$out.err" | tail -n 40 >&2
        status=1
    fi
    # ringrun prefixes lines with "[rank] "; keep only the CSV rows of rank 0 (appended: with
    # --repeat the file holds every run).
    sed -E 's/^\[[0-9]+\] //' "$out.raw" | grep -E '^allreduce,' >>"$out" || true
    ((rep == 0)) || return 0 # the library's version line once
    grep -h -E '^(\[[0-9]+\] )?# (ringcomm|Open MPI|Gloo)' "$out.err" "$out.raw" 2>/dev/null \
        | sed -E 's/^\[[0-9]+\] //; s/^# /# '"$name"': /' | head -n 1 || true
}

: >"$TMP/ring.csv"
: >"$TMP/rtcp.csv" # stays empty with --netns: ringcomm's own run is over TCP there
: >"$TMP/tcp.csv"
: >"$TMP/def.csv" # stays empty with --netns: no shared memory between hosts
: >"$TMP/gloo.csv" # stays empty without gloo_allreduce or with --no-gloo
for ((rep = 0; rep < REPEAT; rep++)); do
    run ringcomm "$TMP/ring.csv" "${CMD_RING[@]}"
    ((NETNS)) || run ring-TCP "$TMP/rtcp.csv" "${CMD_RTCP[@]}"
    run OMPI-TCP "$TMP/tcp.csv" "${CMD_TCP[@]}"
    ((NETNS)) || run OMPI-default "$TMP/def.csv" "${CMD_DEF[@]}"
    if ((GLOO)); then
        mkdir "$TMP/store.$rep"
        run Gloo "$TMP/gloo.csv" "${CMD_GLOO[@]/#STORE/$TMP/store.$rep}"
    fi
done

# CSV columns: collective,nranks,size,count,type,redop,root,inplace,time_us,algbw,busbw,wrong
# (read by position; columns after the 12th are ignored). --netns: no OMPI-def column, and
# busbw / link rate columns when the links are shaped. The Gloo columns only where it ran.
awk -F, -v netns="$NETNS" -v link="${LINK_GBPS:-}" -v nranks="$NRANKS" -v rep="$REPEAT" -v gloo="$GLOO" '
    # Every run of a library adds one time per size; the table shows their median, and busbw
    # is recomputed from it (bytes/time * 2(n-1)/n).
    # wrong is -1 in rows that were not checked (--check 0): they count as neither right nor wrong.
    function add(tl, nt, w, s) {
        tl[s, nt[s]++] = $9; w[s] += ($12 > 0 ? $12 : 0); sizes[s] = 1
        if ($12 < 0) unchecked++; else checked++
    }
    FILENAME ~ /\/ring\.csv$/ { add(r_tl, r_n, r_w, $3) }
    FILENAME ~ /\/rtcp\.csv$/ { add(c_tl, c_n, c_w, $3) }
    FILENAME ~ /\/tcp\.csv$/  { add(t_tl, t_n, t_w, $3) }
    FILENAME ~ /\/def\.csv$/  { add(d_tl, d_n, d_w, $3) }
    FILENAME ~ /\/gloo\.csv$/ { add(g_tl, g_n, g_w, $3) }
    function median(tl, nt, s, out,    i, j, v, k, a) {
        k = nt[s]
        for (i = 0; i < k; i++) a[i] = tl[s, i] + 0
        for (i = 1; i < k; i++) { v = a[i]; j = i - 1; while (j >= 0 && a[j] > v) { a[j + 1] = a[j]; j-- } a[j + 1] = v }
        out["min"] = a[0]; out["max"] = a[k - 1]
        return k % 2 ? a[(k - 1) / 2] : (a[k / 2 - 1] + a[k / 2]) / 2
    }
    function f(a, k, fmt) { return (k in a) ? sprintf(fmt, a[k]) : "-" }
    function fl(a, k) { return (k in a) ? sprintf("%.3f", a[k] / link) : "-" }
    END {
        if (netns) {
            printf("#\n# %10s  %10s  %10s  %9s  %11s  %11s", "size", "ringcomm", "OMPI-TCP", "ring/TCP", "ringcomm", "OMPI-TCP")
            if (link != "") printf("  %10s  %10s", "ringcomm", "OMPI-TCP")
            if (gloo) printf("  %10s  %9s  %11s", "Gloo", "ring/Gloo", "Gloo")
            if (gloo && link != "") printf("  %10s", "Gloo")
            printf("\n# %10s  %10s  %10s  %9s  %11s  %11s", "(B)", "busbw GB/s", "busbw GB/s", "busbw", "time (us)", "time (us)")
            if (link != "") printf("  %10s  %10s", "busbw/link", "busbw/link")
            if (gloo) printf("  %10s  %9s  %11s", "busbw GB/s", "busbw", "time (us)")
            if (gloo && link != "") printf("  %10s", "busbw/link")
            printf("\n")
        } else {
        printf("#\n# %10s  %10s  %10s  %10s  %10s  %9s  %9s  %11s  %11s  %11s  %11s", "size", "ringcomm", "ring-TCP",
               "OMPI-TCP", "OMPI-def", "ring/TCP", "ring/def", "ringcomm", "ring-TCP", "OMPI-TCP", "OMPI-def")
        if (rep > 1) printf("  %19s  %19s  %19s", "ringcomm range", "ring-TCP range", "OMPI-def range")
        if (gloo) printf("  %10s  %9s  %11s", "Gloo", "ring/Gloo", "Gloo")
        printf("\n# %10s  %10s  %10s  %10s  %10s  %9s  %9s  %11s  %11s  %11s  %11s", "(B)", "busbw GB/s", "busbw GB/s",
               "busbw GB/s", "busbw GB/s", "busbw", "busbw", "time (us)", "time (us)", "time (us)", "time (us)")
        if (rep > 1) printf("  %19s  %19s  %19s", "time (us)", "time (us)", "time (us)")
        if (gloo) printf("  %10s  %9s  %11s", "busbw GB/s", "busbw", "time (us)")
        printf("\n")
        }
        for (s in sizes) {
            fac = nranks > 1 ? 2 * (nranks - 1) / nranks : 0
            if (s in r_n) { r_t[s] = median(r_tl, r_n, s, mm); r_lo[s] = mm["min"]; r_hi[s] = mm["max"]; r_bw[s] = r_t[s] > 0 ? s / r_t[s] / 1e3 * fac : 0 }
            if (s in c_n) { c_t[s] = median(c_tl, c_n, s, mm); c_lo[s] = mm["min"]; c_hi[s] = mm["max"]; c_bw[s] = c_t[s] > 0 ? s / c_t[s] / 1e3 * fac : 0 }
            if (s in t_n) { t_t[s] = median(t_tl, t_n, s, mm); t_bw[s] = t_t[s] > 0 ? s / t_t[s] / 1e3 * fac : 0 }
            if (s in d_n) { d_t[s] = median(d_tl, d_n, s, mm); d_lo[s] = mm["min"]; d_hi[s] = mm["max"]; d_bw[s] = d_t[s] > 0 ? s / d_t[s] / 1e3 * fac : 0 }
            if (s in g_n) { g_t[s] = median(g_tl, g_n, s, mm); g_bw[s] = g_t[s] > 0 ? s / g_t[s] / 1e3 * fac : 0 }
        }
        # The sizes stay the strings they were read as, the keys of every array: mawk (the Debian
        # default awk) prints a number of 2^31 or more as 2.14748e+09, so a key made from a number
        # would miss those rows (and their wrong elements). Compared as numbers.
        n = 0
        for (s in sizes) list[n++] = s
        # insertion sort (portable awk)
        for (i = 1; i < n; i++) { v = list[i]; j = i - 1; while (j >= 0 && list[j] + 0 > v + 0) { list[j + 1] = list[j]; j-- } list[j + 1] = v }
        wrong = 0
        for (i = 0; i < n; i++) {
            s = list[i]
            # same bytes and busbw factor: the busbw ratio is the inverse time ratio (more digits).
            # ring/TCP: the ring-TCP run against OMPI-TCP (on the bed the one ringcomm run is over TCP).
            if (netns) ratio = ((s in r_t) && (s in t_t) && r_t[s] > 0) ? sprintf("%.2f", t_t[s] / r_t[s]) : "-"
            else ratio = ((s in c_t) && (s in t_t) && c_t[s] > 0) ? sprintf("%.2f", t_t[s] / c_t[s]) : "-"
            # ring/Gloo: Gloo (TCP) against ringcomm over TCP (on the bed, its one run).
            rt = netns ? r_t[s] : c_t[s]
            gratio = ((s in g_t) && rt > 0) ? sprintf("%.2f", g_t[s] / rt) : "-"
            if (netns) {
                printf("  %10s  %10s  %10s  %9s  %11s  %11s", s, f(r_bw, s, "%.3f"), f(t_bw, s, "%.3f"), ratio,
                       f(r_t, s, "%.2f"), f(t_t, s, "%.2f"))
                if (link != "") printf("  %10s  %10s", fl(r_bw, s), fl(t_bw, s))
                if (gloo) printf("  %10s  %9s  %11s", f(g_bw, s, "%.3f"), gratio, f(g_t, s, "%.2f"))
                if (gloo && link != "") printf("  %10s", fl(g_bw, s))
                printf("\n")
            } else {
            dratio = ((s in r_t) && (s in d_t) && r_t[s] > 0) ? sprintf("%.2f", d_t[s] / r_t[s]) : "-"
            printf("  %10s  %10s  %10s  %10s  %10s  %9s  %9s  %11s  %11s  %11s  %11s", s, f(r_bw, s, "%.3f"),
                   f(c_bw, s, "%.3f"), f(t_bw, s, "%.3f"), f(d_bw, s, "%.3f"), ratio, dratio, f(r_t, s, "%.2f"),
                   f(c_t, s, "%.2f"), f(t_t, s, "%.2f"), f(d_t, s, "%.2f"))
            if (rep > 1)
                printf("  %19s  %19s  %19s", (s in r_lo) ? sprintf("%.1f-%.1f", r_lo[s], r_hi[s]) : "-",
                       (s in c_lo) ? sprintf("%.1f-%.1f", c_lo[s], c_hi[s]) : "-",
                       (s in d_lo) ? sprintf("%.1f-%.1f", d_lo[s], d_hi[s]) : "-")
            if (gloo) printf("  %10s  %9s  %11s", f(g_bw, s, "%.3f"), gratio, f(g_t, s, "%.2f"))
            printf("\n")
            }
            if ((s in r_w) && r_w[s] > 0) wrong += r_w[s]
            if ((s in c_w) && c_w[s] > 0) wrong += c_w[s]
            if ((s in t_w) && t_w[s] > 0) wrong += t_w[s]
            if ((s in d_w) && d_w[s] > 0) wrong += d_w[s]
            if ((s in g_w) && g_w[s] > 0) wrong += g_w[s]
        }
        # "OK" only where rows were compared: with --check 0 nothing was.
        if (checked == 0) {
            printf("# wrong elements (all runs): N/A (%s)\n", unchecked ? "not checked, --check 0" : "no rows")
        } else {
            printf("# wrong elements (all runs): %d %s%s\n", wrong, wrong ? "FAILED" : "OK",
                   unchecked ? sprintf(" (%d rows not checked)", unchecked) : "")
        }
        exit(wrong || checked + unchecked == 0 ? 1 : 0)
    }' "$TMP/ring.csv" "$TMP/rtcp.csv" "$TMP/tcp.csv" "$TMP/def.csv" "$TMP/gloo.csv" || status=1

exit $status
