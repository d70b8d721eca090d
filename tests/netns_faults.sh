#!/usr/bin/env bash
# netns-bed test of network faults: what ringcomm does when the links between hosts lose,
# reorder, duplicate or corrupt packets, or when one host's link goes down for good. 4 hosts of
# the bed of perf/netns/lib.sh (one rank each, TCP, links shaped to 1 Gbit/s), ring_perf as the
# program. Stages:
#
#  lossy      every link, both ways: netem delay 200us 100us, loss 2%, duplicate 1%, reorder 5%
#             (netem replaces tbf on the links). Where the kernel has no netem but nft(8) is
#             installed, loss 2% only (nftables netdev ingress drops, tbf stays): a kernel
#             built without netem (some VMs) still gets the lossy check. Checked all-reduces
#             4 B .. 4 MiB (recursive doubling, recursive halving and the ring), then
#             reduce-scatter, all-gather and broadcast: every rank exits 0 and rank 0 reports 0
#             wrong elements. TCP repairs all of this, so any failure is the library's (partial
#             reads and writes, stalls of a few RTOs, a peer that is late).
#  corrupt    (netem only) netem corrupt 1%: one flipped bit per corrupted packet, which the IP
#             and TCP checksums always catch (a one-bit error changes a ones'-complement sum),
#             so the results must be right too.
#  partition  while the ranks loop over one collective, one host's link goes down and stays
#             down; RING_TIMEOUT_MS=4000. Every rank must exit on its own with status 2
#             (ring_perf: a call failed) and the library's error on stderr, naming the
#             operation (#N) and a peer with its address, within 4 s + 4 s + 3 s of the cut
#             (below); none may hang, crash or exit 0.
#             Three cuts: host 3 at the switch port in a 1 MiB all-reduce (the ring), host 0
#             (the root: no rank can relay a failure to the others) at its own interface in a
#             4-byte all-reduce (recursive doubling), host 2 at the switch port in a 256 KiB
#             all-gather; and host 0 again with rank 3 on RING_TIMEOUT_MS=20000, so that its
#             partners' sockets close (they time out) before it does: it waits the library's
#             4 s cause grace for a reason that cannot come without the root, and must fail
#             then. Every rank's error is printed, with how many of them name the host that
#             was cut off (reported, not asserted: see partition()).
#  flap       host 1's link goes down for 1 s in the middle of a checked 1 MiB all-reduce run
#             (RING_TIMEOUT_MS=20000, far above the stall): TCP retransmits once it is back,
#             and every rank must exit 0 with 0 wrong elements. How long after the link's
#             return data moved again is printed. Then for 20 s (RING_TIMEOUT_MS=60000, on
#             CUBIC, see below): the kernel must not give the connections up either. While
#             the link is back, the sockets holding bytes are sampled with ss every second,
#             and a flap that fails prints the last sample (which connection stalled, how).
#
# Skips (exit 77) with the reason where the bed cannot run (not root, no ip netns, veth, bridge
# or tbf). Without netem and nft the lossy and corrupt stages are skipped, saying so, and the
# partition stage still runs.
#
#   tests/netns_faults.sh [BED_SH RING_PERF]   (default: $RING_TEST_NETNS_BED, $RING_TEST_RING_PERF)
#   RING_TEST_FAULTS_ONLY=REGEX: only the checks whose names match ("lossy" or "corrupt", which
#   run together, "partition NAME", "flap NAME", as printed), to repeat one while chasing a failure.
#
# The margin of the partition bound: the no-progress clock starts at the last byte a rank moved,
# which is at the cut (the ranks move data all the time; bytes already in socket buffers drain
# within milliseconds), the engine's poll wakes at the deadline, a failure goes round the star
# in milliseconds (200 ms at most per notice it cannot deliver), and bed_run sees an exit within
# its 0.25 s poll: about T + 0.5 s is expected (measured on a 2-core VM: 3.9-4.8 s after the cut
# with T = 4 s, in 47 of 48 cuts). One more wait is the library's design: a rank whose neighbour
# gave up first sees that neighbour's sockets close (a reset) before its own timeout, and waits
# up to the 4 s cause grace (comm.c CAUSE_GRACE_PEER_NS, docs/reliability.md) for the star to
# say why; when the root is the host cut off, no cause can come and the whole grace passes
# (the 48th cut, host 0's: 8.2 s, "Connection reset by peer"; the text now adds that no cause
# came from rank 0, which may be unreachable, and the slow-rank case checks it). So the bound is
# T + 4 s + 3 s of slack, and a rank past T + 3 s is pointed out.
set -uo pipefail

