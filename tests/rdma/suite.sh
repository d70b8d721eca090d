#!/usr/bin/env bash
# suite.sh BUILD_DIR - the multi-process collective tests over RDMA verbs, bounded so that
# they fit an emulated soft-RoCE guest. Runs INSIDE the guest:
#
#   tests/rdma/run-in-vm.sh "$PWD" tests/rdma/suite.sh build
#
# Why bounded: in the guest (QEMU TCG, 2 vCPUs on 2 host cores) code runs 10-50x slower
# than native and rxe0 moves ~15-25 MB/s, so the full matrices (N up to 8, buffers up to
# 3 MB, 50 fault trials) would take an hour. What stays is what a transport can get wrong:
#   1. collectives: test_collectives' "collectives" suite at N = 1..4 (RING_TEST_MAX_RANKS):
#      every collective x dtype x op, in-place and out-of-place, blocking and async, ragged
#      and prime counts, ring / recursive doubling / recursive halving, small chunks with one
#      message in flight, two communicators in one process, 1000 back-to-back calls with the
#      fd/thread/memory soak checks; buffers at most RING_VM_MAX_BYTES (RING_TEST_MAX_BYTES).
#   2. faults: a rank SIGKILLed at a random point of random collectives; every survivor
#      must return an error naming it within RING_VM_FAULT_BOUND_MS and never hang
#      (RING_VM_FAULT_TRIALS trials); one test at a time. The bound is 5 s here, 2 s on a
#      host: under TCG a survivor that learns of the death at once still needs up to ~1 s to
#      be scheduled and return (with the tests side by side; 0.1 s one at a time), and 5 s
#      still fails a transport that only notices through the 30 s timeout.
#   3. handshake: a rank stalls in the middle of the verbs handshake; the others must fail
#      init with a timeout that names it and release the half-made connections.
#   4. mixed: RING_TRANSPORT=auto across fake hosts (shm + verbs in one ring), registered
#      buffers that verbs read in place, RING_IB_GID_INDEX naming an unused GID entry (with
#      RING_TRANSPORT=rdma and auto), and two ranks whose GIDs cannot reach each other (IPv6
#      facing IPv4; RoCE v1, through gid_as_v1.so, facing v2): refused on both, or TCP under auto;
#      GIDs chosen by kind (RING_IB_ADDR_FAMILY=AF_INET6 and RING_IB_ADDR_RANGE=fe80::/10 run on
#      fe80::, RING_IB_ROCE_VERSION=1 and RING_IB_ADDR_RANGE=10.0.0.0/8 find nothing on rxe0).
#   5. qps: 3 queue pairs per connection (RING_IB_QPS_PER_PEER=3), results checked; the QPs
#      report the RING_IB_TIMEOUT, RING_IB_RETRY_CNT, RING_IB_TC and RING_IB_SL given.
#   6. credits: a receiver send queue of 1 entry (RING_TEST_IB_RECV_SQ=1), so that credit
#      writes wait for one another and for the reads of registered buffers; results checked,
#      and the waits must show in the log.
#   7. gdr: device buffers over verbs on the emulated GPU (cuda_coll_check --emulate): with
#      GPUDirect RDMA (src/cuda/gdr.c; the emulated GPU's memory registered with ibv_reg_mr),
#      mixed with host-buffer ranks, and staged (RING_IB_GDR=0); every result checked.
#   8. silent: a rank that joins and never calls; its peer's timeout must say that the silent
#      rank takes nothing from the verbs slots and sends nothing, not only whom it waited for.
# A raw-verbs ping-pong over rxe0 runs first, so that a broken bed is not mistaken for a
# library bug. BUILD_DIR may be a sanitizer build (./test.sh runs build-asan/ too): hand the
# guest ASAN_OPTIONS etc. (RDMA_VM_PASSENV); a rank with a report exits non-zero, and that
# fails its stage like any other failure.
#
# Knobs:
#   RING_VM_TRANSPORT     RING_TRANSPORT of every rank                         (rdma)
#                         (tcp/shm check the bed and time it without the verbs transport)
#   RING_VM_MAX_BYTES     largest buffer of any collective, K/M suffixes         (256K)
#   RING_VM_FAULT_TRIALS  fault-injection trials, N = 2..4                          (8)
#   RING_VM_FAULT_BOUND_MS  a survivor's error at most this long after the kill    (5000)
#   RING_VM_BACKTOBACK_OPS  calls in the back-to-back soak                       (1000)
#   RING_VM_SKIP_TESTS    collectives tests to leave out as well, Criterion globs,
#                         e.g. "matrix_n1 float_random_*"                          (none)
#   RING_VM_STAGE_TIMEOUT seconds per stage before it is killed and fails         (600)
#   RING_VM_STAGES        only these stages, e.g. "faults handshake" (smoke collectives
#                         faults handshake mixed qps credits gdr silent)             (all)
#   RING_TEST_SEED        perturbs every seed (as for meson test)
# Exit status: 0 every stage passed, 1 a stage failed, 2 usage or a missing build.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed -e 's/^# \{0,1\}//' -e '/^set -euo/d' >&2; exit 2; }
[ $# -eq 1 ] || usage
case $1 in -h|--help) usage ;; esac
build=$(cd "$1" 2>/dev/null && pwd) || { echo "suite: no build directory $1" >&2; exit 2; }
here=$(cd "$(dirname "$0")" && pwd)
tc=$build/tests/test_collectives
for f in "$tc" "$build/tests/mp_worker" "$build/tools/ringrun" "$build/tests/ringrun_child" "$build/perf/ring_perf"; do
  [ -x "$f" ] || { echo "suite: $f is missing: build first (ninja -C $1)" >&2; exit 2; }
