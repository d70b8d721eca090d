#!/usr/bin/env bash
# Installs the Debian 12 packages ringcomm needs (only the missing ones) and builds it.
# Usage: scripts/setup.sh [build-dir [meson options...]]
# Needs root (or sudo) only when a package is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

# libhwloc-dev: topology (src/topo); libudev-dev: hwloc's static library needs -ludev, so a
# program that links libringcomm.a (pkg-config --static) links.
# libibverbs-dev: the RDMA verbs transport (-Drdma=auto finds it). The soft-RoCE test bed
# (tests/rdma/run-in-vm.sh, a QEMU guest with rdma_rxe, since this kernel has no RDMA) needs
# qemu-system-x86, and cpio, kmod, xz-utils and util-linux (flock) to build its initramfs;
# the guest runs the host's own programs: iproute2's rdma(8), ibverbs-providers (librxe),
# ibverbs-utils and perftest (ibv_rc_pingpong, ib_write_bw). nftables: tests/netns_faults.sh
# drops packets with nft(8) where the kernel has no netem (Debian's cloud kernels). libgloo-dev:
# perf/compare's Gloo side of the side-by-side runs (perf/compare/gloo_allreduce.cc).
pkgs=(gcc g++ make meson ninja-build pkg-config libcriterion-dev openmpi-bin libopenmpi-dev python3
      libgloo-dev gnuplot-nox iproute2 clang libclang-rt-14-dev libhwloc-dev libudev-dev
      libibverbs-dev ibverbs-providers ibverbs-utils perftest
      qemu-system-x86 cpio kmod xz-utils util-linux nftables)
missing=()
for p in "${pkgs[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if ((${#missing[@]})); then
    echo "setup: installing ${missing[*]}"
    SUDO=""
    [ "$(id -u)" -eq 0 ] || SUDO=sudo
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -q
    $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

build=${1:-build}
shift || true
if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" --werror "$@"
else
    # An option this build cannot take must fail here, not leave a stale configuration tested.
    if [ $# -gt 0 ]; then meson configure "$build" "$@" >/dev/null; fi
fi
ninja -C "$build"