bed=${1:-${RING_TEST_NETNS_BED:-}}
ring_perf=${2:-${RING_TEST_RING_PERF:-}}
[[ -n $bed && -n $ring_perf ]] || { echo "netns_faults: usage: $0 BED_SH RING_PERF" >&2; exit 2; }
lib=$(dirname "$bed")/lib.sh
[[ -r $lib ]] || { echo "netns_faults: $lib not found" >&2; exit 2; }
[[ -x $ring_perf ]] || { echo "netns_faults: $ring_perf not found or not executable" >&2; exit 2; }

N=4
TIMEOUT_MS=4000           # RING_TIMEOUT_MS of the partition stage
MARGIN_MS=3000            # see the header
GRACE_MS=4000             # the library's cause grace for a closed connection (see the header)
LOSSY_TIMEOUT_MS=20000    # lossy stages: a stall ends in the library's own error, not a kill
# The flap: TCP retransmits with a doubling timeout (200 ms at least), so after a 1 s outage
# data moves again only at a connection's next retransmission, seconds later under load (CI,
# 2026-11-29: no byte within 3 s of the link's return, and every rank timed out at 4 s).
# What the stage tests is that the run then ends right, so its timeout is far from the stall.
# Since 2026-12-06 the library caps that doubling at 1 s (RING_TCP_RTO_MAX_MS, Linux 6.15+):
# before, a window update lost in the outage once left a sender probing on a timer past 20 s
# (docs/reliability.md).
FLAP_TIMEOUT_MS=20000

skip() { echo "SKIP: netns-faults: $*"; exit 77; }

[[ $(id -u) -eq 0 ]] || skip "not root (network namespaces need root)"
command -v ip >/dev/null || skip "ip (iproute2) not installed"
command -v tc >/dev/null || skip "tc (iproute2) not installed"
ip netns list >/dev/null 2>&1 || skip "'ip netns' is not available"

# shellcheck source-path=SCRIPTDIR source=../perf/netns/lib.sh
source "$lib"

probe=""
cleanup() {
    [[ -n $probe ]] && ip netns del "$probe" 2>/dev/null
    probe=""
    bed_down
}
trap 'rc=$?; trap - EXIT INT TERM; cleanup; exit "$rc"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Probe what the stages need in a throw-away namespace, as netns_smoke.sh does: a container
# without the privileges or a kernel without the modules is a skip, not a failure.
probe=rcbfprobe$$
ip netns add "$probe" 2>/dev/null || skip "cannot create a network namespace (ip netns add failed)"
ip -n "$probe" link add pa type veth peer name pb 2>/dev/null || skip "no veth support"
ip -n "$probe" link add pbr type bridge 2>/dev/null || skip "no bridge support"
tc -n "$probe" qdisc replace dev pa root tbf rate 1gbit burst 256kb latency 10ms 2>/dev/null || skip "no tbf qdisc"
impair=""
if tc -n "$probe" qdisc replace dev pb root netem delay 200us 100us loss 2% duplicate 1% reorder 5% corrupt 1% 2>/dev/null; then
    impair=netem
elif command -v nft >/dev/null &&
    ip netns exec "$probe" nft -f - 2>/dev/null <<'NFT'
table netdev rcfprobe {
    chain c { type filter hook ingress device "pb" priority 0; meta protocol ip numgen random mod 1000 < 20 counter drop; }
}
NFT
then
    impair=nft
fi
ip netns del "$probe"
probe=""

# The default prefix rcb<pid>-: a later bed removes this one if a SIGKILL left it behind.
bed_init "" || skip "bed_init failed"
bed_up "$N" 1gbit || { echo "FAIL: netns-faults: cannot create the bed" >&2; exit 1; }
br=$(bed_ns_bridge)
echo "# netns-faults: $(bed_describe)"
echo "# netns-faults: link impairment: ${impair:-none (no netem qdisc in this kernel, no nft)}"