done

transport=${RING_VM_TRANSPORT:-rdma}
stage_timeout=${RING_VM_STAGE_TIMEOUT:-600}
t_start=$(date +%s)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# What meson's test() sets for this binary (tests/meson.build), minus the 2^31-element test.
export RING_TEST_WORKER=$build/tests/mp_worker
export RING_TEST_RINGRUN=$build/tools/ringrun
export RING_TEST_RINGRUN_CHILD=$build/tests/ringrun_child
export RING_TEST_LARGE=0 CRITERION_NO_EARLY_EXIT=1
export RING_TEST_TRANSPORT=$transport
export RING_TEST_MAX_RANKS=4
export RING_TEST_MAX_BYTES=${RING_VM_MAX_BYTES:-256K}
export RING_TEST_FAULT_TRIALS=${RING_VM_FAULT_TRIALS:-8}
export RING_TEST_FAULT_BOUND_MS=${RING_VM_FAULT_BOUND_MS:-5000}
export RING_TEST_BACKTOBACK_OPS=${RING_VM_BACKTOBACK_OPS:-1000}
# The collectives filter: the tests named for 5 ranks and more, and RING_VM_SKIP_TESTS, out.
skip_tests='*_n[5-9]*'
read -r -a skip_more <<< "${RING_VM_SKIP_TESTS:-}"   # no globbing against the current directory
for t in "${skip_more[@]}"; do skip_tests+="|$t"; done
# A developer's tunables must not leak in (the test also filters them for the ranks).
unset RING_TEST_ALGO

echo "suite: $(uname -r), $(nproc) CPUs, transport $transport, N <= $RING_TEST_MAX_RANKS," \
     "buffers <= $RING_TEST_MAX_BYTES, $RING_TEST_FAULT_TRIALS fault trials (errors within" \
     "$RING_TEST_FAULT_BOUND_MS ms), $RING_TEST_BACKTOBACK_OPS back-to-back calls${RDMA_VM:+, in the soft-RoCE guest}"
[ -z "${RING_VM_SKIP_TESTS:-}" ] || echo "suite: collectives tests left out: $RING_VM_SKIP_TESTS"
[ -n "${RDMA_VM:-}" ] || echo "suite: not in the guest of tests/rdma/run-in-vm.sh; running on this host's devices"

