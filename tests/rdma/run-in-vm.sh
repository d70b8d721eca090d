#!/usr/bin/env bash
# run-in-vm.sh - run a command in a throw-away QEMU guest that has real RDMA verbs
# (soft-RoCE, rdma_rxe), with a host directory visible read-write.
#
#   tests/rdma/run-in-vm.sh [--] HOSTDIR COMMAND [ARGS...]
#   e.g. tests/rdma/run-in-vm.sh "$PWD" tests/rdma/suite.sh build
#
# Why: the verbs transport needs an RDMA device to be tested, and the machines this project
# is built and tested on have none (their kernels lack CONFIG_INFINIBAND, so libibverbs finds
# no device). Debian's stock kernel ships rdma_rxe, which turns any netdev into a RoCE v2
# device. A small QEMU guest booting that kernel gives real verbs on an unmodified host. CI
# runs a clean clone, so the project carries this runner itself instead of depending on a
# copy outside the tree (it started as a copy of tools/rdma-vm/run-in-rdma-vm.sh).
#
# How:
# * Kernel: the linux-image-6.1.0-*-amd64 package linux-image-amd64 points to, fetched with
#   `apt-get download` and unpacked into the cache; nothing is installed on the host. The
#   uncompressed vmlinux boots through its PVH entry, which spares the guest ~5 s of xz
#   decompression under emulation.
# * initramfs: busybox (busybox-static, also only downloaded), the modules for virtio-pci,
#   9p, overlayfs, rdma_rxe, ib_uverbs, rdma_ucm and their dependencies, and an /init
#   script (PID 1) that loads them, mounts the roots and brings rxe0 up.
# * Root filesystem = the host's own: host / is shared read-only over virtio-9p under a tmpfs
#   overlay, so the host's libibverbs, librxe, perftest and our build output run unchanged,
#   and nothing the guest writes outside HOSTDIR survives it. HOSTDIR is a second, read-write
#   9p share at the same absolute path, so paths are the same inside and out; COMMAND runs
#   there as root with `ulimit -l unlimited` (verbs pin memory).
# * RDMA: dummy0 carries 198.18.0.1/32 (a benchmarking range: never routed anywhere), rxe0
#   sits on dummy0, and COMMAND starts only once GID index 1 (::ffff:198.18.0.1, RoCE v2) is
#   populated. Every process of the guest shares rxe0: one rxe device = one "host".
#   rdma_cm needs 198.18.0.1 (RoCE refuses loopback addresses); raw verbs with out-of-band
#   TCP over 127.0.0.1 work too.
# * I/O: the guest has no NIC, so no packet leaves it. COMMAND's stdout+stderr (merged) go
#   to a second serial port that QEMU writes to our stdout (~150 KB/s: keep logs small or
#   write them into HOSTDIR); its exit status comes back as a marker line on the kernel
#   console, which goes to a file.
# * Cache: $RDMA_VM_CACHE/img-v<N>-<kernel>/{kernel,initrd,info} (~70 MB), built once under
#   an exclusive flock; a running VM holds a shared lock so that a concurrent rebuild waits
#   and concurrent runs share the image. Images of other script versions are removed when a
#   new one is built. The cache is not the one of tools/rdma-vm (its /init differs).
# * Acceleration: TCG (pure emulation) by default. The dev/CI machine's /dev/kvm is a PVM
#   nested hypervisor that cannot run a stock kernel (it dies in cmpxchg16b/xrstor), so kvm
#   is opt-in for machines with real VMX/SVM. Under TCG guest code runs 10-50x slower than
#   native and rxe moves ~15-25 MB/s: this is a functional test bed, not a benchmark.
#
# Environment knobs (all optional):
#   RDMA_VM_CACHE    cache folder for kernel + initramfs        (/var/cache/ringcomm-rdma-vm)
#   RDMA_VM_TIMEOUT  seconds before the VM is killed (exit 124)                        (900)
#   RDMA_VM_BOOT_WAIT  seconds for the guest to report its set-up (done or failed) on the
#                    console; a guest that says nothing by then is booted once more     (120)
#   RDMA_VM_MEM      guest memory in MiB                                               (2048)
#   RDMA_VM_SMP      guest vCPUs (1 makes polling processes starve each other)            (2)
#   RDMA_VM_ACCEL    tcg | kvm (kvm only where /dev/kvm is real VMX/SVM)               (tcg)
#   RDMA_VM_NETDEV   dummy | lo (lo: rxe0 on lo, GID 1 = ::ffff:127.0.0.1, raw verbs
#                    only, no rdma_cm)                                               (dummy)
#   RDMA_VM_MTU      MTU of dummy0 under rxe0, set before COMMAND runs; rxe follows it:
#                    1500 gives a RoCE path MTU of 1024, 4200 or more gives 4096, what RoCE
#                    fabrics with jumbo frames run. Empty: dummy0's own 1500              ()
#   RDMA_VM_PASSENV  space-separated names of host environment variables to export in the
#                    guest (PATH, HOME=/root, LANG=C.UTF-8 and RDMA_VM=1 are always set)
#   RDMA_VM_KERNEL_PKG  Debian kernel package to boot (default: linux-image-amd64's)
#   RDMA_VM_APPEND   extra guest kernel command-line arguments ("rdmavm.debug" timestamps
#                    every insmod)
#   RDMA_VM_VERBOSE=1   print the guest console (kernel log) afterwards
#   RDMA_VM_QUIET=1     no progress messages from this script
#   RDMA_VM_REBUILD=1   rebuild the cached kernel/initramfs (e.g. after a kernel ABI bump)
#   RDMA_VM_NO_INSTALL=1  never apt-get install missing host packages (fail instead)
#
# Needs: Debian 12 x86_64, root (the 9p export of / and apt-get), Debian's mirror the first
# time. Missing host packages are installed with apt-get: qemu-system-x86 cpio kmod
# util-linux xz-utils iproute2 ibverbs-utils ibverbs-providers perftest.
#
# Exit status: COMMAND's own (128+signal if it was killed); 124 the VM hit RDMA_VM_TIMEOUT;
# 125 the image, the VM or the rxe setup failed before COMMAND ran (the reason and the
# guest console's tail go to stderr); 130 interrupted; 2 usage.
set -euo pipefail