fails=0 passes=0 skips=0
fail() { echo "FAIL: netns-faults: $*" >&2; fails=$((fails + 1)); }
pass() { echo "ok: netns-faults: $*"; passes=$((passes + 1)); }
stage_skip() { echo "SKIP: netns-faults: $*"; skips=$((skips + 1)); }
ms_since() { echo $((($1 - $2) / 1000)); }
want() { [[ -z ${RING_TEST_FAULTS_ONLY:-} || $1 =~ $RING_TEST_FAULTS_ONLY ]]; }

# Every rank's stderr, indented (the messages are the point of the partition stage).
show_errs() {
    local out=$1 i
    for ((i = 0; i < BED_N; i++)); do
        echo "#   rank $i (status ${BED_STATUS[i]:-?}): $(tr '\n' ' ' <"$out/rank$i.err" | cut -c1-900)"
    done
}

# --- impairments -------------------------------------------------------------------------
# Host i's egress and the switch port's egress towards it: both directions of every link.
netem_on() { # netem options...
    local i
    for ((i = 0; i < BED_N; i++)); do
        tc -n "$(bed_ns_host "$i")" qdisc replace dev "$BED_IF" root netem "$@" &&
            tc -n "$br" qdisc replace dev "p$i" root netem "$@" || return 1
    done
}
# Back to the bed's shaping (tbf root) on every link.
shape_restore() {
    local i
    for ((i = 0; i < BED_N; i++)); do
        tc -n "$(bed_ns_host "$i")" qdisc replace dev "$BED_IF" root tbf rate "$BED_RATE" burst "$BED_TBF_BURST" latency "$BED_TBF_LATENCY" &&
            tc -n "$br" qdisc replace dev "p$i" root tbf rate "$BED_RATE" burst "$BED_TBF_BURST" latency "$BED_TBF_LATENCY" || return 1
    done
}
# Packets netem dropped on every link (its qdisc counts its losses as drops).
netem_drops() {
    local i
    {
        for ((i = 0; i < BED_N; i++)); do
            tc -s -n "$(bed_ns_host "$i")" qdisc show dev "$BED_IF"
            tc -s -n "$br" qdisc show dev "p$i"
        done
    } | grep -o 'dropped [0-9]*' | awk '{ s += $2 } END { print s + 0 }'
}

# --- checked sweeps under impairment ---------------------------------------------------------
# run_checked NAME ring_perf-args...: every rank exits 0, rank 0's table has rows, 0 wrong.
port=$((BED_PORT + 1))
run_checked() {
    local name=$1 out=$BED_DIR/run$port rc=0 rows
    shift
    BED_PORT=$port port=$((port + 1)) # a fresh root port per run: nothing lingers on the last one
    RING_TIMEOUT_MS=$LOSSY_TIMEOUT_MS bed_run "$out" 60 "$ring_perf" --no-probe -c 1 "$@" || rc=$?
    rows=$(awk '$1 ~ /^[0-9]+$/ && NF >= 9 { n++ } END { print n + 0 }' "$out/rank0.out")
    if ((rc != 0)); then
        fail "$name: ranks did not all exit 0 (bed_run status $rc: ${BED_FAILED[*]}) after ${BED_ELAPSED} s"
        show_errs "$out" >&2
        cat "$out/rank0.out" >&2
    elif ((rows == 0)) || ! grep -q '^# Out of bounds values : 0 OK' "$out/rank0.out"; then
        fail "$name: $rows rows, wrong elements or no summary"
        cat "$out/rank0.out" >&2
    else
        pass "$name: $rows sizes checked, 0 wrong, all $BED_N ranks exited 0 (${BED_ELAPSED} s)"
    fi
}

sweeps() { # stage name
    run_checked "$1 allreduce" -C allreduce -b 4 -e 4M -f 4 -n 3 -w 1
    run_checked "$1 reduce_scatter" -C reduce_scatter -b 64 -e 1M -f 16 -n 3 -w 1
    run_checked "$1 allgather" -C allgather -b 64 -e 1M -f 16 -n 3 -w 1
    run_checked "$1 broadcast" -C broadcast -b 64 -e 1M -f 16 -n 3 -w 1 -r 2
}