results=()
failed=0
want() { [ -z "${RING_VM_STAGES:-}" ] || [[ " $RING_VM_STAGES " == *" $1 "* ]]; }
# Each stage's output also goes to a file: a failed stage's reasons are repeated in the summary,
# because a CI log that keeps only its tail (the last stages and the summary) otherwise loses
# them (stop 46: "FAIL faults ... (exit 1)" and nothing of which trial or why).
why_failed=()
stage() { # name timeout command... (a shell function bounds itself)
  local name=$1 limit=$2 t0 rc=0 dt log=$tmp/stage.${#results[@]}.log
  shift 2
  echo "suite: ---- $name"
  t0=$(date +%s)
  local run=("$@")
  declare -F "$1" >/dev/null || run=(timeout -k 10 "$limit" "$@")
  { r=0; "${run[@]}" 2>&1 || r=$?; echo "$r" > "$tmp/stage.rc"; } | tee "$log"
  rc=$(cat "$tmp/stage.rc")
  dt=$(( $(date +%s) - t0 ))
  if [ "$rc" -eq 0 ]; then
    results+=("PASS  $name  ${dt} s")
  else
    if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
      echo "suite: $name killed after ${limit} s (RING_VM_STAGE_TIMEOUT)"
    fi
    results+=("FAIL  $name  ${dt} s (exit $rc)")
    failed=1
    # Criterion's assertion and crash lines, the ranks' own complaints and sanitizer reports'
    # first lines; a stage with none of them (a script stage) gives its last lines.
    local why
    why=$(grep -a -e '^\[----\] .*[^ ]' -e '^\[FAIL\]' -e 'CRASH' -e '^\[rank [0-9]*/' -e '^==[0-9]*==ERROR' \
            -e 'runtime error: ' -e '^suite: ' "$log" | grep -v -e 'Criterion v' | tail -n 40)
    [ -n "$why" ] || why=$(tail -n 20 "$log")
    why_failed+=("---- $name:" "$why")
  fi
}

# Two processes over rxe0 with raw verbs (GID index 1 = ::ffff:198.18.0.1, RoCE v2). Only
# where a verbs device exists: under RING_VM_TRANSPORT=tcp on a host without one, skipped.
# The server must listen before the client connects; under emulation (and a loaded host)
# starting it takes 0.1 to several seconds, so wait for its socket rather than sleep a guess.
# shellcheck disable=SC2317  # called through stage
verbs_smoke() {
  local port=18515 srv rc=0 i
  timeout 60 ibv_rc_pingpong -d rxe0 -g 1 -p "$port" -n 200 -s 4096 > "$tmp/srv.log" 2>&1 &
  srv=$!
  for ((i = 0; i < 400; i++)); do
    ss -Hltn "sport = :$port" 2>/dev/null | grep -q . && break
    kill -0 "$srv" 2>/dev/null || break
    sleep 0.05
  done
  timeout 30 ibv_rc_pingpong -d rxe0 -g 1 -p "$port" -n 200 -s 4096 127.0.0.1 > "$tmp/cli.log" 2>&1 || rc=$?
  wait "$srv" || rc=$((rc ? rc : 1))
  cat "$tmp/cli.log"
  if [ "$rc" -ne 0 ]; then echo "suite: ibv_rc_pingpong over rxe0 failed; server said:"; cat "$tmp/srv.log"; fi
  return "$rc"
}
if ! want smoke; then
  :
elif ibv_devices 2>/dev/null | grep -qw rxe0; then
  stage "verbs smoke test (ibv_rc_pingpong over rxe0)" 60 verbs_smoke
elif [ "$transport" = rdma ]; then
  echo "suite: no rxe0 verbs device here (ibv_devices: $(ibv_devices 2>&1 | tr '\n' ' '))"
  results+=("FAIL  verbs device rxe0 missing")
  failed=1
else
  echo "suite: no rxe0: verbs smoke test skipped (transport $transport does not need it)"
fi

# --verbose gives one line per test with its time (the time budget is what this suite is
# about), and one per test the filter left out, which only hides the rest: dropped.
# shellcheck disable=SC2317  # called through stage
run_tc() { # filter [more test_collectives options]
  local filter=$1
  shift
  { timeout -k 10 "$stage_timeout" "$tc" --filter "$filter" --verbose "$@" 2>&1; echo $? > "$tmp/rc"; } |
    grep -v -e ': Test is disabled$' -e '^\[====\] Running [0-9]* tests\{0,1\} from' || true
  return "$(cat "$tmp/rc")"
}
# The filter leaves out the tests named for 5 ranks and more (and RING_VM_SKIP_TESTS);
# RING_TEST_MAX_RANKS skips any other test that would start more than 4.
want collectives && stage "collectives, N <= 4 (test_collectives --filter 'collectives/!($skip_tests)')" "$stage_timeout" \
  run_tc "collectives/!($skip_tests)"
# Alone, after the rest, and one test at a time (--jobs 1; Criterion ran the three side by
# side, two jobs of up to 4 ranks on the guest's 2 vCPUs): the time bound must not be measured
# against other tests' load.
want faults && stage "faults: a rank SIGKILLed mid-collective (test_collectives --filter 'faults/*' --jobs 1)" "$stage_timeout" \
  run_tc 'faults/*' --jobs 1

# A rank that stops in the middle of the verbs handshake (tests/rdma/stall_rtr.c, preloaded,
# parks it in its first move of a queue pair to RTR, after it took its peer's OFFER or ACK and
# before it answers): the other ranks must fail ring_comm_init with a timeout that names the
# handshake, and ring_comm_destroy must give back what the half-done handshakes hold (queue
# pairs, registrations, memory: LeakSanitizer sees it in the ASan pass; a survivor that exits
# non-zero fails the stage). N = 3, so that a survivor can have one connection on verbs and
# one cut short. Unlike the Criterion tests, the ranks are started here.
# shellcheck disable=SC2317  # called through stage
handshake_cut() {
  local d=$tmp/hs n=3 victim=1 port r vpid rc=0 pids=() cut=0 line
  local w=$build/tests/mp_worker shim=$tmp/hs/stall_rtr.so secret
  mkdir -p "$d"
  cc -shared -fPIC -O1 -o "$shim" "$here/stall_rtr.c" -ldl ||
    { echo "suite: cannot build the LD_PRELOAD shim (cc and libibverbs-dev are needed)"; return 1; }
  port=$((20000 + RANDOM % 10000))
  secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  rank_env() { # rank
    echo RING_RANK="$1" RING_NRANKS="$n" RING_ROOT="127.0.0.1:$port" RING_SECRET="$secret" \
      RING_TRANSPORT="$transport" RING_TEST_OUTDIR="$d"
  }
  for ((r = 0; r < n; r++)); do
    if [ "$r" -eq "$victim" ]; then
      # shellcheck disable=SC2046  # rank_env's words are NAME=value pairs without blanks
      env $(rank_env "$r") RING_TIMEOUT_MS=600000 LD_PRELOAD="$shim" STALL_MARK="$d/stalled" \
        ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}verify_asan_link_order=0" \
        timeout -k 5 300 "$w" initfail > "$d/log.$r" 2>&1 &
      vpid=$!
    else
      # shellcheck disable=SC2046
      env $(rank_env "$r") RING_TIMEOUT_MS=8000 timeout -k 5 120 "$w" initfail > "$d/log.$r" 2>&1 &
      pids+=($!)
    fi
  done
  for ((r = 0; r < ${#pids[@]}; r++)); do
    wait "${pids[$r]}" || { echo "suite: survivor ${pids[$r]} exited $?"; rc=1; }
  done
  kill "$vpid" 2>/dev/null || true
  wait "$vpid" 2>/dev/null || true
  [ -e "$d/stalled" ] || { echo "suite: rank $victim never reached RTR (the shim did not stall it)"; rc=1; }
  for ((r = 0; r < n; r++)); do
    [ "$r" -eq "$victim" ] && continue
    line=$(cat "$d/err.$r" 2>/dev/null || echo "(no err.$r: init did not fail as it had to)")
    echo "suite: rank $r: $line"
    case $line in *"timed out"*) ;; *) rc=1 ;; esac
    case $line in *"verbs handshake"*) cut=1 ;; esac
  done
  [ "$cut" = 1 ] || { echo "suite: no survivor was cut off in the middle of a verbs handshake"; rc=1; }
  # The victim's status is not looked at (it is killed): a sanitizer report it made before it
  # parked must not go unseen.
  if grep -q -e '^==[0-9]*==ERROR: ' -e 'runtime error: ' "$d/log.$victim"; then
    echo "suite: rank $victim (the one that stalled) had a sanitizer report"
    rc=1
  fi
  if [ "$rc" -ne 0 ]; then
    for ((r = 0; r < n; r++)); do echo "suite: ---- rank $r's output:"; tail -n 40 "$d/log.$r"; done
  fi
  return "$rc"
}
if [ "$transport" = rdma ] && want handshake; then
  stage "verbs handshake cut short: a rank stalls in it, the others time out and clean up" "$stage_timeout" \
    handshake_cut
