#!/bin/bash
# Device run 4: the coll and sanitizer steps of gpu_checks.sh, then the staged all-reduce over
# TCP with and without NVIDIA MPS, interleaved.
# (one NVIDIA H100 80GB HBM3, driver 580.159.04; binaries of ../cuda-20261126T163133Z-NVIDIA-H100-80GB-HBM3
# plus the gpu_checks.sh of this commit; output: summary.txt, coll.log, sanitizer.log, mps2.log)
export PATH=$PATH:/usr/local/cuda/bin
B=build-carry; R="$B/tools/ringrun --timeout 200"; O=$OUT
perf/cuda/gpu_checks.sh --build $B --no-build --results $O/r --steps coll,sanitizer --step-timeout 150 >/dev/null 2>&1
grep -E "^(PASS|FAIL|TIMEOUT|SKIP)|RESULT" $O/r/summary.txt | cut -c1-60
mps=/usr/local/nvidia/bin/nvidia-cuda-mps-control
staged() { echo "==== $1: RING_TRANSPORT=tcp ringrun -n 2 ring_perf -G both -C allreduce -b 1M -e 64M -f 4 -n 20 -w 5 -c 1"; RING_TRANSPORT=tcp timeout 90 $R -n 2 $B/perf/ring_perf -G both -C allreduce -b 1M -e 64M -f 4 -n 20 -w 5 -c 1; }
{
for pass in 1 2; do
    staged "pass $pass, no MPS"
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
    mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
    $mps -d && sleep 1 && echo "MPS daemon started"
    staged "pass $pass, MPS"
    echo quit | $mps; sleep 1
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
done
} > $O/mps2.log 2>&1
grep -E "^====|cuda/host|^\[0\] # +[0-9]+ " $O/mps2.log