t_stage=$SECONDS
want lossy || want corrupt || impair=skipped
case $impair in
    netem)
        netem_on delay 200us 100us loss 2% duplicate 1% reorder 5% 50% || { fail "netem on the links failed"; }
        sweeps "lossy (netem delay 200us 100us loss 2% duplicate 1% reorder 5%)"
        d=$(netem_drops)
        if ((d > 0)); then pass "lossy: netem dropped $d packets on the links"; else fail "lossy: netem dropped nothing: the stage tested nothing"; fi
        netem_on corrupt 1% || fail "netem corrupt on the links failed"
        sweeps "corrupt (netem corrupt 1%)"
        shape_restore || fail "restoring tbf on the links failed"
        ;;
    nft)
        for ((i = 0; i < BED_N; i++)); do bed_loss_on "$i" 20 || fail "nft loss on host $i's link failed"; done
        sweeps "lossy (nft ingress loss 2% both ways, no netem)"
        d=$(bed_loss_drops)
        if ((d > 0)); then pass "lossy: nft dropped $d packets on the links"; else fail "lossy: nft dropped nothing: the stage tested nothing"; fi
        bed_loss_off
        stage_skip "corrupt: needs the netem qdisc, which this kernel lacks"
        ;;
    skipped) ;;
    *)
        stage_skip "lossy: no netem qdisc in this kernel and no nft to drop packets with"
        stage_skip "corrupt: needs the netem qdisc, which this kernel lacks"
        ;;
esac
echo "# netns-faults: lossy/corrupt stages took $((SECONDS - t_stage)) s"

# --- partition -------------------------------------------------------------------------------
# Bytes every switch port has received from its host so far, one number per host.
port_rx() {
    local i paths=()
    for ((i = 0; i < BED_N; i++)); do paths+=("/sys/class/net/p$i/statistics/rx_bytes"); done
    ip netns exec "$br" cat "${paths[@]}" | tr '\n' ' '
}

# The bed_run hook: wait until every host sends at least 32 KiB per 0.25 s, twice in a row
# (init is over and the collectives run), then cut HOST's link at WHERE (port: the switch
# port, down; host: the host's own veth0, down) and write the time of the cut to FILE; with
# UP_MS, bring it back up that long after the cut (a flap).
cut_link() { # where host file [up_ms]
    local where=$1 h=$2 file=$3 up_ms=${4:-} i t ok seen=0 a b
    read -ra a <<<"$(port_rx)"
    for ((t = 0; t < 80; t++)); do
        sleep 0.25
        read -ra b <<<"$(port_rx)"
        ok=1
        for ((i = 0; i < BED_N; i++)); do ((b[i] - a[i] >= 32768)) || ok=0; done
        a=("${b[@]}")
        if ((ok)); then seen=$((seen + 1)); else seen=0; fi
        ((seen >= 2)) && break
    done
    if ((seen < 2)); then
        echo "none" >"$file"
        return 1
    fi
    link_set "$where" "$h" down
    echo "${EPOCHREALTIME/[.,]/}" >"$file"
    [[ -n $up_ms ]] || return 0
    sleep "$((up_ms / 1000)).$(printf %03d $((up_ms % 1000)))"
    link_set "$where" "$h" up
    local up_us=${EPOCHREALTIME/[.,]/}
    echo "$up_us" >"$file.up"
    # When the data moves again: the switch port has 64 KiB more from the host (ARP and a
    # lone retransmitted segment are less), sampled every 50 ms for up to 30 s.
    read -ra a <<<"$(port_rx)"
    for ((t = 0; t < 600; t++)); do
        sleep 0.05
        read -ra b <<<"$(port_rx)"
        if ((b[h] - a[h] >= 65536)); then
            echo "${EPOCHREALTIME/[.,]/}" >"$file.resumed"
            break
        fi
    done
    ss_sample "$file.ss" "$up_us"
}
# Until bed_run kills it: every second, each host's TCP sockets that hold bytes (queued to
# send or unread) with the kernel's timers and backoff, into FILE (the last sample stays; UP_US
# is when the link came back).
# A flap that does not end right is printed with it: which connection stalled, and whether
# in retransmission, a window probe ("persist") or unread in the receiver (the library).
ss_sample() { # file up_us
    local file=$1 up=$2 i
    while :; do
        {
            echo "# ss -tinmo, $(ms_since "${EPOCHREALTIME/[.,]/}" "$up") ms after the link came back (sockets holding bytes):"
            for ((i = 0; i < BED_N; i++)); do
                ip netns exec "$(bed_ns_host "$i")" ss -tinmoOH state established 2>/dev/null |
                    awk -v h="$i" '$1 > 0 || $2 > 0 { print "#   host " h ": " $0 }'
            done
        } >"$file.tmp" && mv -f "$file.tmp" "$file"
        sleep 1
    done
}
# The congestion control that the sampler's last look (FILE) saw on sockets holding bytes (ss
# prints a socket's algorithm just before its wscale).
flap_cc() { # file
    local seen
    seen=$(grep -oE ' [a-z0-9_]+ wscale:' "$1" 2>/dev/null | awk '{ print $1 }' | sort -u | tr '\n' ' ')
    seen=${seen% }
    echo "${seen:-none seen}"
}
link_set() { # where host up|down
    if [[ $1 == port ]]; then ip -n "$br" link set "p$2" "$3"; else ip -n "$(bed_ns_host "$2")" link set "$BED_IF" "$3"; fi
}