fi

# What the Criterion suite does not reach: RING_TRANSPORT=auto choosing verbs between "hosts"
# (RING_HOST_ID) and shared memory inside one, in one ring; and ring_comm_register'd buffers,
# which verbs read in place instead of copying. ring_perf checks every result (-c 1) and
# exits non-zero on a wrong one; the log must show the edges and the in-place reads.
# shellcheck disable=SC2317  # called through stage
mixed_and_registered() {
  local rr=$build/tools/ringrun rp=$build/perf/ring_perf wrap=$tmp/hosts.sh
  printf '#!/bin/sh\nexport RING_HOST_ID=h$((RING_RANK / 2))\nexec "$@"\n' > "$wrap"
  chmod +x "$wrap"
  RING_TRANSPORT=auto RING_DEBUG=INFO RING_DEBUG_SUBSYS=INIT RING_DEBUG_FILE=$tmp/auto.%p \
    timeout 300 "$rr" -n 4 "$wrap" "$rp" -b 64K -e 1M -f 4 -n 2 -w 1 -c 1 --no-probe || return 1
  grep -h "ring ready" "$tmp"/auto.* | sed 's/^.*INIT //'
  grep -q "over rdma" "$tmp"/auto.* && grep -q "over shm" "$tmp"/auto.* ||
    { echo "suite: auto did not put verbs between hosts and shared memory inside them"; return 1; }
  # RING_IB_GID_INDEX naming an unused table entry: a clear error at init, not queue pairs that
  # fail at RTR with an address error.
  if RING_TRANSPORT=rdma RING_IB_GID_INDEX=100 timeout 120 "$rr" -n 2 "$rp" -b 4 -e 4 -n 1 -w 0 -c 1 --no-probe \
      > "$tmp/gid.log" 2>&1; then
    echo "suite: RING_IB_GID_INDEX=100 (an unused entry) was accepted"; return 1
  fi
  grep -m 1 -o 'RING_IB_GID_INDEX=100[^"]*' "$tmp/gid.log" ||
    { echo "suite: RING_IB_GID_INDEX=100 failed without naming the variable:"; tail -n 20 "$tmp/gid.log"; return 1; }
  # The same under auto between hosts: an index that names nothing is the user's mistake there
  # too, not a reason to fall back to TCP without a word (it did until 2026-11-29).
  if RING_TRANSPORT=auto RING_IB_GID_INDEX=100 timeout 120 "$rr" -n 4 "$wrap" "$rp" -b 4 -e 4 -n 1 -w 0 -c 1 \
      --no-probe > "$tmp/gid-auto.log" 2>&1; then
    echo "suite: RING_IB_GID_INDEX=100 (an unused entry) was accepted with RING_TRANSPORT=auto"; return 1
  fi
  grep -m 1 -o 'RING_IB_GID_INDEX=100[^"]*' "$tmp/gid-auto.log" ||
    { echo "suite: auto, RING_IB_GID_INDEX=100 failed without naming the variable:"; tail -n 20 "$tmp/gid-auto.log"; return 1; }
  # Ends whose GIDs cannot reach each other, refused in the verbs handshake on both ranks with
  # both entries named, instead of failing at RTR with EINVAL (IPv6 facing IPv4) or, on a real
  # HCA, reaching RTS and timing out (v1 facing v2). "family": rank 0 on GID index 0 (fe80::,
  # v2), rank 1 on index 1 (IPv4, v2). "version": rank 1 sees its entries as RoCE v1
  # (gid_as_v1.so; its packets stay v2, so without the check the job would run). Forced verbs
  # must fail on both ranks; auto between two "hosts" must leave the pair on TCP and run.
  local gw=$tmp/gid.sh kind want_txt
  cc -shared -fPIC -O1 -o "$tmp/gid_as_v1.so" "$here/gid_as_v1.c" -ldl ||
    { echo "suite: cannot build the LD_PRELOAD shim (cc and libibverbs-dev are needed)"; return 1; }
  cat > "$gw" <<WRAP
#!/bin/sh
export RING_HOST_ID=h\$RING_RANK
case \$GID_CASE in
family) export RING_IB_GID_INDEX=\$RING_RANK ;;
version) [ "\$RING_RANK" != 1 ] || export LD_PRELOAD=$tmp/gid_as_v1.so ASAN_OPTIONS="\${ASAN_OPTIONS:+\$ASAN_OPTIONS:}verify_asan_link_order=0" ;;
esac
exec "\$@"
WRAP
  chmod +x "$gw"
  # refused LOG TEXT [VAR=value...]: a 2-rank job on forced verbs whose init must fail on both
  # ranks, each naming TEXT.
  refused() {
    local log=$tmp/$1 text=$2
    shift 2
    if env "$@" RING_TRANSPORT=rdma RING_TIMEOUT_MS=30000 timeout 120 "$rr" -n 2 "$gw" "$rp" -b 4 -e 4 -n 1 -w 0 -c 1 \
        --no-probe > "$log" 2>&1; then
      echo "suite: $* ran on verbs"; return 1
    fi
    [ "$(grep -F 'ring_perf: ring_comm_init' "$log" | grep -c -F "$text")" -eq 2 ] ||
      { echo "suite: $*: not every rank failed naming $text:"; tail -n 20 "$log"; return 1; }
    grep -m 1 -F "[0] ring_perf: ring_comm_init" "$log"
  }
  # on_index0 LOG WHY [VAR=value...]: a 2-rank job on forced verbs that must run, checked, with
  # both ranks on GID index 0 (fe80::, v2) for the reason WHY and verbs both ways.
  on_index0() {
    local log=$tmp/$1 why=$2
    shift 2
    env "$@" RING_TRANSPORT=rdma RING_DEBUG=INFO RING_DEBUG_SUBSYS=INIT,NET RING_DEBUG_FILE="$log.%p" timeout 120 \
      "$rr" -n 2 "$rp" -b 4 -e 256K -f 8 -n 1 -w 0 -c 1 --no-probe > "$log" 2>&1 ||
      { echo "suite: $* did not run:"; tail -n 20 "$log"; return 1; }
    [ "$(cat "$log".[0-9]* | grep -c "GID index 0: RoCE v2, IPv6 link-local .*($why)")" -eq 2 ] &&
      [ "$(cat "$log".[0-9]* | grep -c 'over rxe0')" -eq 4 ] ||
      { echo "suite: $*: not every rank on GID index 0 with verbs both ways:"; grep -h rdma "$log".[0-9]* | tail -n 10;
        return 1; }
    grep -h -m 1 -o "GID index 0: .*($why)" "$log".[0-9]* | head -n 1
  }
  for kind in family version; do
    case $kind in
      family) want_txt='GID index 1 (RoCE v2, IPv4 198.18.0.1)' ;;
      version) want_txt='(RoCE v1, IPv4 198.18.0.1)' ;;
    esac
    refused "gid-$kind.log" "$want_txt" "GID_CASE=$kind" || return 1
    [ "$(grep -F 'ring_perf: ring_comm_init' "$tmp/gid-$kind.log" | grep -F "$want_txt" | grep -c 'RING_IB_ADDR_FAMILY)')" -eq 2 ] ||
      { echo "suite: $kind: the refusal does not say what to set on every rank"; return 1; }
    GID_CASE=$kind RING_TRANSPORT=auto RING_DEBUG=INFO RING_DEBUG_SUBSYS=NET RING_DEBUG_FILE=$tmp/gid-auto-$kind.%p \
      timeout 120 "$rr" -n 2 "$gw" "$rp" -b 4 -e 64K -f 16 -n 1 -w 0 -c 1 --no-probe > "$tmp/gid-auto-$kind.log" 2>&1 ||
      { echo "suite: $kind: auto did not run over TCP:"; tail -n 20 "$tmp/gid-auto-$kind.log"; return 1; }
    [ "$(cat "$tmp"/gid-auto-"$kind".[0-9]* | grep 'stays on TCP' | grep -c -F "$want_txt")" -eq 4 ] ||
      { echo "suite: $kind: auto did not keep both directions of both ranks on TCP naming the GIDs:";
        cat "$tmp"/gid-auto-"$kind".[0-9]* | grep -e 'rdma' | tail -n 10; return 1; }
  done
  # The kind asked for instead of an index: RING_IB_ADDR_FAMILY=AF_INET6 and
  # RING_IB_ADDR_RANGE=fe80::/10 take the link-local v2 entry (index 0, where the default is the
  # IPv4 one) on every rank, and verbs run over it; RING_IB_ROCE_VERSION=1 and
  # RING_IB_ADDR_RANGE=10.0.0.0/8, which no GID of rxe0 matches, fail forced verbs naming the
  # variable, and under auto between two "hosts" the first leaves TCP with a warning.
  on_index0 fam6.log 'RING_IB_ADDR_FAMILY=AF_INET6' RING_IB_ADDR_FAMILY=AF_INET6 || return 1
  on_index0 range.log 'RING_IB_ADDR_RANGE=fe80::/10' RING_IB_ADDR_RANGE=fe80::/10 || return 1
  refused v1.log 'of the kind asked for: RING_IB_ROCE_VERSION=1' RING_IB_ROCE_VERSION=1 || return 1
  refused range-none.log 'of the kind asked for: RING_IB_ADDR_RANGE=10.0.0.0/8' RING_IB_ADDR_RANGE=10.0.0.0/8 || return 1
  RING_IB_ROCE_VERSION=1 RING_TRANSPORT=auto RING_DEBUG=WARN timeout 120 "$rr" -n 2 "$gw" "$rp" -b 4 -e 64K -f 16 -n 1 \
    -w 0 -c 1 --no-probe > "$tmp/v1-auto.log" 2>&1 ||
    { echo "suite: RING_IB_ROCE_VERSION=1 under auto did not run over TCP:"; tail -n 20 "$tmp/v1-auto.log"; return 1; }
  [ "$(grep -c 'WARN.*rdma: not used (.*RING_IB_ROCE_VERSION=1); TCP between hosts' "$tmp/v1-auto.log")" -eq 2 ] ||
    { echo "suite: RING_IB_ROCE_VERSION=1 under auto: no warning on every rank:"; tail -n 10 "$tmp/v1-auto.log"; return 1; }
  local c
  for c in allgather allreduce; do
    RING_TRANSPORT=$transport RING_DEBUG=INFO RING_DEBUG_SUBSYS=NET RING_DEBUG_FILE=$tmp/reg-$c.%p \
      timeout 300 "$rr" -n 3 "$rp" -C "$c" -R 1 -b 96K -e 1536K -f 4 -n 2 -w 1 -c 1 --no-probe || return 1
    if [ "$transport" = rdma ]; then
      grep -h "read straight" "$tmp"/reg-$c.* | sed 's/^.*NET //'
      grep -q "[1-9][0-9]* message(s) read straight" "$tmp"/reg-$c.* ||
        { echo "suite: no message of the registered $c was read in place"; return 1; }
    fi
  done
}
if [ "$transport" = rdma ] && want mixed; then
  stage "auto between fake hosts (shm + verbs in one ring); registered buffers read in place" "$stage_timeout" \
    mixed_and_registered