SELF_VERSION=1            # bump when the guest /init or the module set changes
CACHE=${RDMA_VM_CACHE:-/var/cache/ringcomm-rdma-vm}
TIMEOUT=${RDMA_VM_TIMEOUT:-900}
MEM=${RDMA_VM_MEM:-2048}
SMP=${RDMA_VM_SMP:-2}
ACCEL=${RDMA_VM_ACCEL:-tcg}
NETDEV=${RDMA_VM_NETDEV:-dummy}

# Loaded at boot, in this order, with their dependencies:
GUEST_MODULES="virtio_pci 9pnet_virtio 9p overlay crc32_generic
  rdma_rxe ib_uverbs rdma_ucm"
# Only copied into the guest, for modprobe or the kernel's autoloading:
GUEST_MODULES_EXTRA="dummy veth ib_umad crc32c_generic crc32-pclmul"

die() { echo "run-in-vm: $*" >&2; exit 125; }
log() { [ "${RDMA_VM_QUIET:-0}" = 1 ] || echo "run-in-vm: $*" >&2; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed -e 's/^# \{0,1\}//' -e '/^set -euo/d' >&2
  exit 2
}

[ "${1:-}" = "--" ] && shift
case "${1:-}" in -h|--help|"") usage ;; esac
[ $# -ge 2 ] || usage
[ -d "$1" ] || die "no such directory: $1"
HOSTDIR=$(cd "$1" && pwd -P)
[ "$HOSTDIR" != / ] || die "HOSTDIR must not be / (the host root is already visible read-only)"
shift
case $NETDEV in lo|dummy) ;; *) die "RDMA_VM_NETDEV must be lo or dummy" ;; esac
MTU=${RDMA_VM_MTU:-}
if [ -n "$MTU" ]; then
  if ! [[ $MTU =~ ^[0-9]+$ ]] || [ "$MTU" -lt 1280 ] || [ "$MTU" -gt 65535 ]; then
    die "RDMA_VM_MTU must be a number of bytes, 1280-65535"
  fi
  [ "$NETDEV" = dummy ] || die "RDMA_VM_MTU applies to RDMA_VM_NETDEV=dummy (lo runs at 65536)"
