# shellcheck shell=bash disable=SC2034  # BED_* globals are read by the scripts that source this
# perf/netns/lib.sh: the network-namespace test bed, as functions that bed.sh and
# perf/compare/compare.sh --netns source (bash, root, iproute2).
#
# Topology, for N hosts and prefix P (e.g. "rcb1234-"):
#
#   namespace P"h0": lo, veth0 10.77.0.1/24 --+
#   namespace P"h1": lo, veth0 10.77.0.2/24 --+-- namespace P"br": bridge br0, ports p0 .. pN-1
#   ...                                       |
#   namespace P"hN-1": veth0 10.77.0.N/24 ----+
#
# Each host's veth0 egress and the bridge port's egress towards it are shaped with
#   tc qdisc replace dev DEV root tbf rate RATE burst 256kb latency 10ms
# (a full-duplex NIC of RATE). The subnet exists only inside the namespaces; nothing is
# configured in the root namespace, and IPv6 is off in the bed so that nothing but our traffic
# crosses the links.
#
# Use:
#   source perf/netns/lib.sh
#   bed_init [PREFIX]            # checks root/ip/tc, picks the prefix, removes leftovers
#   bed_up N [RATE|""] [MTU]     # creates the bed (RATE "" = unshaped)
#   bed_run OUTDIR TIMEOUT cmd.. # one rank per host with the RING_* bootstrap; 0 if all exit 0
#                                # (BED_RUN_HOOK: a command run beside the ranks, see bed_run)
#   bed_mpirun_init              # sets BED_MPIRUN (mpirun ... for the bed, run from host 0)
#   bed_down                     # kills what runs in the bed, deletes the namespaces
# Every function returns non-zero with a message on stderr on failure (set -e friendly).

BED_SUBNET=10.77.0        # /24: host i is $BED_SUBNET.$((i+1))
BED_IF=veth0              # each host's interface
BED_PORT=${BED_PORT:-29500}    # RING_ROOT port on host 0
BED_TBF_BURST=256kb
BED_TBF_LATENCY=10ms
BED_MAX_HOSTS=250
BED_STATE=/run/ringcomm-netns  # keep markers of --keep beds (see bed_purge_stale)

BED_PREFIX=""
BED_N=0
BED_RATE=""
BED_MTU=1500
BED_DIR=""               # per-run scratch directory (agent script, hostfile)
BED_SECRET=""
BED_FAILED=()            # after bed_run: "rank:status" of ranks that did not exit 0
BED_RUN_HOOK=()          # set by the caller: a command bed_run starts beside the ranks
BED_HOOK_PID=""          # the hook while it runs (bed_down ends it too)
BED_START_US=""          # after bed_run: when the ranks were started (EPOCHREALTIME, microseconds)
BED_EXIT_US=()           # after bed_run: when rank i was seen gone (microseconds; 0.25 s polls)
BED_STATUS=()            # after bed_run: rank i's exit status (128+signal when killed)
BED_MPIRUN=()

bed_err() { echo "netns bed: $*" >&2; }

bed_ns_host() { echo "${BED_PREFIX}h$1"; }
bed_ns_bridge() { echo "${BED_PREFIX}br"; }
bed_addr() { echo "$BED_SUBNET.$(($1 + 1))"; }