fi

# Several queue pairs per connection (RING_IB_QPS_PER_PEER, 1 elsewhere in this suite): slot k
# goes on queue pair k mod n, writes may overtake each other across them, and the receiver
# must still take the slots in order. ring_perf checks every result (-c 1). The device comes
# from a list whose entries name their own ports (the last entry's port used to apply to all).
# shellcheck disable=SC2317  # called through stage
multi_qp() {
  RING_TRANSPORT=rdma RING_IB_HCA=rxe0:1,mlx5_0:2 RING_IB_QPS_PER_PEER=3 RING_IB_TIMEOUT=16 RING_IB_RETRY_CNT=5 \
    RING_IB_TC=106 RING_IB_SL=3 RING_DEBUG=INFO RING_DEBUG_SUBSYS=NET RING_DEBUG_FILE=$tmp/qp.%p \
    timeout 300 "$build/tools/ringrun" -n 3 "$build/perf/ring_perf" -b 4 -e 2M -f 8 -n 2 -w 1 -c 1 --no-probe \
    > "$tmp/qp-perf.log" 2>&1 || { tail -n 40 "$tmp/qp-perf.log"; return 1; }
  grep -h "Out of bounds" "$tmp/qp-perf.log"
  grep -h "sending to rank" "$tmp"/qp.* | sed 's/^.*NET //'
  grep -q "(3 QP(s)," "$tmp"/qp.* || { echo "suite: the connections did not get 3 queue pairs"; return 1; }
  # ibv_query_qp's answer, so this is what the device runs with
  grep -q "ACK timeout 16 = 268.4 ms, 5 retries" "$tmp"/qp.* ||
    { echo "suite: RING_IB_TIMEOUT=16 RING_IB_RETRY_CNT=5 did not reach the queue pairs"; return 1; }
  # rxe keeps the traffic class but holds no service level (its queue pairs report SL 0): each
  # rank must say so once, at WARN, rather than leave a QoS setting silently unapplied.
  local conns tagged said
  conns=$(cat "$tmp"/qp.* | grep -c "over rxe0 (") tagged=$(cat "$tmp"/qp.* | grep -c "over rxe0 (.*, traffic class 106)")
  [ "$conns" -gt 0 ] && [ "$tagged" -eq "$conns" ] ||
    { echo "suite: RING_IB_TC=106 reached $tagged of $conns connections' queue pairs"; return 1; }
  said=$(cat "$tmp"/qp.* | grep -c "WARN .*rxe0's queue pairs report SL 0, traffic class 106, where RING_IB_SL=3 and RING_IB_TC=106 asked for")
  [ "$said" -eq 3 ] || { echo "suite: RING_IB_SL=3 that rxe0 does not keep was said $said times by 3 ranks"; return 1; }
  grep -h -m 1 "WARN .*queue pairs report SL" "$tmp"/qp.* | head -n 1 | sed 's/^.*NET //'
}
if [ "$transport" = rdma ] && want qps; then
  stage "3 queue pairs per peer (RING_IB_QPS_PER_PEER=3, RING_IB_TIMEOUT=16, RING_IB_RETRY_CNT=5, RING_IB_TC=106, RING_IB_SL=3, RING_IB_HCA=rxe0:1,mlx5_0:2), N = 3, checked all-reduce 4 B - 2 MiB" "$stage_timeout" \
    multi_qp
