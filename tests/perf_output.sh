#!/usr/bin/env bash
# Checks of ring_perf's output and options that need ringrun (meson runs them, see meson.build):
#
#   perf_output.sh json RINGRUN RING_PERF
#       4 ranks, --json, -A both: stdout must be one JSON object with the metadata and a row per
#       size and algorithm, all checked and correct (python3 parses it; skipped without python3);
#       with -c 0, "ok" and "wrong_total" null and the footer "not checked"; a range of sizes
#       that holds no element per rank exits 2 saying so, and never says ok; the broadcast's
#       header names the models of what RING_ALGO=rh, sm and auto run.
#   perf_output.sh faults RINGRUN RING_PERF_FAULTY
#       ring_perf linked with faulty collectives (perf_fault.c): each fault (the const send
#       buffer written, a write past the end of a buffer, a wrong element) exits 1 and says what
#       it found; without a fault the run passes.
#   perf_output.sh plot RINGRUN RING_PERF PLOT_SCRIPT OUT.png [MPI_ALLREDUCE]
#       4 ranks, --csv, -A both, then plot_busbw.sh (with an mpi_allreduce CSV when that program
#       and mpirun exist); OUT.png must be a non-empty PNG (skipped without gnuplot).
#   perf_output.sh gloo RINGRUN GLOO_ALLREDUCE
#       perf/compare/gloo_allreduce (built where Gloo is): 3 ranks under ringrun, --csv and
#       --json, every dtype and op in and out of place, each checked against the exact values
#       (the program exits 1 on a wrong element); the rows are ring_perf's columns with algo
#       "gloo"; without --store, or with no rank in the environment, it exits 2 saying why.
#   perf_output.sh cuda RINGRUN RING_PERF
#       -G cuda|both with --emulate-gpu (CUDA builds, no GPU needed): the four collectives that take
#       device buffers, checked (ring_perf exits 1 on any wrong element), over shared memory and
#       TCP, blocking and async, in place; the host/device comparison; the mem column and key of
#       --csv and --json; the refusals (-A ps, -R 1), and -G cuda without --emulate-gpu: a run
#       on a GPU, or exit 77 with the reason.
#   perf_output.sh nocuda RINGRUN RING_PERF
#       builds without CUDA: -G cuda and -G both exit 77 saying so.
#   perf_output.sh ring-order RINGRUN RING_PERF
#       3 ranks on stand-in hosts x, y, x (RING_HOST_ID): the ring runs 0 2 1, not in rank
#       order; the probes measure its links (they used rank -/+ 1, which has no connection, and
#       the job failed), the header says which, and the sweep is checked.
set -euo pipefail

SKIP=77
mode=${1:-}
shift || true
SWEEP=(-b 1K -e 1M -f 16 -n 3 -w 1 -c 1 --probe-bytes 4M)

case $mode in
json)
    ringrun=$1 perf=$2
    command -v python3 >/dev/null || { echo "python3 not found: skipped"; exit $SKIP; }
    # Without the shared-memory all-reduce (which 4 ranks of one host take by default up to
    # 1 MiB, and which has no link model): the rows of the network algorithms and their models.
    out=$(RING_SM_MAX_BYTES=0 "$ringrun" -n 4 --no-prefix --timeout 300 "$perf" -A both --json "${SWEEP[@]}")
    sm=$("$ringrun" -n 4 --no-prefix --timeout 300 "$perf" --json "${SWEEP[@]}")
    printf '%s\n' "$sm" | python3 -c '
import json, sys
d = json.load(sys.stdin)
algos = [r["algo"] for r in d["rows"]]
assert algos == ["sm", "sm", "sm"] and d["ok"] is True, algos
for r in d["rows"]:
    assert r["wrong"] == 0 and r["time_us"] > 0, r
