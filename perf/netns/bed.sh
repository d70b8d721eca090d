#!/usr/bin/env bash
# bed.sh: run a ringcomm job across N network namespaces ("hosts") joined by a bridge, each
# link shaped to a rate (default 1 Gbit/s both ways): a multi-host test bed on one machine.
#
#   perf/netns/bed.sh [-n N] [--rate R | --no-shape] [--mtu M] [--loss H:PERMILLE]
#                     [--build DIR] [--timeout SEC] [--prefix P] [--keep] [-- command args...]
#   perf/netns/bed.sh --clean [PREFIX]
#
#   -n N          hosts, one rank each (default 4)
#   --rate R      tc rate of every link, each direction (default 1gbit; tc units: mbit, gbit...)
#   --no-shape    no tbf: veth speed
#   --mtu M       MTU of the links (default 1500)
#   --loss H:P    drop P in 1000 IPv4 frames (random) as they reach host H and as they leave it
#                 (nftables netdev ingress of its veth0 and of its switch port; needs nft(8))
#   --build DIR   build directory of the default command (default: the repository's build/)
#   --timeout SEC kill everything after SEC seconds (default 600; exit status 124)
#   --prefix P    namespace name prefix (default rcb<pid>-); leftovers with it are removed first
#   --keep        leave the bed (and the rank logs) for debugging; remove it with --clean P
#   --clean [P]   remove the bed of prefix P, or every rcb<pid>- bed whose process is gone
#
# Rank i runs the command in namespace P"h"i with RING_RANK=i RING_NRANKS=N
# RING_ROOT=10.77.0.1:29500 RING_SECRET=<random per run> RING_SOCKET_IFNAME=veth0
# RING_LOCAL_RANK=0 RING_LOCAL_SIZE=1 (each namespace is a host of one rank) and
# RING_TRANSPORT=tcp unless the caller sets RING_TRANSPORT (the namespaces share one kernel:
# without tcp the ranks would find each other "on the same host" and bypass the links through
# shared memory); other RING_* variables of the caller pass through. Default command:
#   DIR/perf/ring_perf -C allreduce -b 4K -e 64M -f 4 -c 1
# Prints rank 0's stdout at the end; exit status 0 if every rank exited 0. Needs root.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$here/lib.sh"

N=4
RATE=1gbit
MTU=1500
BUILD=$here/../../build
TIMEOUT=600
PREFIX=""
KEEP=0
CLEAN=0
LOSS=""

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }
need_arg() { [[ $# -ge 2 && -n "$2" ]] || { echo "bed.sh: $1 needs a value" >&2; exit 2; }; }

while [[ $# -gt 0 ]]; do
    case "$1" in
        -n) need_arg "$@"; N=$2; shift 2 ;;
        --rate) need_arg "$@"; RATE=$2; shift 2 ;;
        --rate=*) RATE=${1#--rate=}; shift ;;
        --no-shape) RATE=""; shift ;;
        --mtu) need_arg "$@"; MTU=$2; shift 2 ;;
        --loss) need_arg "$@"; LOSS=$2; shift 2 ;;
        --build) need_arg "$@"; BUILD=$2; shift 2 ;;
        --build=*) BUILD=${1#--build=}; shift ;;
        --timeout) need_arg "$@"; TIMEOUT=$2; shift 2 ;;
        --prefix) need_arg "$@"; PREFIX=$2; shift 2 ;;
        --keep) KEEP=1; shift ;;
        --clean) CLEAN=1; shift; if [[ $# -gt 0 && $1 != -* ]]; then PREFIX=$1; shift; fi ;;
        -h|--help) usage; exit 0 ;;
        --) shift; break ;;
        *) echo "bed.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done

if ((CLEAN)); then
    if why=$(bed_unavailable); then echo "bed.sh: cannot run: $why" >&2; exit 2; fi
    if [[ -n $PREFIX && ! $PREFIX =~ ^[A-Za-z0-9_.-]{1,20}$ ]]; then echo "bed.sh: bad prefix '$PREFIX'" >&2; exit 2; fi
    if [[ -n $PREFIX ]]; then bed_purge "$PREFIX"; else BED_PREFIX=none bed_purge_stale; fi
    exit 0
fi

[[ $N =~ ^[1-9][0-9]*$ ]] || { echo "bed.sh: -n must be a positive integer" >&2; exit 2; }
[[ $TIMEOUT =~ ^[1-9][0-9]*$ ]] || { echo "bed.sh: --timeout must be a positive number of seconds" >&2; exit 2; }
if [[ -n $LOSS ]]; then
    [[ $LOSS =~ ^([0-9]+):([0-9]+)$ ]] && ((BASH_REMATCH[1] < N && BASH_REMATCH[2] <= 1000)) ||
        { echo "bed.sh: --loss expects HOST:PERMILLE with HOST < $N and PERMILLE <= 1000" >&2; exit 2; }
    command -v nft >/dev/null || { echo "bed.sh: --loss needs nft(8) (Debian package nftables)" >&2; exit 2; }
fi

if [[ $# -eq 0 ]]; then
    set -- "$BUILD/perf/ring_perf" -C allreduce -b 4K -e 64M -f 4 -c 1
fi
if [[ $1 == */* && ! -x $1 ]]; then
    echo "bed.sh: $1 not found or not executable (build first, or --build DIR)" >&2
    exit 2
fi

on_exit() {
    local rc=$?
    trap - EXIT INT TERM
    if ((KEEP)) && [[ -n $BED_PREFIX ]]; then
        bed_keep
        echo "# netns bed: kept: namespaces ${BED_PREFIX}*, logs in $BED_DIR; remove with: $0 --clean $BED_PREFIX" >&2
    else
        bed_down
    fi
    exit "$rc"
}
trap on_exit EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

bed_init "$PREFIX"
bed_up "$N" "$RATE" "$MTU"
if [[ -n $LOSS ]]; then
    lh=${LOSS%%:*} lp=${LOSS#*:}
    bed_loss_on "$lh" "$lp"
    echo "# netns bed: host $lh loses $lp in 1000 IPv4 frames each way (nftables, ingress of $BED_IF and of p$lh)"
fi

echo "# netns bed: $(bed_describe)"
echo "# netns bed: command: $*"
echo "# netns bed: rank i in $(bed_ns_host i): RING_RANK=i RING_NRANKS=$N RING_ROOT=$(bed_addr 0):$BED_PORT RING_SOCKET_IFNAME=$BED_IF RING_TRANSPORT=${RING_TRANSPORT:-tcp} RING_SECRET=<random>"
for v in $(compgen -e | grep -E '^RING_' | sort); do echo "# netns bed: env: $v=${!v}"; done
echo "# netns bed: $(date '+%Y-%m-%d %H:%M:%S %z'), $(uptime | sed 's/^ *//')"

out=$BED_DIR/logs
rc=0
bed_run "$out" "$TIMEOUT" "$@" || rc=$?
[[ -z $LOSS ]] || echo "# netns bed: --loss dropped $(bed_loss_drops) frames"

cat "$out/rank0.out"
if ((rc == 0)); then
    echo "# netns bed: all $N ranks exited 0 in ${BED_ELAPSED} s"
else
    bed_report_failed "$out"
    if ((rc == 124)); then
        echo "# netns bed: FAILED: timeout after $TIMEOUT s" >&2
    fi
    echo "# netns bed: FAILED: ${#BED_FAILED[@]} of $N ranks did not exit 0 (${BED_FAILED[*]})" >&2
    exit "$rc"
fi