# The bed's own namespaces of prefix $1: $1h<i> and $1br, nothing else that starts with it (a
# short prefix would otherwise take another bed's, or anybody's, namespaces with it).
bed_list_prefix() {
    local p=$1 ns
    ip netns list 2>/dev/null | while read -r ns _; do
        [[ $ns == "$p"* && ${ns#"$p"} =~ ^(h[0-9]+|br)$ ]] && echo "$ns"
    done
    return 0
}

# Kill every process inside namespace $1 (ours: ranks, orteds) and delete it.
bed_del_ns() {
    local ns=$1 pids t
    for t in TERM TERM KILL; do
        pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
        [[ -z ${pids// /} ]] && break
        # shellcheck disable=SC2086
        kill -s "$t" $pids 2>/dev/null || true
        sleep 0.3
    done
    ip netns del "$ns" 2>/dev/null || true
}

# Remove every namespace of prefix $1 (leftovers of a crashed run, or our own at exit).
bed_purge() {
    local p=$1 ns
    [[ -n $p ]] || return 0
    for ns in $(bed_list_prefix "$p"); do bed_del_ns "$ns"; done
    rm -f "$BED_STATE/${p}keep" 2>/dev/null || true
    bed_rm_dirs "$p"
}

# Remove the scratch directories (mktemp ${TMPDIR:-/tmp}/PREFIXxxxxxx) of prefix $1: only
# those bed_init marked as a bed's, never another directory whose name happens to fit.
bed_rm_dirs() {
    local d
    for d in "${TMPDIR:-/tmp}/$1"??????; do
        [[ -d $d && -O $d && -f $d/.ringcomm-netns-bed ]] && rm -rf "$d"
    done
    return 0
}

# Remove beds of the default prefix rcb<pid>- (and the tests' rcb<letter><pid>-<letter>)
# whose owner process is gone (a run killed with SIGKILL cannot clean up after itself), except
# those left on purpose with --keep.
bed_purge_stale() {
    local ns p pid
    for ns in $(ip netns list 2>/dev/null | awk '{ print $1 }'); do
        [[ $ns =~ ^(rcb[a-z]?([0-9]+)-[a-z]?)(h[0-9]+|br)$ ]] || continue
        p=${BASH_REMATCH[1]} pid=${BASH_REMATCH[2]}
        [[ $p == "$BED_PREFIX" ]] && continue
        kill -0 "$pid" 2>/dev/null && continue
        [[ -e $BED_STATE/${p}keep ]] && continue
        bed_err "removing $ns, left over by process $pid (gone)"
        bed_del_ns "$ns"
        bed_rm_dirs "$p"
    done
}

# Why the bed cannot run here, or nothing (returns 0) when it can.
bed_unavailable() {
    [[ $(id -u) -eq 0 ]] || { echo "not root"; return 0; }
    command -v ip >/dev/null || { echo "ip (iproute2) not found"; return 0; }
    command -v tc >/dev/null || { echo "tc (iproute2) not found"; return 0; }
    ip netns list >/dev/null 2>&1 || { echo "'ip netns' does not work"; return 0; }
    return 1
}

# bed_init [PREFIX]: check the prerequisites, choose the prefix, clean up leftovers.
bed_init() {
    local why
    if why=$(bed_unavailable); then bed_err "cannot run: $why"; return 2; fi
    BED_PREFIX=${1:-rcb$$-}
    [[ $BED_PREFIX =~ ^[A-Za-z0-9_.-]{1,20}$ ]] || { bed_err "bad prefix '$BED_PREFIX'"; return 2; }
    bed_purge "$BED_PREFIX"
    bed_purge_stale
    BED_DIR=$(mktemp -d "${TMPDIR:-/tmp}/${BED_PREFIX}XXXXXX")
    : >"$BED_DIR/.ringcomm-netns-bed"
}

# bed_up N [RATE] [MTU]: create and shape the bed. RATE empty: no shaping.
bed_up() {
    local n=$1 rate=${2-1gbit} mtu=${3:-1500} i h br
    if ! [[ $n =~ ^[0-9]+$ ]] || ((n < 1 || n > BED_MAX_HOSTS)); then
        bed_err "hosts must be 1..$BED_MAX_HOSTS, not '$n'"
        return 2
    fi
    if ! [[ $mtu =~ ^[0-9]+$ ]] || ((mtu < 576 || mtu > 65000)); then
        bed_err "MTU must be 576..65000, not '$mtu'"
        return 2
    fi
    [[ -n $BED_PREFIX ]] || { bed_err "bed_up before bed_init"; return 2; }
    BED_N=$n BED_RATE=$rate BED_MTU=$mtu
    br=$(bed_ns_bridge)
    ip netns add "$br" || { bed_err "ip netns add $br failed"; return 1; }
    bed_ns_quiet "$br"
    # A switch, not a firewall: where br_netfilter is loaded (Docker and others load it), every
    # bridged frame would also go through the namespace's iptables hooks, a per-packet cost no
    # real link has. The sysctls are per namespace (Linux >= 5.3); absent without the module.
    ip netns exec "$br" sysctl -q -w net.bridge.bridge-nf-call-iptables=0 net.bridge.bridge-nf-call-ip6tables=0 \
        net.bridge.bridge-nf-call-arptables=0 >/dev/null 2>&1 || true
    if ! { ip -n "$br" link set lo up &&
        ip -n "$br" link add br0 mtu "$mtu" type bridge stp_state 0 &&
        ip -n "$br" link set br0 up; }; then
        bed_err "bridge in $br failed"
        return 1
    fi
    for ((i = 0; i < n; i++)); do
        h=$(bed_ns_host "$i")
        ip netns add "$h" || { bed_err "ip netns add $h failed"; return 1; }
        bed_ns_quiet "$h"
        # Both ends are created in their namespaces: no interface ever appears in the root one.
        if ! { ip -n "$h" link add "$BED_IF" mtu "$mtu" type veth peer name "p$i" netns "$br" mtu "$mtu" &&
            ip -n "$h" link set lo up &&
            ip -n "$h" addr add "$(bed_addr "$i")/24" dev "$BED_IF" &&
            ip -n "$h" link set "$BED_IF" up &&
            ip -n "$br" link set "p$i" master br0 &&
            ip -n "$br" link set "p$i" up; }; then
            bed_err "link of host $i ($h) failed"
            return 1
        fi
        # Host egress and the bridge port's egress towards the host: both directions of the NIC.
        if [[ -n $rate ]] && ! {
            tc -n "$h" qdisc replace dev "$BED_IF" root tbf rate "$rate" burst "$BED_TBF_BURST" latency "$BED_TBF_LATENCY" &&
                tc -n "$br" qdisc replace dev "p$i" root tbf rate "$rate" burst "$BED_TBF_BURST" latency "$BED_TBF_LATENCY"
        }; then
            bed_err "tc tbf rate $rate on host $i failed"
            return 1
        fi
    done
    bed_wait_links
}

# IPv6 off (no router solicitations or MLD on the links) and no reverse-path surprises.
bed_ns_quiet() {
    ip netns exec "$1" sysctl -q -w net.ipv6.conf.all.disable_ipv6=1 net.ipv6.conf.default.disable_ipv6=1 \
        >/dev/null 2>&1 || true
}

# Wait (up to 5 s) until every host's link is up.
bed_wait_links() {
    local i t st
    for ((t = 0; t < 50; t++)); do
        for ((i = 0; i < BED_N; i++)); do
            st=$(ip -n "$(bed_ns_host "$i")" -o link show "$BED_IF" 2>/dev/null)
            [[ $st == *"state UP"* ]] || break
        done
        ((i == BED_N)) && return 0
        sleep 0.1
    done
    bed_err "links did not come up: $st"
    return 1
}

# Packet loss with nftables (the kernel may lack netem): drop PERMILLE in 1000 IPv4 frames
# (ARP passes) as they arrive at each end of host H's link, the ingress of its veth0 and of its
# switch port, so it loses that share each way; tbf stays. The tables go with the namespaces.
bed_loss_on() { # host permille
    local ns dev br
    br=$(bed_ns_bridge)
    for ns in "$(bed_ns_host "$1")" "$br"; do
        if [[ $ns == "$br" ]]; then dev=p$1; else dev=$BED_IF; fi
        ip netns exec "$ns" nft -f - <<NFT || return 1
table netdev rcbloss$1 {
    chain in { type filter hook ingress device "$dev" priority 0; meta protocol ip numgen random mod 1000 < $2 counter drop; }
}
NFT
    done
}
# Frames bed_loss_on dropped so far, on every host.
bed_loss_drops() {
    local i
    {
        for ((i = 0; i < BED_N; i++)); do
            ip netns exec "$(bed_ns_host "$i")" nft list table netdev "rcbloss$i"
            ip netns exec "$(bed_ns_bridge)" nft list table netdev "rcbloss$i"
        done
    } 2>/dev/null | grep -o 'counter packets [0-9]*' | awk '{ s += $3 } END { print s + 0 }'
}
bed_loss_off() {
    local i
    for ((i = 0; i < BED_N; i++)); do
        ip netns exec "$(bed_ns_host "$i")" nft delete table netdev "rcbloss$i" 2>/dev/null
        ip netns exec "$(bed_ns_bridge)" nft delete table netdev "rcbloss$i" 2>/dev/null
    done
    return 0
}

# One line describing the bed.
bed_describe() {
    local shape="unshaped"
    [[ -n $BED_RATE ]] && shape="each link shaped to $BED_RATE both ways (tbf burst $BED_TBF_BURST latency $BED_TBF_LATENCY)"
    echo "$BED_N hosts $(bed_ns_host 0)..$(bed_ns_host $((BED_N - 1))) ($BED_IF $(bed_addr 0)..$(bed_addr $((BED_N - 1)))/24, MTU $BED_MTU) on bridge $(bed_ns_bridge), $shape"
}

bed_new_secret() {
    BED_SECRET=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
}

# bed_run OUTDIR TIMEOUT cmd...: rank i runs cmd in host i with RING_RANK/RING_NRANKS/RING_ROOT/
# RING_SECRET/RING_SOCKET_IFNAME, and RING_TRANSPORT=tcp unless the caller set it: the
# namespaces share one kernel, so host name and boot id say "same host" and the ranks would
# otherwise talk through shared memory past the shaped links; stdout and stderr go to OUTDIR/rank<i>.out / .err. When a
# rank fails, the others get 10 s to fail on their own (ring_perf aborts the communicator) and
# are then killed; after TIMEOUT seconds everything is killed. Returns 0 if every rank exited 0,
# 124 on timeout, 1 otherwise; BED_FAILED lists "rank:status" of the others, BED_STATUS[i] and
# BED_EXIT_US[i] every rank's status and when it was seen gone (EPOCHREALTIME in microseconds,
# found by polls 0.25 s apart; BED_START_US: the start).
# Faults while the ranks run (tests/netns_faults.sh): when the array BED_RUN_HOOK is set,
# bed_run starts "${BED_RUN_HOOK[@]}" in the background, in the root namespace (it reaches the
# hosts with ip -n / tc -n), right after the ranks, with stdin from /dev/null; it is killed if
# it still runs when the last rank has gone.
bed_run() {
    local out=$1 timeout=$2 i rc ret=0 now start deadline grace=0 alive
    shift 2
    local -a pids=() st=()
    mkdir -p "$out"
    bed_new_secret
    BED_FAILED=() BED_EXIT_US=() BED_STATUS=()
    for ((i = 0; i < BED_N; i++)); do
        ip netns exec "$(bed_ns_host "$i")" env RING_RANK="$i" RING_NRANKS="$BED_N" \
            RING_ROOT="$(bed_addr 0):$BED_PORT" RING_SECRET="$BED_SECRET" RING_SOCKET_IFNAME="$BED_IF" \
            RING_LOCAL_RANK=0 RING_LOCAL_SIZE=1 RING_TRANSPORT="${RING_TRANSPORT:-tcp}" "$@" </dev/null >"$out/rank$i.out" 2>"$out/rank$i.err" &
        pids[i]=$!
        st[i]=""
    done
    start=${EPOCHREALTIME/[.,]/} deadline=$((SECONDS + timeout))
    BED_START_US=$start
    if ((${#BED_RUN_HOOK[@]})); then
        "${BED_RUN_HOOK[@]}" </dev/null &
        BED_HOOK_PID=$!
    fi
    while :; do
        alive=0
        for ((i = 0; i < BED_N; i++)); do
            [[ -n ${st[i]} ]] && continue
            if kill -0 "${pids[i]}" 2>/dev/null; then
                alive=$((alive + 1))
            else
                rc=0
                { wait "${pids[i]}"; } 2>/dev/null || rc=$? # no "Killed" job notice
                st[i]=$rc
                BED_EXIT_US[i]=${EPOCHREALTIME/[.,]/}
                if ((rc != 0)) && ((grace == 0)); then grace=$((SECONDS + 10)); fi
            fi
        done
        ((alive == 0)) && break
        now=$SECONDS
        if ((now >= deadline)); then
            bed_err "timeout after ${timeout} s: killing the ranks still running"
            bed_kill_ranks
            ret=124
        elif ((grace > 0 && now >= grace)); then
            bed_err "a rank failed: killing the ranks still running after 10 s"
            bed_kill_ranks
        fi
        sleep 0.25
    done
    bed_stop_hook
    BED_STATUS=("${st[@]}")
    now=$(((${EPOCHREALTIME/[.,]/} - start) / 100000))
    BED_ELAPSED=$((now / 10)).$((now % 10)) # seconds, one decimal
    local any=0
    for ((i = 0; i < BED_N; i++)); do
        if [[ ${st[i]} != 0 ]]; then
            BED_FAILED+=("$i:${st[i]}")
            any=1
        fi
    done
    ((ret == 124)) && return 124
    return $any
}

# End bed_run's hook if it still runs (bed_run's end, bed_down).
bed_stop_hook() {
    [[ -n $BED_HOOK_PID ]] || return 0
    kill "$BED_HOOK_PID" 2>/dev/null || true
    { wait "$BED_HOOK_PID"; } 2>/dev/null || true
    BED_HOOK_PID=""
}

# Kill every process in the hosts (they are ours: ranks and whatever they started): TERM, then
# KILL after 2 s.
bed_kill_ranks() {
    local i t pids
    for t in TERM 0 0 0 0 0 0 0 0 KILL; do
        pids=""
        for ((i = 0; i < BED_N; i++)); do
            pids+=" $(ip netns pids "$(bed_ns_host "$i")" 2>/dev/null | tr '\n' ' ')"
        done
        [[ -z ${pids// /} ]] && return 0
        # shellcheck disable=SC2086
        [[ $t != 0 ]] && kill -s "$t" $pids 2>/dev/null
        sleep 0.25
    done
    return 0
}

# Print the stderr tail of failed ranks (after bed_run).
bed_report_failed() {
    local out=$1 f r s
    for f in "${BED_FAILED[@]}"; do
        r=${f%%:*} s=${f#*:}
        echo "netns bed: rank $r exited with status $s$( ((s > 128)) && echo " (signal $((s - 128)))"); its stderr (last 30 lines):" >&2
        if [[ -s $out/rank$r.err ]]; then
            tail -n 30 "$out/rank$r.err" | sed 's/^/netns bed:   /' >&2
        else
            echo "netns bed:   (empty)" >&2
        fi
    done
}

# bed_mpirun_init: write the launcher agent and the hostfile, and set BED_MPIRUN to the
# mpirun command line (run from host 0) that starts one rank per host, Open MPI ob1/tcp over
# the bed. Append the program and its arguments.
bed_mpirun_init() {
    local agent=$BED_DIR/rsh-agent hostfile=$BED_DIR/hostfile i
    {
        cat <<'AGENT'
#!/bin/sh
# mpirun launcher agent of the netns bed: "agent [ssh options] HOST COMMAND..." runs
# COMMAND with sh in the namespace of HOST, as ssh would on a real host.
while [ $# -gt 0 ]; do case "$1" in -*) shift ;; *) break ;; esac; done
host=$1; shift
case "$host" in
AGENT
        for ((i = 0; i < BED_N; i++)); do
            echo "    $(bed_addr "$i")) ns=$(bed_ns_host "$i") ;;"
        done
        cat <<'AGENT'
    *) echo "rsh-agent: $host is not a host of the bed" >&2; exit 255 ;;
esac
exec ip netns exec "$ns" /bin/sh -c "$*"
AGENT
    } >"$agent"
    chmod 755 "$agent"
    : >"$hostfile"
    for ((i = 0; i < BED_N; i++)); do echo "$(bed_addr "$i") slots=1" >>"$hostfile"; done
    BED_MPIRUN=(ip netns exec "$(bed_ns_host 0)" mpirun --allow-run-as-root -np "$BED_N" --hostfile "$hostfile"
        --map-by node --mca plm_rsh_agent "$agent" --mca plm_rsh_no_tree_spawn 1
        --mca pml ob1 --mca btl "tcp,self"
        --mca btl_tcp_if_include "$BED_SUBNET.0/24" --mca oob_tcp_if_include "$BED_SUBNET.0/24")
    # Only with more ranks than CPUs, as compare.sh on loopback: idle ranks then yield the CPUs
    # the others need; with a CPU each, yielding only costs Open MPI (4-7 % at 256 B-16 KiB,
    # 2 ranks over loopback TCP).
    if ((BED_N > $(nproc 2>/dev/null || echo 1))); then
        BED_MPIRUN+=(--mca mpi_yield_when_idle 1)
    fi
}

# bed_down: kill what runs in the bed and delete it (idempotent; the EXIT trap calls it).
bed_down() {
    bed_stop_hook
    [[ -n $BED_PREFIX ]] || return 0
    bed_purge "$BED_PREFIX"
    [[ -n $BED_DIR && -d $BED_DIR ]] && rm -rf "$BED_DIR"
    BED_DIR=""
    return 0
}

# bed_keep: leave the bed for debugging; bed_purge_stale of later runs will not remove it.
bed_keep() {
    mkdir -p "$BED_STATE" && : >"$BED_STATE/${BED_PREFIX}keep"
}

# bed_rate_bps RATE: the tc rate in bits per second (tc units: bit kbit mbit gbit tbit, the
# kibit.. forms, bps kbps mbps gbps tbps = bytes per second); fails on anything else.
bed_rate_bps() {
    awk -v r="$1" 'BEGIN {
        if (!match(tolower(r), /^[0-9]+(\.[0-9]+)?/)) exit 1
        v = substr(r, 1, RLENGTH) + 0; u = substr(tolower(r), RLENGTH + 1)
        m["bit"] = 1; m[""] = 1; m["bps"] = 8
        split("k m g t", p, " ")
        for (i = 1; i <= 4; i++) {
            m[p[i] "bit"] = 1000 ^ i; m[p[i] "ibit"] = 1024 ^ i
            m[p[i] "bps"] = 8 * 1000 ^ i; m[p[i] "ibps"] = 8 * 1024 ^ i
        }
        if (!(u in m) || v <= 0) exit 1
        printf("%.0f\n", v * m[u])
    }'
}