# flap NAME WHERE HOST DOWN_MS ring_perf-args...: the link goes down for DOWN_MS (less than
# RING_TIMEOUT_MS) in the middle of a checked run: TCP retransmits once it is back, and the
# run must end as if nothing happened (every rank exits 0, 0 wrong).
flap() {
    local name=$1 where=$2 h=$3 down_ms=$4 out=$BED_DIR/flap-$1 cutf=$BED_DIR/cut-flap-$1 rc=0 cut up resumed stall rows i first=""
    local cc=${FLAP_CC:-${RING_TCP_CONGESTION:-auto}}
    want "flap $name" || return 0
    shift 4
    BED_PORT=$port port=$((port + 1))
    BED_RUN_HOOK=(cut_link "$where" "$h" "$cutf" "$down_ms")
    rm -f "$cutf" "$cutf.up" "$cutf.resumed" "$cutf.ss"
    RING_TIMEOUT_MS=$FLAP_TIMEOUT_MS RING_TCP_CONGESTION=$cc bed_run "$out" 90 "$ring_perf" --no-probe -c 1 "$@" || rc=$?
    BED_RUN_HOOK=()
    link_set port "$h" up
    link_set host "$h" up
    bed_wait_links || fail "$name: the link of host $h did not come back"
    cut=$(cat "$cutf" 2>/dev/null || echo none)
    up=$(cat "$cutf.up" 2>/dev/null || echo "")
    resumed=$(cat "$cutf.resumed" 2>/dev/null || echo "")
    if [[ -n $up && -n $resumed ]]; then
        stall="data moved again $(ms_since "$resumed" "$up") ms after the link came back"
    else
        stall="data moving again after the link came back not seen"
    fi
    echo "# netns-faults: flap $name: $stall"
    rows=$(awk '$1 ~ /^[0-9]+$/ && NF >= 9 { n++ } END { print n + 0 }' "$out/rank0.out")
    for ((i = 0; i < BED_N; i++)); do
        [[ -z $first || ${BED_EXIT_US[i]:-0} -lt $first ]] && first=${BED_EXIT_US[i]:-0}
    done
    if [[ $cut == none || -z $cut ]]; then
        fail "flap $name: no traffic seen on all hosts, nothing was cut (bed_run status $rc)"
        show_errs "$out" >&2
    elif ((rc != 0)); then
        # Before the link came back too: the kernel gave a connection up (ETIMEDOUT) or the
        # library did, during an outage shorter than RING_TIMEOUT_MS.
        fail "flap $name: host $h's link down for $down_ms ms, $stall: ranks did not all exit 0 (${BED_FAILED[*]}), the first $(ms_since "$first" "$cut") ms after the cut"
        show_errs "$out" >&2
        cat "$cutf.ss" >&2 2>/dev/null
    elif ((first < cut + down_ms * 1000)); then
        fail "flap $name: a rank ended $(ms_since "$first" "$cut") ms after the cut, before the link came back: the run was too short to test the flap"
        show_errs "$out" >&2
    elif ((rows == 0)) || ! grep -q '^# Out of bounds values : 0 OK' "$out/rank0.out"; then
        fail "flap $name: $rows rows, wrong elements or no summary"
        cat "$out/rank0.out" >&2
    else
        pass "flap $name: host $h's link down for $down_ms ms ($where), cut $(ms_since "$cut" "$BED_START_US") ms after the start; $stall; all ranks exited 0 $(ms_since "$first" "$cut")+ ms after the cut, 0 wrong (RING_TIMEOUT_MS=$FLAP_TIMEOUT_MS, RING_TCP_CONGESTION=$cc, ss saw: $(flap_cc "$cutf.ss"))"
    fi
}

