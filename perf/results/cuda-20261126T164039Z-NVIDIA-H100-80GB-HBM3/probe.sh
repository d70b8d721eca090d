#!/bin/bash
# Device run 3 (one NVIDIA H100 80GB HBM3, driver 580.159.04; binaries of
# ../cuda-20261126T163133Z-NVIDIA-H100-80GB-HBM3, carried as build-carry/): the staged
# collectives over TCP with device buffers (4 ranks), then the staged all-reduce and the
# direct one with and without NVIDIA MPS. Output: coll-tcp.log, mps.log.
export PATH=$PATH:/usr/local/cuda/bin
B=build-carry; R="$B/tools/ringrun --timeout 200"; O=$OUT
{
echo "==== coll-staged-tcp-n4: RING_TRANSPORT=tcp RING_CHUNK_BYTES=64K ringrun -n 4 cuda_coll_check --expect-no-direct"
RING_TRANSPORT=tcp RING_CHUNK_BYTES=64K timeout 120 $R -n 4 $B/perf/cuda/cuda_coll_check --expect-no-direct; echo "rc=$?"
} > $O/coll-tcp.log 2>&1
mps=$(command -v nvidia-cuda-mps-control || ls /usr/local/nvidia/bin/nvidia-cuda-mps-control 2>/dev/null)
echo "mps control: ${mps:-none}" | tee $O/mps.log
staged() { echo "==== $1: RING_TRANSPORT=tcp ringrun -n 2 ring_perf -G both -C allreduce -b 1M -e 64M -f 4 -n 20 -w 5 -c 1"; RING_TRANSPORT=tcp timeout 90 $R -n 2 $B/perf/ring_perf -G both -C allreduce -b 1M -e 64M -f 4 -n 20 -w 5 -c 1; }
direct() { echo "==== $1: RING_CUDA_DIRECT_WORK=$2 ringrun -n 4 ring_perf -G cuda -C allreduce -b 1M -e 256M -f 4 -n 20 -w 5 -c 1"; RING_CUDA_DIRECT_WORK=$2 timeout 90 $R -n 4 $B/perf/ring_perf -G cuda -C allreduce -b 1M -e 256M -f 4 -n 20 -w 5 -c 1; }
{
staged "no MPS"
if [ -n "$mps" ]; then
    export CUDA_MPS_PIPE_DIRECTORY=/tmp/mps-pipe CUDA_MPS_LOG_DIRECTORY=/tmp/mps-log
    mkdir -p $CUDA_MPS_PIPE_DIRECTORY $CUDA_MPS_LOG_DIRECTORY
    $mps -d && sleep 1 && echo "MPS daemon started"
    staged "MPS"
    direct "MPS" each
    direct "MPS" one
    echo get_server_list | $mps
    echo quit | $mps; sleep 1
    cat $CUDA_MPS_LOG_DIRECTORY/control.log 2>/dev/null | tail -5
    unset CUDA_MPS_PIPE_DIRECTORY CUDA_MPS_LOG_DIRECTORY
    staged "no MPS again"
fi
} >> $O/mps.log 2>&1