fi

# A full send queue at the receiver (src/transport/rdma.c send_credit): hardware seldom fills
# it, so a test knob shortens it to one entry. Every credit then waits for the previous one
# (or a read) to be acknowledged, and it must still go out before the receive that freed the
# slot is done: a credit left for later stalled a sender whose message was read from its
# registered buffer until the receiver's next call.
# shellcheck disable=SC2317  # called through stage
credits_once() { # n try
  local n=$1 t=$2
  rm -f "$tmp"/cr$n.*
  # RING_TIMEOUT_MS well under the 300 s bound: a stall ends in the library's own error,
  # which names what the rank waited for.
  RING_TRANSPORT=rdma RING_TEST_IB_RECV_SQ=1 RING_TIMEOUT_MS=60000 RING_DEBUG=INFO RING_DEBUG_SUBSYS=NET \
    RING_DEBUG_FILE=$tmp/cr$n.%p timeout 300 "$build/tools/ringrun" -n $n "$build/perf/ring_perf" -R 1 -b 4 -e 1536K \
    -f 8 -n 3 -w 1 -c 1 --no-probe > "$tmp/cr$n-perf.$t.log" 2>&1 && return 0
  tail -n 40 "$tmp/cr$n-perf.$t.log"
  grep -h "WARN\|ERR" "$tmp"/cr$n.* | tail -n 20
  return 1
}
credits() {
  local n
  for n in 2 3; do
    # One retry: the stage stalls now and then in full-suite runs (1 in about 4 since
    # 2026-11-28, never when run alone; open, docs/rdma.md). A second failure fails the stage,
    # and the first is printed in full above.
    if ! credits_once $n 1; then
      echo "suite: credits N = $n failed (above); retrying once: a known intermittent stall, docs/rdma.md"
      credits_once $n 2 || return 1
      grep -h "Out of bounds" "$tmp/cr$n-perf.2.log"
    else
      grep -h "Out of bounds" "$tmp/cr$n-perf.1.log"
    fi
    grep -h "credit(s) waited" "$tmp"/cr$n.* | sed 's/^.*NET //' | head -n 2
    grep -q "[1-9][0-9]* credit(s) waited" "$tmp"/cr$n.* ||
      { echo "suite: N = $n: no credit waited for a send queue entry (RING_TEST_IB_RECV_SQ=1 had no effect?)"; return 1; }
  done
}
if [ "$transport" = rdma ] && want credits; then
  stage "credits through a 1-entry receiver send queue (RING_TEST_IB_RECV_SQ=1), N = 2, 3, registered buffers, checked 4 B - 1.5 MiB" \
    "$stage_timeout" credits