print("json ok: the shared-memory all-reduce by default:", [r["time_us"] for r in d["rows"]], "us")
'
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
    # The broadcast's header names the model of what the library runs: the tree for
    # RING_ALGO=rh (it named the ring), the ring for RING_ALGO=sm (it named both).
    for want in "rh 3 tree" "sm 4 ring" "auto 4 ring tree"; do
        read -r algo n models <<<"$want"
        got=$(RING_ALGO=$algo "$ringrun" -n "$n" --no-prefix --timeout 120 "$perf" -C broadcast -b 1K -e 4K -n 2 -w 1 \
                  --alpha-us 10 --link-gbps 10 | sed -n 's/^# model (\([a-z]*\)).*/\1/p' | tr '\n' ' ')
        if [[ $got != "${models} " ]]; then
            echo "FAIL: broadcast, RING_ALGO=$algo, $n ranks: header models '$got', want '$models '" >&2
            exit 1
        fi
        echo "ok: broadcast header, RING_ALGO=$algo, $n ranks: model(s) $models"
    done
    # -c 0: nothing compared, so nothing may read as OK.
    NC=(-b 4 -e 64 -f 4 -n 2 -w 1 -c 0 --no-probe)
    "$ringrun" -n 2 --no-prefix --timeout 120 "$perf" --json "${NC[@]}" 2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["check"] == 0 and d["ok"] is None and d["wrong_total"] is None, d
assert d["rows"] and all(r["wrong"] is None for r in d["rows"]), d["rows"]
print("json ok: -c 0:", len(d["rows"]), "rows, ok", d["ok"])
'
    out=$("$ringrun" -n 2 --no-prefix --timeout 120 "$perf" "${NC[@]}")
    if ! grep -q '^# Out of bounds values : N/A (not checked, -c 0)$' <<<"$out" || grep -q ' OK' <<<"$out"; then
        echo "FAIL: -c 0 footer:" >&2
        printf '%s\n' "$out" >&2
        exit 1
    fi
    echo "ok: -c 0 footer: $(grep 'Out of bounds' <<<"$out")"
    # No size in the range holds one element per rank: exit 2 and why, not an empty table that passes.
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/perfjson.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    tmp_out=$tmp/out tmp_err=$tmp/err
    for args in "-C allgather -b 4 -e 8" "-C allgather -b 4 -e 8 --json" "-C allreduce -b 2 -e 3 --json"; do
        st=0
        # shellcheck disable=SC2086
        "$ringrun" -n 3 --no-prefix --timeout 60 "$perf" $args --no-probe >"$tmp_out" 2>"$tmp_err" || st=$?
        if [[ $st != 2 ]] || grep -q '"ok": true\|OK' "$tmp_out" \
            || ! grep -q "^ring_perf: no size in -b [0-9]* .. -e [0-9]* holds one float element" "$tmp_err"; then
            echo "FAIL: ring_perf $args: exit $st (want 2):" >&2
            cat "$tmp_out" "$tmp_err" >&2
            exit 1
        fi
        echo "ok: ring_perf $args: exit 2: $(grep -m1 'no size' "$tmp_err")"
    done
    ;;