partition() { # name where host ring_perf-args...
    local name=$1 where=$2 h=$3 out=$BED_DIR/part-$1 cutf=$BED_DIR/cut-$1 rc=0 cut i st ms worst=0 bad=0 named=0
    want "partition $name" || return 0
    shift 3
    BED_PORT=$port port=$((port + 1))
    BED_RUN_HOOK=(cut_link "$where" "$h" "$cutf")
    # SLOW_RANK (with SLOW_MS): that rank runs with RING_TIMEOUT_MS=SLOW_MS.
    local -a cmd=("$ring_perf")
    # shellcheck disable=SC2016 # expanded by each rank's sh
    [[ -n ${SLOW_RANK:-} ]] &&
        cmd=(sh -c 'if [ "$RING_RANK" = "$1" ]; then export RING_TIMEOUT_MS="$2"; fi; shift 2; exec "$@"' sh "$SLOW_RANK" "$SLOW_MS" "$ring_perf")
    # bed_run's own limit: far past the bound, so that a hang shows as a timeout (124).
    RING_TIMEOUT_MS=$TIMEOUT_MS bed_run "$out" 40 "${cmd[@]}" --no-probe -c 1 -w 0 -n 1000000 "$@" || rc=$?
    BED_RUN_HOOK=()
    # Back up for the next case (whatever happened).
    link_set port "$h" up
    link_set host "$h" up
    bed_wait_links || fail "$name: the link of host $h did not come back"
    cut=$(cat "$cutf" 2>/dev/null || echo none)
    if [[ $cut == none || -z $cut ]]; then
        fail "$name: the collectives never ran on all hosts (no traffic seen), nothing was cut (bed_run status $rc)"
        show_errs "$out" >&2
        return
    fi
    local bound=$((TIMEOUT_MS + GRACE_MS + MARGIN_MS))
    echo "# netns-faults: partition $name: host $h's link cut ($where down) $(ms_since "$cut" "$BED_START_US") ms after the start; RING_TIMEOUT_MS=$TIMEOUT_MS, bound $bound ms"
    for ((i = 0; i < BED_N; i++)); do
        st=${BED_STATUS[i]:-?}
        ms=$(ms_since "${BED_EXIT_US[i]:-0}" "$cut")
        ((ms > worst)) && worst=$ms
        echo "#   rank $i: status $st, gone $ms ms after the cut$( ((ms > TIMEOUT_MS + MARGIN_MS)) &&
            echo " (past RING_TIMEOUT_MS + $MARGIN_MS ms: the cause grace for a closed connection?)"): $(tr '\n' ' ' <"$out/rank$i.err" | cut -c1-900)"
        if [[ $st != 2 ]]; then
            fail "$name: rank $i exited with status $st$( ((st > 128)) 2>/dev/null && echo " (signal $((st - 128)))"), not 2 (a failed call)"
            bad=1
        elif ((ms > bound)); then
            fail "$name: rank $i took $ms ms after the cut to exit (bound $bound ms)"
            bad=1
        elif ! grep -q "^ring_perf: rank $i: .* failed: .*(RING_ERR_[A-Z_]*): ." "$out/rank$i.err"; then
            fail "$name: rank $i exited 2 without the library's error on stderr"
            bad=1
        elif ! grep -Eq "#[0-9]+ .*rank [0-9]+ \($BED_SUBNET\.[0-9]+:[0-9]+[ )]" "$out/rank$i.err"; then
            # The operation and the peer (with its address) that a rank waited for, whether its
            # own or relayed: what makes a timeout actionable.
            fail "$name: rank $i's error names no operation #N or no peer with its address"
            bad=1
        elif ((i == h)) && ! grep -Eq "TCP (to|from) rank [0-9]+: .*(drops packets or is down|nothing received for [0-9]+ ms)" "$out/rank$i.err"; then
            # The cut host hears no relay: its own timeout must say what TCP saw, a path that
            # takes no packets or a peer that sent nothing (tcp_diag.h), not only whom it waited for.
            fail "$name: rank $i, the host cut off, does not say what its TCP connections saw"
            bad=1
        elif [[ $i == "${SLOW_RANK:-}" ]] && ! grep -q "rank 0 may be unreachable" "$out/rank$i.err"; then
            # Its partners timed out and closed; no cause could come without the root. The text
            # must say that, not leave a healthy partner's reset as the whole story.
            fail "$name: rank $i's error does not say that rank 0, which relays causes, may be unreachable"
            bad=1
        fi
        grep -q "rank $h ($(bed_addr "$h"):" "$out/rank$i.err" && named=$((named + 1))
    done
    ((rc == 124)) && { fail "$name: bed_run timed out (a rank hung)"; bad=1; }
    # Reported, not asserted: each rank names the peer its own wait was on, and the first
    # failure the root hears is the one relayed to all, so in a ring the text that spreads may
    # be that of a rank whose left neighbour is healthy but itself stuck (which one fires first
    # is a race of milliseconds).
    echo "#   $named of $BED_N ranks' errors name rank $h ($(bed_addr "$h")), the host cut off"
    ((bad)) || pass "partition $name: all $BED_N ranks failed on their own within $worst ms of the cut"
}

