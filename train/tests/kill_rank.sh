#!/usr/bin/env bash
# kill_rank.sh DDP_TRAIN FREE_PORT_PY [MODE...]: the library's own failure detection under the
# training programs. For each mode (default: ddp ps-async) start 3 ranks of ddp_train by hand
# (the RING_* bootstrap of docs/launch.md, not ringrun: ringrun would stop the job itself when a
# rank dies), wait for rank 0's first epoch line, SIGKILL rank 1 and check that both survivors
# exit non-zero within BOUND_S seconds with a RING_ERR_PEER message on stderr:
#   ddp:      ranks 0 and 2 both name "rank 1 ... died" (each is in rank 1's ring);
#   ps-async: the server (rank 0) names "rank 1 ... died"; worker 2 shares a communicator with
#             the server only, so it learns of the failure from the server's abort and names
#             "rank 0 ... failed" (or "died").
# RING_TIMEOUT_MS is 30000, far above BOUND_S, so a pass cannot come from a timeout. A survivor
# still running at the bound is killed and the test fails. Every process and temp file goes
# whatever the end (trap).
set -euo pipefail

prog=$1 free_port=$2
shift 2
modes=("$@")
[ ${#modes[@]} -gt 0 ] || modes=(ddp ps-async)

N=3
KILLED=1
BOUND_S=${KILL_RANK_BOUND_S:-10}   # seconds from the kill to the last survivor's exit
START_S=120                        # seconds for rank 0's first epoch line (a loaded machine)
TIMEOUT_MS=30000

dir=$(mktemp -d "${TMPDIR:-/tmp}/ringcomm-kill-rank.XXXXXX")
pids=()
cleanup() {
    local p
    for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
    rm -rf "$dir"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

fail() { echo "FAIL: $*" >&2; exit 1; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }
alive() { kill -0 "$1" 2>/dev/null; }
show() {  # the output of every rank of the current run
    local r
    for r in $(seq 0 $((N - 1))); do
        echo "--- rank $r stdout (last lines)"; tail -n 3 "$dir/$mode.$r.out" || true
        echo "--- rank $r stderr"; cat "$dir/$mode.$r.err" || true
    done
}

run_mode() {
    local mode=$1 port secret r t0 t_kill elapsed st
    port=$(python3 "$free_port")
    secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
    pids=()
    # Far more epochs than can finish before the kill: house, 4096 samples, runs a few hundred
    # epochs a second here. The CSV goes to the temp dir; --no-plot keeps gnuplot out of it.
    for r in $(seq 0 $((N - 1))); do
        env -u RANK -u WORLD_SIZE -u OMPI_COMM_WORLD_RANK -u OMPI_COMM_WORLD_SIZE -u PMI_RANK -u PMI_SIZE \
            -u SLURM_PROCID -u SLURM_NTASKS -u RING_DEBUG \
            RING_RANK=$r RING_NRANKS=$N RING_ROOT="127.0.0.1:$port" RING_SECRET="$secret" \
            RING_TIMEOUT_MS=$TIMEOUT_MS \
            "$prog" --mode "$mode" --task house --epochs 1000000 --no-plot --out "$dir/$mode" \
            >"$dir/$mode.$r.out" 2>"$dir/$mode.$r.err" &
        pids+=($!)
    done

    # Training is under way once rank 0 prints its first epoch line (flushed per epoch).
    t0=$(now_ms)
    until grep -Eq "^house $mode +epoch +[0-9]+/" "$dir/$mode.0.out"; do
        for r in $(seq 0 $((N - 1))); do
            alive "${pids[$r]}" || { show; fail "$mode: rank $r exited before training was under way"; }
        done
        [ $(( $(now_ms) - t0 )) -lt $((START_S * 1000)) ] || { show; fail "$mode: no epoch line from rank 0 in ${START_S} s"; }
        sleep 0.05
    done

    t_kill=$(now_ms)
    kill -9 "${pids[$KILLED]}"
    st=0; { wait "${pids[$KILLED]}"; } 2>/dev/null || st=$?  # no "Killed" notice
    [ "$st" -eq 137 ] || { show; fail "$mode: rank $KILLED was not killed by SIGKILL (status $st): it had ended already"; }

    # Every survivor must be gone within the bound; one still running then is a hang.
    for r in $(seq 0 $((N - 1))); do
        [ "$r" -eq $KILLED ] && continue
        while alive "${pids[$r]}" && [ $(( $(now_ms) - t_kill )) -lt $((BOUND_S * 1000)) ]; do sleep 0.05; done
        if alive "${pids[$r]}"; then
            kill -9 "${pids[$r]}" 2>/dev/null || true
            show
            fail "$mode: rank $r still running ${BOUND_S} s after rank $KILLED was killed (RING_TIMEOUT_MS=$TIMEOUT_MS): hang"
        fi
    done
    elapsed=$(( $(now_ms) - t_kill ))

    for r in $(seq 0 $((N - 1))); do
        [ "$r" -eq $KILLED ] && continue
        st=0; wait "${pids[$r]}" || st=$?
        [ "$st" -ne 0 ] || { show; fail "$mode: rank $r exited 0 after rank $KILLED was killed"; }
        [ "$st" -lt 128 ] || { show; fail "$mode: rank $r ended by signal $((st - 128)), not by an error exit"; }
        local err=$dir/$mode.$r.err want
        if [ "$mode" = ps-async ] && [ "$r" -ne 0 ]; then
            want="rank 0 \([^)]*\) (failed|died)"     # a worker: its only peer, the server, aborted
        else
            want="rank $KILLED \([^)]*\) died"
        fi
        grep -q "RING_ERR_PEER" "$err" || { show; fail "$mode: rank $r's stderr has no RING_ERR_PEER"; }
        grep -Eq "$want" "$err" || { show; fail "$mode: rank $r's stderr does not match /$want/"; }
        # Rank 0 must not have reached the end of training (the kill landed mid-training).
        if grep -q "final loss" "$dir/$mode.$r.out"; then show; fail "$mode: rank $r finished training before the kill"; fi
        echo "$mode: rank $r exited $st: $(head -n 1 "$err")"
    done
    pids=()
    echo "$mode: survivors gone ${elapsed} ms after the kill of rank $KILLED (bound ${BOUND_S} s, RING_TIMEOUT_MS=$TIMEOUT_MS)"
}

for mode in "${modes[@]}"; do run_mode "$mode"; done
echo "kill_rank: passed (${modes[*]})"
