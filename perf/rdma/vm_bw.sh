#!/usr/bin/env bash
# vm_bw.sh BUILD_DIR - what the verbs device gives (ib_write_bw) next to what the library's
# allreduce gets out of it (ring_perf, 2 ranks), in one report with the ratio.
#
#   tests/rdma/run-in-vm.sh "$PWD" perf/rdma/vm_bw.sh build      # in the soft-RoCE guest
#   perf/rdma/vm_bw.sh build                                     # on a host with a verbs device
#
# Why both: a transport's number means little alone; against the raw verbs bandwidth of the
# same device it says how much the library leaves on the table. At N = 2 the ring's busbw is
# what each rank sends per second, so busbw / ib_write_bw is the fraction of the device's
# one-way RDMA WRITE bandwidth the allreduce achieves. Both directions of the ring share the
# device, so ib_write_bw -b (both directions at once; half of its sum is what one direction
# gets while the other is busy too) is reported as a second reference.
# In the guest (QEMU TCG) everything, rxe included, runs on 2 emulated CPUs at ~15-25 MB/s:
# the figures show whether the transport is in proportion to the device, not what hardware
# would do.
#
# Knobs:
#   RING_VM_TRANSPORT   RING_TRANSPORT of the ranks (rdma; tcp to try the script)   (rdma)
#   RING_VM_DEVICE      verbs device (the first of ibv_devices)            (rxe0 if present)
#   RING_VM_GID_INDEX   GID index: 1 = the IPv4 RoCE v2 GID of the guest's rxe0          (1)
#   RING_VM_BW_SIZES    ib_write_bw message sizes, K/M suffixes                     (4M 8M)
#   RING_VM_BW_ITERS    ib_write_bw iterations per size (-n, at least 5)                  (8)
#   RING_VM_PERF_MIN / RING_VM_PERF_MAX  ring_perf sizes (factor 2)                (4M / 16M)
#   RING_VM_PERF_ITERS  ring_perf timed iterations per size (1 warm-up)                   (5)
#   RING_VM_TIMEOUT_S   bound of each program run, seconds                              (300)
#   RING_VM_PERF_ARGS   more ring_perf options, e.g. "-R 1" (registered buffers)          ()
#   RING_VM_PASSES      passes of (ib_write_bw, then ring_perf), each row against the
#                       reference of its own pass; a summary line closes the report       (1)
# Exit status: 0 both measured, 1 a measurement failed, 2 usage.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e 's/^# \{0,1\}//' -e '/^set -euo/d' >&2; exit 2; }
[ $# -eq 1 ] || usage
case $1 in -h|--help) usage ;; esac
build=$(cd "$1" 2>/dev/null && pwd) || { echo "vm_bw: no build directory $1" >&2; exit 2; }
for f in "$build/tools/ringrun" "$build/perf/ring_perf"; do
  [ -x "$f" ] || { echo "vm_bw: $f is missing: build first (ninja -C $1)" >&2; exit 2; }
done
command -v ib_write_bw >/dev/null || { echo "vm_bw: ib_write_bw not found (apt-get install perftest)" >&2; exit 2; }

transport=${RING_VM_TRANSPORT:-rdma}
gid=${RING_VM_GID_INDEX:-1}
bw_iters=${RING_VM_BW_ITERS:-8}
perf_min=${RING_VM_PERF_MIN:-4M}
perf_max=${RING_VM_PERF_MAX:-16M}
perf_iters=${RING_VM_PERF_ITERS:-5}
limit=${RING_VM_TIMEOUT_S:-300}
dev=${RING_VM_DEVICE:-}
if [ -z "$dev" ]; then
  devs=$(ibv_devices 2>/dev/null | awk 'NR > 2 {print $1}')
  if grep -qx rxe0 <<<"$devs"; then dev=rxe0; else dev=$(head -n 1 <<<"$devs"); fi
fi
[ -n "$dev" ] || { echo "vm_bw: no verbs device (ibv_devices lists none): run it in tests/rdma/run-in-vm.sh" >&2; exit 1; }

bytes() { # 4M -> 4194304
  local v=$1 n=${1%[KkMmGg]}
  [[ $n =~ ^[0-9]+$ ]] || { echo "vm_bw: bad size $v" >&2; exit 2; }
  case $v in *[Kk]) echo $((n << 10)) ;; *[Mm]) echo $((n << 20)) ;; *[Gg]) echo $((n << 30)) ;; *) echo "$n" ;; esac
}