t_stage=$SECONDS
partition "ring-host3-port" port 3 -C allreduce -b 1M -e 1M
partition "rd-host0-root" host 0 -C allreduce -b 4 -e 4
partition "allgather-host2-port" port 2 -C allgather -b 256K -e 256K
# The cause grace without a root: rank 3 would time out only after 20 s, so its partners'
# exits (their sockets close at T) end its call, and with rank 0 cut off no cause can come:
# it must fail once the 4 s grace is over, not wait for its own timeout.
SLOW_RANK=3 SLOW_MS=20000 partition "rd-host0-root-rank3-slow" host 0 -C allreduce -b 4 -e 4
flap "ring-host1-port" port 1 1000 -C allreduce -b 1M -e 1M -n 300 -w 0
# A long outage, under RING_TIMEOUT_MS: the data sockets' backoff cap (RING_TCP_RTO_MAX_MS)
# also shortens the kernel's own give-up rule to 14.4 s, and without the TCP_USER_TIMEOUT that
# replaces it every rank failed with ETIMEDOUT 19 s after the cut (tcp.c, rto_set).
# On CUBIC: with BBR (this VM's default, which the bed's hosts inherit) a 20 s outage can leave
# a connection paced at what it delivered during the outage, about 11 kbit/s, for a minute and
# more (BBR's policer detection, docs/reliability.md): seen once in 16 runs here and once in
# CI, where the ranks then timed out. That is the congestion control's doing, documented; what
# this check asks of the library is that the connections survive the outage.
FLAP_CC=cubic FLAP_TIMEOUT_MS=60000 flap "ring-host1-port-20s" port 1 20000 -C allreduce -b 1M -e 1M -n 300 -w 0
echo "# netns-faults: partition stage took $((SECONDS - t_stage)) s"

bed_down
left=$(ip netns list | awk -v p="$BED_PREFIX" 'index($1, p) == 1 { print $1 }')
[[ -z $left ]] || fail "namespaces left behind: $left"

echo "# netns-faults: $passes passed, $fails failed, $skips skipped"
if ((fails)); then
    echo "FAIL: netns-faults: $fails check(s) failed" >&2
    exit 1
fi
echo "PASS: netns-faults: $passes checks over $N namespaces$( ((skips)) && echo " ($skips stage(s) skipped: see above)")"