faults)
    ringrun=$1 perf=$2
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/perffault.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    # Up to 3 KiB: the buffers fit in a page even without the guard spans, so a ring_perf that
    # does not check them passes (exit 0) instead of crashing.
    F=(-b 64 -e 3K -f 8 -n 2 -w 1 -c 1 --no-probe)
    k=0
    fault() { # fault want_exit pattern ring_perf-args...: exit status and a stderr line
        local f=$1 want=$2 pat=$3 st=0
        shift 3
        k=$((k + 1))
        RING_TEST_PERF_FAULT=$f "$ringrun" -n 3 --timeout 60 "$perf" "$@" "${F[@]}" \
            >"$tmp/$k.out" 2>"$tmp/$k.err" || st=$?
        if [[ $st != "$want" ]] || ! grep -q -- "$pat" "$tmp/$k.err" "$tmp/$k.out"; then
            echo "FAIL: fault '$f': ring_perf $*: exit $st (want $want), looked for: $pat" >&2
            tail -n 20 "$tmp/$k.out" "$tmp/$k.err" >&2
            exit 1
        fi
        echo "ok: fault '${f:-none}': ring_perf $*: exit $st:" \
            "$(grep -h -m1 -- "$pat" "$tmp/$k.err" "$tmp/$k.out" | head -n 1)"
    }
    fault "" 0 "Out of bounds values : 0 OK" -C allreduce
    fault send 1 "of its (const) send buffer" -C allreduce
    fault send-rs 1 "of its (const) send buffer, the first element 14 = " -C reduce_scatter
    fault past 1 "wrote past the 64 bytes it uses of its receive buffer" -C allreduce
    fault past 1 "wrote past the 64 bytes it uses of its send buffer" -C allreduce -I 1
    fault past-ag 1 "wrote past the 63 bytes it uses of its receive buffer" -C allgather -d int8
    fault past-bc 1 "wrote past the 64 bytes it uses of its receive buffer" -C broadcast
    fault wrong 1 "wrong element" -C allreduce
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
cuda)
    ringrun=$1 perf=$2
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/perfcuda.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    # 4 B .. 4 MiB: whole-buffer staging (recursive doubling/halving, the broadcast tree at 4
    # ranks) and, with 16 KiB chunks, the device ring with up to 256 chunks per call.
    E=(--emulate-gpu -b 4 -e 4M -f 4 -n 2 -w 1 -c 1 --probe-bytes 1M)
    export RING_CHUNK_BYTES=16K
    run() { # name nranks args...: must exit 0
        local name=$1 n=$2
        shift 2
        if ! "$ringrun" -n "$n" --timeout 120 "$perf" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err"; then
            echo "FAIL: $name: ringrun -n $n ring_perf $*" >&2
            tail -n 20 "$tmp/$name.out" "$tmp/$name.err" >&2
            exit 1
        fi
        echo "ok: $name: $(grep -c '^\[0\]  ' "$tmp/$name.out" || true) rows: ring_perf $*"
    }
    run allreduce 3 -G both -C allreduce "${E[@]}"
    grep -q 'device buffers (cuda)' "$tmp/allreduce.out" && grep -q 'cuda/host busbw at the largest size (4194304 B)' \
        "$tmp/allreduce.out" || { echo "FAIL: no device table or comparison" >&2; cat "$tmp/allreduce.out" >&2; exit 1; }
    RING_TRANSPORT=tcp run allreduce-tcp-async-inplace 3 -G cuda -C allreduce -a 1 -I 1 -d bfloat16 -o avg "${E[@]}"
    run reduce_scatter 4 -G both -C reduce_scatter -d int32 -o max "${E[@]}"
    RING_TRANSPORT=tcp run reduce_scatter-tcp-inplace 3 -G cuda -C reduce_scatter -I 1 -a 1 "${E[@]}"
    run allgather 3 -G both -C allgather -d int8 "${E[@]}"
    run allgather-inplace 4 -G cuda -C allgather -I 1 -a 1 "${E[@]}"
    run broadcast 4 -G both -C broadcast -r 1 "${E[@]}"
    RING_TRANSPORT=tcp run broadcast-tcp 3 -G cuda -C broadcast -r 2 -a 1 -d double "${E[@]}"

    # JSON and CSV carry the memory kind per row.
    command -v python3 >/dev/null || { echo "python3 not found: JSON and CSV not checked"; exit 0; }
    "$ringrun" -n 3 --no-prefix --timeout 120 "$perf" -G both --json -C allreduce "${E[@]}" >"$tmp/j.json" 2>"$tmp/j.err"
    python3 - "$tmp/j.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["memory"] == "both" and "emulated" in d["gpu"] and d["ok"] is True, d
mems = [r["mem"] for r in d["rows"]]
assert len(mems) == 22 and mems == ["host"] * 11 + ["cuda"] * 11, mems
assert all(r["wrong"] == 0 for r in d["rows"]), d["rows"]
print("ok: json:", len(mems), "rows, memory", d["memory"], "gpu", d["gpu"])
PY
    "$ringrun" -n 2 --no-prefix --timeout 120 "$perf" -G cuda --csv -C allgather "${E[@]}" >"$tmp/c.csv" 2>"$tmp/c.err"
    python3 - "$tmp/c.csv" <<'PY'