fi

# Device buffers over verbs (src/cuda/gdr.c). The GPU is emulated (cuda_coll_check --emulate):
# its "device" memory is host memory, which ibv_reg_mr registers, so everything GPUDirect RDMA
# does on the wire runs for real: sends from registered device slots by the read-in-place path,
# receives that the HCA reads straight into device slots, the descriptor hint that tells a
# receiver it may, and ranks with host buffers mixed in. Only ibv_reg_dmabuf_mr itself needs a
# GPU and a NIC (rxe has no dma-buf support). Each run checks every result and the counts of
# messages that went each way (--expect-gdr / --expect-no-gdr).
# shellcheck disable=SC2317  # called through stage
gdr() {
  local cc=$build/perf/cuda/cuda_coll_check rr=$build/tools/ringrun
  if [ ! -x "$cc" ]; then
    echo "suite: no $cc (a build without CUDA): nothing to run"
    return 0
  fi
  RING_TRANSPORT=rdma RING_CHUNK_BYTES=64K RING_PIPELINE_DEPTH=3 RING_DEBUG=INFO RING_DEBUG_SUBSYS=COLL \
    RING_DEBUG_FILE=$tmp/gdr.%p timeout 600 "$rr" -n 3 "$cc" --emulate --quick --expect-gdr || return 1
  grep -h "GPUDirect RDMA on" "$tmp"/gdr.* | sed 's/^.*COLL //' | head -n 1
  RING_TRANSPORT=rdma RING_CHUNK_BYTES=64K RING_PIPELINE_DEPTH=2 \
    timeout 600 "$rr" -n 4 "$cc" --emulate --quick --mixed --expect-gdr || return 1
  RING_TRANSPORT=rdma RING_IB_GDR=0 RING_CHUNK_BYTES=64K \
    timeout 600 "$rr" -n 2 "$cc" --emulate --quick --expect-no-gdr || return 1
}
if [ "$transport" = rdma ] && want gdr; then
  stage "device buffers over verbs: GPUDirect RDMA (N = 3), mixed with host ranks (N = 4), staged (N = 2)" \
    "$stage_timeout" gdr