fi
# shellcheck disable=SC2054
case $ACCEL in
  tcg) accel=(-accel tcg,thread=multi -cpu max) ;;
  kvm) [ -w /dev/kvm ] || die "RDMA_VM_ACCEL=kvm but /dev/kvm is not usable"
       accel=(-accel kvm -cpu host) ;;
  *) die "RDMA_VM_ACCEL must be tcg or kvm" ;;
esac

[ "$(id -u)" = 0 ] || die "must run as root (9p export of / and apt-get)"

# ---------------------------------------------------------------- host packages
need_pkgs=()
chk() {
  command -v "$1" >/dev/null 2>&1 && return 0
  case " ${need_pkgs[*]-} " in *" $2 "*) ;; *) need_pkgs+=("$2") ;; esac
}
chk qemu-system-x86_64 qemu-system-x86
chk cpio cpio
chk depmod kmod
chk modprobe kmod
chk flock util-linux
chk xz xz-utils
chk ibv_devinfo ibverbs-utils
chk rdma iproute2
chk ib_write_bw perftest
# librxe is what makes rxe0 visible to libibverbs in the guest (it runs the host's copy).
compgen -G '/usr/lib/*/libibverbs/librxe-*.so' >/dev/null || need_pkgs+=(ibverbs-providers)
if [ ${#need_pkgs[@]} -gt 0 ]; then
  [ "${RDMA_VM_NO_INSTALL:-0}" = 1 ] && die "missing host packages: ${need_pkgs[*]}"
  log "installing host packages: ${need_pkgs[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt_i=(apt-get -o DPkg::Lock::Timeout=300 install -y -q --no-install-recommends)
  # Try without `apt-get update` first: a fresh package list is only needed when the
  # cached one is stale, and the update is the slow, network-bound part.
  "${apt_i[@]}" "${need_pkgs[@]}" >/dev/null 2>&1 ||
    { apt-get -o DPkg::Lock::Timeout=300 update -q >/dev/null 2>&1 || true
      "${apt_i[@]}" "${need_pkgs[@]}" >&2 ||
        die "apt-get install ${need_pkgs[*]} failed"; }
fi

# ---------------------------------------------------------------- guest image
apt_download() { # pkg destdir
  ( cd "$2" && apt-get download -q "$1" >/dev/null 2>&1 ) && return 0
  apt-get update -q >/dev/null 2>&1 || true
  ( cd "$2" && apt-get download -q "$1" >&2 )
}

kernel_pkg() {
  if [ -n "${RDMA_VM_KERNEL_PKG:-}" ]; then echo "$RDMA_VM_KERNEL_PKG"; return; fi
  local p
  p=$(apt-cache depends linux-image-amd64 2>/dev/null |
      awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  if [ -z "$p" ]; then
    apt-get update -q >/dev/null 2>&1 || true
    p=$(apt-cache depends linux-image-amd64 2>/dev/null |
        awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  fi
  [ -n "$p" ] || die "cannot resolve linux-image-amd64 (apt-get update failed?)"
  echo "$p"
}

# The guest's /init (busybox sh, PID 1). @KVER@ is substituted at build time. Per-run
# settings arrive in /etc/rdma-vm/{config,cmd.sh}, in a second cpio archive appended by the
# host side, so that the cached image never changes between runs.
guest_init() {
cat <<'INIT'
#!/bin/busybox sh
/bin/busybox mkdir -p /proc /sys /dev /tmp /sbin /usr/bin /usr/sbin /mnt/lower /mnt/rw /newroot
/bin/busybox --install -s
export PATH=/sbin:/bin:/usr/sbin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
KVER=@KVER@
mark() { echo "<5>rdma-vm-init: $*" > /dev/kmsg; }
# The host looks for this line to tell a broken bed (exit 125) from a failing COMMAND.
fail() {
  echo "RDMA_VM_SETUP_FAILED: $*"
  poweroff -f; sleep 30
}
DEBUG=; case " $(cat /proc/cmdline) " in *" rdmavm.debug "*) DEBUG=1 ;; esac
mark start
. /etc/rdma-vm/config || fail "no /etc/rdma-vm/config"
for m in $(cat /etc/rdma-vm/modules); do
  insmod "/lib/modules/$KVER/$m" || echo "rdma-vm-init: insmod $m failed"
  [ -z "$DEBUG" ] || mark "insmod $m"
done
mark modules loaded
# msize: 9p's default (8 KiB) makes reading the host's binaries and libraries crawl.
O=trans=virtio,version=9p2000.L,msize=512000
mount -t 9p -o $O,ro,cache=loose hostroot /mnt/lower 2>/tmp/err ||
  fail "mount 9p hostroot: $(cat /tmp/err)"
mount -t tmpfs -o mode=0755 tmpfs /mnt/rw
mkdir -p /mnt/rw/upper /mnt/rw/work
mount -t overlay overlay -o lowerdir=/mnt/lower,upperdir=/mnt/rw/upper,workdir=/mnt/rw/work /newroot 2>/tmp/err ||
  fail "mount overlay: $(cat /tmp/err)"
R=/newroot
mount -t proc proc $R/proc
mount -t sysfs sysfs $R/sys
mount -t devtmpfs devtmpfs $R/dev
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts $R/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm
mount -t tmpfs -o mode=1777 tmpfs $R/tmp
mount -t tmpfs -o mode=0755 tmpfs $R/run
mkdir -p $R/run/rdma-vm $R/lib/modules/$KVER
cp /etc/rdma-vm/cmd.sh $R/run/rdma-vm/cmd.sh
# The host's /lib/modules belongs to the host's kernel; modprobe in the guest needs ours.
mount --bind /lib/modules/$KVER $R/lib/modules/$KVER
mkdir -p "$R$SHARE"
mount -t 9p -o $O share "$R$SHARE" 2>/tmp/err || fail "mount 9p share $SHARE: $(cat /tmp/err)"
mark mounts done
hostname rdma-vm
ip link set lo up
if [ "$NETDEV" = dummy ]; then
  { modprobe dummy numdummies=0 && ip link add dummy0 type dummy && ip link set dummy0 up &&
    ip addr add 198.18.0.1/32 dev dummy0; } 2>/tmp/err || fail "dummy0 setup: $(cat /tmp/err)"
  RXE_DEV=dummy0
else
  RXE_DEV=lo
fi
# busybox has no rdma(8): the host's iproute2 one runs inside the new root.
chroot $R rdma link add rxe0 type rxe netdev $RXE_DEV > /tmp/err 2>&1 ||
  fail "rdma link add rxe0 type rxe netdev $RXE_DEV: $(cat /tmp/err)"
mark rxe added
# rxe fills the IPv4-mapped GID (index 1) asynchronously; a test started before that sees
# only the link-local GID 0 and fails to connect.
G=$R/sys/class/infiniband/rxe0/ports/1/gids/1
i=0
while [ $i -lt 100 ]; do
  case $(cat $G 2>/dev/null) in ""|0000:0000:0000:0000:0000:0000:0000:0000) ;; *) break ;; esac
  sleep 0.05; i=$((i+1))
done
[ $i -lt 100 ] || fail "rxe0 GID 1 never appeared"
mark rxe up
stty -F /dev/ttyS1 raw -echo 2>/dev/null
echo "RDMA_VM_RUNNING"
chroot $R /bin/bash /run/rdma-vm/cmd.sh < /dev/null > /dev/ttyS1 2>&1
rc=$?
# stty applies its settings with TCSADRAIN, i.e. it waits until ttyS1 has drained: without
# it the tail of COMMAND's output is lost at poweroff.
stty -F /dev/ttyS1 raw -echo 2>/dev/null
mark "command exited $rc"
echo "RDMA_VM_EXIT=$rc"
sync
poweroff -f
sleep 30
INIT
}

modlist() { # kroot kver modules... -> module paths (relative), deps first
  local kroot=$1 kver=$2 m line p; shift 2
  for m in "$@"; do
    while read -r line; do
      case $line in
        insmod\ *) p=${line#insmod }; p=${p%% *}; echo "${p#"$kroot/lib/modules/$kver/"}" ;;
      esac
    done < <(modprobe -d "$kroot" -S "$kver" --show-depends "$m" 2>/dev/null ||
             echo "MISSING $m")
  done | awk '!seen[$0]++'
}

# shellcheck disable=SC2012  # ls on names of Debian packages and kernel versions: no odd characters
build_image() { # dest
  local dest=$1 tmp pkg kver ir m
  tmp=$(mktemp -d "$CACHE/build.XXXXXX")
  chmod 755 "$tmp"
  pkg=$(kernel_pkg)
  log "building guest image from $pkg (one-off, about 30 s)"
  apt_download "$pkg" "$tmp" || die "apt-get download $pkg failed"
  apt_download busybox-static "$tmp" || die "apt-get download busybox-static failed"
  dpkg-deb -x "$(ls "$tmp"/linux-image-*.deb | head -1)" "$tmp/k"
  dpkg-deb -x "$(ls "$tmp"/busybox-static_*.deb | head -1)" "$tmp/bb"
  kver=$(ls "$tmp/k/lib/modules" | head -1)
  depmod -b "$tmp/k" "$kver"
  ir=$tmp/initramfs
  mkdir -p "$ir/bin" "$ir/etc/rdma-vm" "$ir/lib/modules/$kver"
  cp "$tmp/bb/bin/busybox" "$ir/bin/busybox"
  # shellcheck disable=SC2086
  modlist "$tmp/k" "$kver" $GUEST_MODULES > "$ir/etc/rdma-vm/modules"
  if grep MISSING "$ir/etc/rdma-vm/modules" >&2; then die "modules missing from $pkg"; fi
  # shellcheck disable=SC2086
  for m in $(cat "$ir/etc/rdma-vm/modules"; modlist "$tmp/k" "$kver" $GUEST_MODULES_EXTRA | grep -v MISSING); do
    mkdir -p "$ir/lib/modules/$kver/$(dirname "$m")"
    cp "$tmp/k/lib/modules/$kver/$m" "$ir/lib/modules/$kver/$m"
  done
  cp "$tmp/k/lib/modules/$kver"/modules.{builtin,builtin.modinfo,order} "$ir/lib/modules/$kver/"
  depmod -b "$ir" "$kver"
  guest_init | sed "s/@KVER@/$kver/" > "$ir/init"
  chmod 755 "$ir/init"
  # Uncompressed: the kernel unpacks a plain cpio much faster under TCG than a gzipped one.
  ( cd "$ir" && find . | LC_ALL=C sort | cpio -o -H newc --quiet ) > "$tmp/initrd.cpio"
  # Boot the uncompressed vmlinux through its PVH entry: skips the in-guest xz
  # decompression (~5 s under TCG). Fallback: the bzImage as shipped.
  local vmlinuz=$tmp/k/boot/vmlinuz-$kver off
  off=$(LC_ALL=C grep -obUaP '\xfd\x37\x7a\x58\x5a\x00' "$vmlinuz" 2>/dev/null | head -n 1 | cut -d: -f1)
  if [ -n "$off" ] && command -v xz >/dev/null &&
     ( set +o pipefail   # tail gets SIGPIPE when xz stops after the stream
       tail -c +$((off + 1)) "$vmlinuz" | xz -dc --single-stream > "$tmp/vmlinux" 2>/dev/null ) &&
     [ "$(head -c 4 "$tmp/vmlinux" | od -An -tx1 | tr -d ' ')" = 7f454c46 ]; then
    :
  else
    log "could not unpack vmlinux, booting the compressed kernel (slower)"
    cp "$vmlinuz" "$tmp/vmlinux"
  fi
  rm -rf "$dest.new"; mkdir -p "$dest.new"
  mv "$tmp/vmlinux" "$dest.new/kernel"
  mv "$tmp/initrd.cpio" "$dest.new/initrd"
  echo "$pkg $kver" > "$dest.new/info"
  rm -rf "$dest"; mv "$dest.new" "$dest"
  # Images of older versions of this script are dead weight; we hold the exclusive lock, so
  # no VM is using them.
  for m in "$CACHE"/img-v*; do
    case ${m##*/} in "img-v$SELF_VERSION-"*) ;; *) rm -rf "$m" ;; esac
  done
  rm -rf "$tmp"
  log "guest image cached in $dest"
}

mkdir -p "$CACHE"
exec 9>"$CACHE/.lock"
IMG=$CACHE/img-v$SELF_VERSION-${RDMA_VM_KERNEL_PKG:-default}
flock 9
if [ "${RDMA_VM_REBUILD:-0}" = 1 ] || [ ! -s "$IMG/kernel" ] || [ ! -s "$IMG/initrd" ]; then
  build_image "$IMG"
fi
# Downgrade to a shared lock while the VM runs: concurrent runs share the image, and a
# rebuild waits until none uses it.
flock -s 9

# ---------------------------------------------------------------- run
CTL=$(mktemp -d "${TMPDIR:-/tmp}/rdma-vm.XXXXXX")
QPID=
# shellcheck disable=SC2317  # called by the trap
cleanup() { if [ -n "$QPID" ]; then kill "$QPID" 2>/dev/null || true; fi; rm -rf "$CTL"; }
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

q() { printf '%q' "$1"; }
mkdir -p "$CTL/rd/etc/rdma-vm"
{
  echo "SHARE=$(q "$HOSTDIR")"
  echo "NETDEV=$(q "$NETDEV")"
} > "$CTL/rd/etc/rdma-vm/config"
{
  echo 'export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin'
  echo 'export HOME=/root LANG=C.UTF-8 TERM=dumb RDMA_VM=1'
  for v in ${RDMA_VM_PASSENV:-}; do
    if [ -n "${!v+x}" ]; then echo "export $v=$(q "${!v}")"; fi
  done
  echo 'ulimit -l unlimited 2>/dev/null'
  # Here rather than in /init, so that the cached image stays as it is: rxe0 takes the new
  # MTU from the netdev notifier (ibv_devinfo's active_mtu shows it at once).
  if [ -n "$MTU" ]; then
    echo "ip link set dummy0 mtu $MTU || { echo 'run-in-vm: ip link set dummy0 mtu $MTU failed' >&2; exit 125; }"
  fi
  echo "cd $(q "$HOSTDIR") || exit 125"
  printf 'exec'; printf ' %q' "$@"; echo
} > "$CTL/rd/etc/rdma-vm/cmd.sh"
( cd "$CTL/rd" && find . | cpio -o -H newc --quiet ) > "$CTL/run.cpio"
cat "$IMG/initrd" "$CTL/run.cpio" > "$CTL/initrd"

qopt() { printf '%s' "${1//,/,,}"; }   # QEMU option values escape commas by doubling them

# A parent-death signal at both hops (us -> timeout -> qemu): even when this script is
# SIGKILLed (a CI job cancelled hard), QEMU goes with it instead of running on for up to
# RDMA_VM_TIMEOUT seconds on the same two cores as the next job.
pdeath=()
setpriv --pdeathsig KILL true 2>/dev/null && pdeath=(setpriv --pdeathsig KILL)
# One boot in about 50 that day (2026-11-26, under TCG) hung before /init wrote anything and
# would have sat out RDMA_VM_TIMEOUT: a guest that has not reported its set-up (RDMA_VM_RUNNING
# or RDMA_VM_SETUP_FAILED, 3-20 s on a loaded 2-core host) within BOOT_WAIT is killed and
# booted once more.
BOOT_WAIT=${RDMA_VM_BOOT_WAIT:-120}
reported() { grep -qE 'RDMA_VM_(RUNNING|SETUP_FAILED)' "$CTL/console.log" 2>/dev/null; }
set +e
for attempt in 1 2; do
  : > "$CTL/console.log"
  "${pdeath[@]}" timeout -k 10 "$TIMEOUT" "${pdeath[@]}" qemu-system-x86_64 \
    "${accel[@]}" -smp "$SMP" -m "$MEM" -M pc \
    -nodefaults -no-user-config -display none -vga none -no-reboot \
    -chardev "file,id=con,path=$(qopt "$CTL/console.log")" -device isa-serial,chardev=con \
    -chardev stdio,id=out,signal=off -device isa-serial,chardev=out \
    -fsdev local,id=fs0,path=/,security_model=none,multidevs=remap,readonly=on \
    -device virtio-9p-pci,fsdev=fs0,mount_tag=hostroot \
    -fsdev "local,id=fs1,path=$(qopt "$HOSTDIR"),security_model=none,multidevs=remap" \
    -device virtio-9p-pci,fsdev=fs1,mount_tag=share \
    -kernel "$IMG/kernel" -initrd "$CTL/initrd" \
    -append "console=ttyS0 panic=-1 loglevel=4 mitigations=off nokaslr tsc=reliable cryptomgr.notests rdinit=/init ${RDMA_VM_APPEND:-}" \
    < /dev/null &
  QPID=$!
  waited=0
  while kill -0 "$QPID" 2>/dev/null && [ "$waited" -lt "$BOOT_WAIT" ] && ! reported; do
    sleep 1
    waited=$((waited + 1))
  done
  if kill -0 "$QPID" 2>/dev/null && ! reported; then
    kill "$QPID" 2>/dev/null
    wait "$QPID"
    QPID=
    qrc=124
    if [ "$attempt" = 1 ]; then
      log "the guest reported nothing in ${BOOT_WAIT}s (a hung boot): booting it again"
      continue
    fi
    hung=1
    break
  fi
  wait "$QPID"
  qrc=$?
  QPID=
  break
done
set -e

if [ "${RDMA_VM_VERBOSE:-0}" = 1 ]; then
  echo "----- guest console -----" >&2; tr -d '\r' < "$CTL/console.log" >&2
fi
if [ -n "${hung:-}" ]; then
  echo "run-in-vm: the guest reported nothing in ${BOOT_WAIT}s, twice (hung boots); console:" >&2
  tail -n 20 "$CTL/console.log" | tr -d '\r' >&2 || true
  exit 124
fi
if [ "$qrc" = 124 ] || [ "$qrc" = 137 ]; then
  echo "run-in-vm: VM timed out after ${TIMEOUT}s; guest console tail:" >&2
  tail -n 20 "$CTL/console.log" | tr -d '\r' >&2 || true
  exit 124
fi
rc=$(tr -d '\r' < "$CTL/console.log" | sed -n 's/.*RDMA_VM_EXIT=\([0-9][0-9]*\).*/\1/p' | tail -n 1)
if [ -n "$rc" ]; then
  exit "$rc"
fi
err=$(tr -d '\r' < "$CTL/console.log" | sed -n 's/^RDMA_VM_SETUP_FAILED: //p' | tail -n 1)
echo "run-in-vm: guest did not run the command (qemu exit $qrc)${err:+: $err}" >&2
echo "run-in-vm: guest console tail:" >&2
tail -n 30 "$CTL/console.log" | tr -d '\r' >&2 || true
exit 125