import csv, sys
rows = list(csv.DictReader(open(sys.argv[1])))
assert rows and all(r["mem"] == "cuda" and r["wrong"] == "0" for r in rows), rows
print("ok: csv:", len(rows), "rows, mem cuda")
PY

    # Refusals name the reason (exit 2).
    for bad in "-A ps" "-R 1"; do
        # shellcheck disable=SC2086
        if "$ringrun" -n 2 --timeout 60 "$perf" -G cuda $bad "${E[@]}" >"$tmp/bad.out" 2>&1; then
            echo "FAIL: -G cuda $bad was not refused" >&2
            exit 1
        fi
        grep -q "ring_perf: -G cuda/both with $bad" "$tmp/bad.out" || { cat "$tmp/bad.out" >&2; exit 1; }
        echo "ok: -G cuda $bad refused"
    done
    # Without --emulate-gpu: the real GPU, or exit 77 with the reason (no GPU here).
    st=0
    unset RING_CHUNK_BYTES
    "$ringrun" -n 2 --timeout 120 "$perf" -G cuda -b 4 -e 64K -f 16 -n 2 -w 1 -c 1 --probe-bytes 1M \
        >"$tmp/gpu.out" 2>&1 || st=$?
    if [[ $st == 77 ]]; then
        grep -q "no usable GPU: ." "$tmp/gpu.out" || { echo "FAIL: exit 77 without a reason" >&2; cat "$tmp/gpu.out" >&2; exit 1; }
        echo "ok: -G cuda without a GPU: $(grep -m1 'no usable GPU' "$tmp/gpu.out")"
    elif [[ $st == 0 ]]; then
        echo "ok: -G cuda on the GPU: $(grep -m1 '# device buffers' "$tmp/gpu.out")"
    else
        echo "FAIL: -G cuda without --emulate-gpu: exit $st" >&2
        cat "$tmp/gpu.out" >&2
        exit 1
    fi
    ;;
nocuda)
    ringrun=$1 perf=$2
    for mem in cuda both; do
        st=0
        out=$("$ringrun" -n 2 --timeout 60 "$perf" -G $mem --emulate-gpu -b 4 -e 1K 2>&1) || st=$?
        [[ $st == 77 && $out == *"this build has no CUDA support"* ]] || { echo "FAIL: -G $mem: exit $st: $out" >&2; exit 1; }
        echo "ok: -G $mem: $(grep -m1 'no CUDA' <<<"$out")"
    done
    ;;