tmp=$(mktemp -d)
pids=()
# shellcheck disable=SC2317  # the trap's
cleanup() { local p; for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM

# The server has to listen before the client connects; under emulation starting it takes
# anything from 0.1 to 2 s, so wait for its socket rather than sleep a guess.
wait_listen() { # port pid
  local i
  for ((i = 0; i < 200; i++)); do
    ss -Hltn "sport = :$1" 2>/dev/null | grep -q . && return 0
    kill -0 "$2" 2>/dev/null || return 1
    sleep 0.05
  done
  return 1
}

# ib_write_bw SIZE [extra args]: sets res to the average in MiB/s (perftest's unit), or fails.
# Not in $(...): the server's pid has to reach the cleanup trap of this shell.
port=18700
res=
write_bw() {
  local size=$1 srv rc=0 out
  shift
  res=
  port=$((port + 1))
  local args=(-d "$dev" -x "$gid" -F -s "$size" -n "$bw_iters" -p "$port" "$@")
  timeout "$limit" ib_write_bw "${args[@]}" > "$tmp/srv.$port" 2>&1 &
  srv=$!
  pids+=("$srv")
  wait_listen "$port" "$srv" || { echo "vm_bw: ib_write_bw server did not start:" >&2; cat "$tmp/srv.$port" >&2; return 1; }
  timeout "$limit" ib_write_bw "${args[@]}" 127.0.0.1 > "$tmp/cli.$port" 2>&1 || rc=$?
  wait "$srv" || rc=$((rc ? rc : 1))
  # the result row: "#bytes #iterations BW-peak BW-average MsgRate"
  out=$(awk -v s="$size" '$1 == s && NF >= 5 {print $4}' "$tmp/cli.$port" | tail -n 1)
  if [ "$rc" -ne 0 ] || [ -z "$out" ]; then
    echo "vm_bw: ib_write_bw -s $size $* failed (exit $rc):" >&2; cat "$tmp/cli.$port" "$tmp/srv.$port" >&2
    return 1
  fi
  res=$out
}

gbps() { awk -v m="$1" 'BEGIN { printf "%.4f", m * 1048576 / 1e9 }'; }  # MiB/s -> GB/s

# The device's own counters around a program: a retransmission after a lost packet waits for
# the QP's ACK timeout (67 ms at timeout 14), which is what an outlier run looks like; the
# delta says whether that is what happened. Devices without hw_counters print nothing.
cdir=/sys/class/infiniband/$dev/ports/1/hw_counters
counter_values() { local f; for f in "$cdir"/*; do echo "${f##*/} $(cat "$f" 2>/dev/null || echo 0)"; done; }
snap() { [ -d "$cdir" ] || return 0; counter_values > "$tmp/counters0"; }
counters() { # label: print the nonzero deltas since snap
  [ -d "$cdir" ] || return 0
  echo "#   $dev counters during $1:$(counter_values | awk 'NR == FNR { c[$1] = $2; next }
    $2 != c[$1] { printf " %s +%d", $1, $2 - c[$1]; n++ } END { if (!n) printf " none changed" }' "$tmp/counters0" -)"
}
mtu=$(ibv_devinfo -d "$dev" 2>/dev/null | awk '$1 == "active_mtu:" {print $2; exit}')

passes=${RING_VM_PASSES:-1}
[[ $passes =~ ^[1-9][0-9]*$ ]] || { echo "vm_bw: RING_VM_PASSES must be a positive number" >&2; exit 2; }
t0=$(date +%s)
echo "# vm_bw: $(uname -r), $(nproc) CPUs, device $dev (GID index $gid, active MTU ${mtu:-?})${RDMA_VM:+, in the soft-RoCE guest (QEMU TCG)}"
declare -A uni bi
fail=0
: > "$tmp/ratios"
# ib_write_bw moves by a third from one run to the next in the guest, so a single pass says
# little; each pass measures its own reference right before its ring_perf.
one_pass() {
  sizes=()
  uni=()
  bi=()
  echo "# ib_write_bw: RC RDMA WRITE, client and server on this host over $dev, -n $bw_iters"
  for s in ${RING_VM_BW_SIZES:-4M 8M}; do
    b=$(bytes "$s")
    sizes+=("$b")
    snap
    if write_bw "$b"; then uni[$b]=$(gbps "$res"); else uni[$b]=; fail=1; fi
    if write_bw "$b" -b; then bi[$b]=$(gbps "$res"); else bi[$b]=; fail=1; fi
    printf '#   %9d B  one way %s GB/s   both ways %s GB/s in all\n' "$b" "${uni[$b]:-FAILED}" "${bi[$b]:-FAILED}"
    counters "ib_write_bw -s $b (one way, then -b)"
  done

  perf_args=${RING_VM_PERF_ARGS:-}
  echo "# ring_perf: allreduce float sum, 2 ranks (ringrun -n 2), RING_TRANSPORT=$transport, -n $perf_iters -w 1, checked${perf_args:+, $perf_args}"
  rc=0
  snap
  timeout "$limit" "$build/tools/ringrun" -n 2 --no-prefix --timeout "$limit" -x "RING_TRANSPORT=$transport" \
    "$build/perf/ring_perf" -b "$perf_min" -e "$perf_max" -f 2 -n "$perf_iters" -w 1 -c 1 --csv \
    --probe-bytes 4M $perf_args > "$tmp/perf.csv" 2> "$tmp/perf.err" || rc=$?
  grep -E '^# (transport|alpha|env)' "$tmp/perf.err" | sed 's/^# /#   /' || true
  counters ring_perf
  if [ "$rc" -ne 0 ] || ! grep -q '^allreduce,' "$tmp/perf.csv"; then
    echo "vm_bw: ring_perf failed (exit $rc):" >&2
    cat "$tmp/perf.err" "$tmp/perf.csv" >&2
    exit 1
  fi
  print_rows
}

# Reference for a row: ib_write_bw at the largest measured size not above it (else the
# smallest): RDMA WRITE bandwidth is flat from a few MiB up.
ref_size() {
  local r=0 s
  for s in "${sizes[@]}"; do if [ "$s" -le "$1" ] && [ "$s" -gt "$r" ]; then r=$s; fi; done
  if [ "$r" = 0 ]; then r=$(printf '%s\n' "${sizes[@]}" | sort -n | head -n 1); fi
  echo "$r"
}
print_rows() {
  echo "#"
  printf '%10s %12s %10s %10s %9s %12s %9s %14s %9s\n' size time_us algbw_GBps busbw_GBps wrong \
    write_bw_GBps busbw/wr "bidir/2_GBps" busbw/bi2
  # ring_perf's CSV: collective,nranks,size,count,type,redop,root,inplace,time_us,algbw,busbw,wrong,...
  while IFS=, read -r coll _ size _ _ _ _ _ t alg bus wrong _; do
    [ "$coll" = allreduce ] || continue
    r=$(ref_size "$size")
    awk -v ratios="$tmp/ratios" -v size="$size" -v t="$t" -v alg="$alg" -v bus="$bus" -v wrong="$wrong" -v u="${uni[$r]:-}" -v b="${bi[$r]:-}" 'BEGIN {
      us = (u > 0) ? u : "-"
      ru = (u > 0) ? sprintf("%.2f", bus / u) : "-"
      bs = (b > 0) ? sprintf("%.4f", b / 2) : "-"
      rb = (b > 0) ? sprintf("%.2f", bus / (b / 2)) : "-"
      printf "%10d %12.1f %10.4f %10.4f %9d %12s %9s %14s %9s\n", size, t, alg, bus, wrong, us, ru, bs, rb
      if (u > 0 && b > 0) printf "%.4f %.4f\n", bus / u, bus / (b / 2) >> ratios }'
  done < "$tmp/perf.csv"
  echo "# GB = 1e9 bytes; write_bw: ib_write_bw one way at $(printf '%s ' "${sizes[@]}")B (the largest not above the row's size);"
  echo "# bidir/2: half of ib_write_bw -b (both directions at once), what each direction gets when both run."
}

for ((pass = 1; pass <= passes; pass++)); do
  [ "$passes" -eq 1 ] || echo "# ---- pass $pass of $passes"
  one_pass
done
# The issue's yardstick is 0.8 of one-way ib_write_bw; the count says how often a row got there.
stats() { # column of $tmp/ratios: "median (min-max) count-at-or-above-0.80"
  cut -d' ' -f"$1" "$tmp/ratios" | sort -n | awk '{ v[NR] = $1; if ($1 >= 0.8) k++ }
    END { printf "%.2f (%.2f-%.2f) %d", (v[int((NR + 1) / 2)] + v[int(NR / 2) + 1]) / 2, v[1], v[NR], k }'
}
if [ -s "$tmp/ratios" ]; then
  read -r um ur uk <<<"$(stats 1)"
  read -r bm br _ <<<"$(stats 2)"
  echo "# summary: $(wc -l < "$tmp/ratios") row(s); busbw/write_bw median $um $ur, $uk at or above 0.80; busbw/bidir2 median $bm $br"
fi
echo "# vm_bw: $(( $(date +%s) - t0 )) s"
exit "$fail"