fi

# A rank that joins and then never calls (mp_worker silent) while its peer runs a 16 MiB
# all-reduce with an 8 s timeout: the peer's timeout must say what its connections saw, that the
# silent rank takes nothing (its slots stay written: verbs to rank 1) and sends nothing (verbs
# from rank 1), not only whom it waited for (the transports' diag op, src/transport/msgq.c).
# shellcheck disable=SC2317  # called through stage
silent_peer() {
  local d=$tmp/silent w=$build/tests/mp_worker port secret spid line rc=0 tp
  case $transport in rdma) tp=verbs ;; shm) tp="shared memory" ;; *) tp=TCP ;; esac
  mkdir -p "$d"
  port=$((20000 + RANDOM % 10000))
  secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
  local job=(RING_NRANKS=2 RING_ROOT="127.0.0.1:$port" RING_SECRET="$secret" RING_TRANSPORT="$transport" RING_TEST_OUTDIR="$d")
  env "${job[@]}" RING_RANK=1 RING_TIMEOUT_MS=60000 timeout -k 5 300 "$w" silent > "$d/log.1" 2>&1 &
  spid=$!
  env "${job[@]}" RING_RANK=0 RING_TIMEOUT_MS=8000 RING_TEST_COUNT=4194304 timeout -k 5 120 "$w" mismatch \
    > "$d/log.0" 2>&1 || { echo "suite: rank 0 exited $?"; rc=1; }
  kill "$spid" 2>/dev/null || true
  wait "$spid" 2>/dev/null || true
  line=$(cat "$d/err.0" 2>/dev/null || echo "(no err.0)")
  echo "suite: rank 0: $line"
  case $line in RING_ERR_TIMEOUT*) ;; *) echo "suite: rank 0 did not time out"; rc=1 ;; esac
  case $line in
    *"$tp to rank 1: "*"slots hold pieces rank 1 has not taken: that rank does not read"*) ;;
    *) echo "suite: rank 0's timeout does not say that rank 1 left its $tp slots full"; rc=1 ;;
  esac
  case $line in
    *"$tp from rank 1: "*"rank 1 sent nothing"*) ;;
    *) echo "suite: rank 0's timeout does not say that nothing came from rank 1"; rc=1 ;;
  esac
  if [ "$rc" -ne 0 ]; then
    for r in 0 1; do echo "suite: ---- rank $r's output:"; tail -n 20 "$d/log.$r"; done
  fi
  return "$rc"
}
if [ "$transport" = rdma ] && want silent; then
  stage "a silent peer: the timeout says rank 1 takes nothing from the verbs slots and sends nothing (N = 2, 16 MiB)" \
    "$stage_timeout" silent_peer
fi

if [ ${#why_failed[@]} -gt 0 ]; then
  echo "suite: ---- why the failed stages failed (from their output above)"
  printf '%s\n' "${why_failed[@]}" | sed 's/^/suite: | /'
fi
echo "suite: ---- summary (transport $transport)"
printf 'suite:   %s\n' "${results[@]}"
echo "suite: total $(( $(date +%s) - t_start )) s: $([ $failed = 0 ] && echo PASSED || echo FAILED)"
exit $failed