gloo)
    ringrun=$1 gloo=$2
    tmp=$(mktemp -d "${TMPDIR:-/tmp}/perfgloo.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    # Every rendezvous gets a fresh directory: Gloo's FileStore keys stay after a run.
    store() { mktemp -d "$tmp/store.XXXXXX"; }
    # 4 B .. 1 MiB by 16: five rows of float, each checked.
    "$ringrun" -n 3 --no-prefix --timeout 120 "$gloo" --store "$(store)" -b 4 -e 1M -f 16 -n 3 -w 1 -c 1 --csv \
        >"$tmp/f.csv" 2>"$tmp/f.err" || { cat "$tmp/f.err" >&2; echo "FAIL: gloo_allreduce float sum" >&2; exit 1; }
    rows=$(grep -c '^allreduce,3,' "$tmp/f.csv" || true)
    bad=$(awk -F, '/^allreduce,/ && ($12 != 0 || $15 != "gloo" || $9 <= 0)' "$tmp/f.csv")
    if [[ $rows != 5 || -n $bad ]]; then
        echo "FAIL: gloo_allreduce --csv: $rows rows (want 5), rows not checked/right/labelled: '$bad'" >&2
        cat "$tmp/f.csv" >&2
        exit 1
    fi
    # Every dtype and op; odd sizes, in place every other run.
    i=0
    for d in int8 uint8 int32 uint32 int64 uint64 float double; do
        for o in sum prod min max; do
            i=$((i + 1))
            if ! "$ringrun" -n 3 --no-prefix --timeout 120 "$gloo" --store "$(store)" -b 1 -e 100003 -f 37 -n 1 -w 0 \
                -c 1 -d "$d" -o "$o" -I $((i % 2)) >"$tmp/t.out" 2>&1; then
                cat "$tmp/t.out" >&2
                echo "FAIL: gloo_allreduce -d $d -o $o -I $((i % 2))" >&2
                exit 1
            fi
            grep -q '^# Out of bounds values : 0 OK' "$tmp/t.out" || { cat "$tmp/t.out" >&2; echo "FAIL: -d $d -o $o: no '0 OK'" >&2; exit 1; }
        done
    done
    if command -v python3 >/dev/null; then
        "$ringrun" -n 2 --no-prefix --timeout 120 "$gloo" --store "$(store)" -A bcube -b 1K -e 64K -f 8 -n 2 -w 1 --json \
            2>/dev/null | python3 -c '
import json, sys
d = json.load(sys.stdin)
assert d["program"] == "gloo_allreduce" and d["nranks"] == 2 and d["ok"] is True, d
assert [r["algo"] for r in d["rows"]] == ["gloo"] * 3, d["rows"]
assert all(r["wrong"] == 0 and r["time_us"] > 0 for r in d["rows"]), d["rows"]
print("gloo json ok (bcube):", [r["time_us"] for r in d["rows"]], "us")
'
    fi
    # Refusals: exit 2 with the reason, no rendezvous attempted.
    rc=0
    RING_RANK=0 RING_NRANKS=1 "$gloo" -b 4 -e 4 >/dev/null 2>"$tmp/e1" || rc=$?
    [[ $rc == 2 ]] && grep -q -- '--store DIR is required' "$tmp/e1" || { cat "$tmp/e1" >&2; echo "FAIL: no --store: exit $rc" >&2; exit 1; }
    rc=0
    env -u RING_RANK -u RING_NRANKS -u RANK -u WORLD_SIZE "$gloo" --store "$tmp" >/dev/null 2>"$tmp/e2" || rc=$?
    [[ $rc == 2 ]] && grep -q 'needs RING_RANK and RING_NRANKS' "$tmp/e2" || { cat "$tmp/e2" >&2; echo "FAIL: no rank: exit $rc" >&2; exit 1; }
    echo "gloo ok: 5 float rows and 32 dtype/op runs checked ($(awk -F, '/^allreduce,/ {printf "%s B %s us; ", $3, $9}' "$tmp/f.csv"))"
    ;;
ring-order)
    ringrun=$1 perf=$2
    # shellcheck disable=SC2016 # expanded by the bash that ringrun starts for each rank
    hosts='h=(x y x); export RING_HOST_ID=${h[$RING_RANK]}; exec "$@"'
    st=0
    out=$("$ringrun" -n 3 --no-prefix --timeout 120 bash -c "$hosts" bash "$perf" -b 4 -e 1M -f 16 -n 2 -w 1 -c 1 \
              --probe-bytes 4M 2>&1) || st=$?
    if [[ $st != 0 ]] || ! grep -q '^# ring order: 0 2 | 1 (2 hosts); each rank sends to the next' <<<"$out" \
        || ! grep -q '^# alpha [0-9.e+-]* us (ring token pass, .*)  link [0-9.e+-]* GB/s .*(ring streaming, 4 MiB' <<<"$out" \
        || ! grep -q '^# Out of bounds values : 0 OK$' <<<"$out"; then
        echo "FAIL: hosts x y x: exit $st (want 0), or no ring order 0 2 | 1, probed alpha and link, or OK:" >&2
        printf '%s\n' "$out" >&2
        exit 1
    fi
    echo "ok: hosts x y x: $(grep -m1 '^# ring order' <<<"$out")"
    echo "ok: $(grep -m1 '^# alpha' <<<"$out")"
    ;;
*)
    sed -n '2,28p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
    ;;
esac
