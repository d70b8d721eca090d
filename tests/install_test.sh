#!/usr/bin/env bash
# Installs ringcomm into a temporary DESTDIR and builds the examples against that copy only, as
# a user would: headers and flags from pkg-config, the shared library (SONAME and exported
# symbols checked), the C++ example, and a static link. Each program then runs 4 ranks under
# the installed ringrun. DEFAULT_LIBRARY (meson's default_library, both unless given) says
# which of the shared library and the archive must be installed, and the other must not be.
#   install_test.sh MESON BUILDDIR SOURCEDIR B_SANITIZE [DEFAULT_LIBRARY]
# Exit 77 (skip) with the reason on stdout when the test cannot mean anything here.
set -euo pipefail

meson=$1 builddir=$2 srcdir=$3 sanitize=${4:-none} kind=${5:-both}

skip() { echo "SKIP: $*"; exit 77; }
die() { echo "FAIL: $*" >&2; exit 1; }

# An ASan/UBSan/TSan library needs its runtime loaded first and the program instrumented to
# match; a plain `cc $(pkg-config ...)` build, which is what this test is about, cannot link it.
[ "$sanitize" = none ] || skip "sanitized build (b_sanitize=$sanitize): an uninstrumented program cannot link the installed library"
command -v pkg-config >/dev/null || skip "pkg-config not found"
CC=${CC:-cc}
CXX=${CXX:-c++}
command -v "$CC" >/dev/null || skip "C compiler '$CC' not found"
command -v "$CXX" >/dev/null || skip "C++ compiler '$CXX' not found"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ringcomm-install.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
dest=$tmp/dest

# DESTDIR leaves the build directory's configuration (prefix included) untouched.
DESTDIR=$dest "$meson" install -C "$builddir" --no-rebuild --quiet >"$tmp/install.log" 2>&1 ||
    { cat "$tmp/install.log" >&2; die "meson install failed"; }

find_one() { # find_one DESC find-args...: exactly one match, or fail
    local desc=$1 hits
    shift
    hits=$(find "$dest" "$@")
    [ -n "$hits" ] || die "not installed: $desc"
    [ "$(printf '%s\n' "$hits" | wc -l)" -eq 1 ] || die "more than one $desc installed: $hits"
    printf '%s\n' "$hits"
}
header=$(find_one ringcomm.h -name ringcomm.h -path '*/include/*')
pc=$(find_one ringcomm.pc -name ringcomm.pc -path '*/pkgconfig/*')
so="" static=""
if [ "$kind" != static ]; then
    so=$(find_one libringcomm.so.0 -name libringcomm.so.0)
    libdir=$(dirname "$so")
else
    [ -z "$(find "$dest" -name 'libringcomm.so*')" ] || die "default_library=static installed a shared library"
fi
if [ "$kind" != shared ]; then
    static=$(find_one libringcomm.a -name libringcomm.a)
    libdir=$(dirname "$static")
else
    [ -z "$(find "$dest" -name libringcomm.a)" ] || die "default_library=shared installed libringcomm.a"
fi
ringrun=$(find_one ringrun -name ringrun -path '*/bin/*')
find_one ring_perf -name ring_perf -path '*/bin/*' >/dev/null
echo "installed ($kind): $header $pc ${so:-(no shared library)} ${static:-(no archive)} $ringrun"
if [ -n "$so" ]; then
    soname=$(readelf -d "$so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    [ "$soname" = libringcomm.so.0 ] || die "SONAME of $so is '$soname', expected libringcomm.so.0"
    # The version script must keep internals (ring__*) and everything else out of the ABI; its
    # version nodes (RINGCOMM_0, RINGCOMM_0.2: absolute symbols) are the only other names allowed.
    leaked=$(nm -D --defined-only "$so" | awk '$2 != "A" {print $NF}' | grep -v '^ring_[a-z]' || true)
    [ -z "$leaked" ] || die "symbols exported beside ring_*: $leaked"
    nm -D --defined-only "$so" | awk '{print $NF}' | grep -q '^ring_[a-z]' || die "no ring_* symbol exported"
    # A symbol added after 0.1 sits in its own node, so that a program needing it fails to load
    # against an older library, with the node's name, instead of at its first call.
    nm -D --defined-only "$so" | grep -q ' ring_config_init_sized@@RINGCOMM_0.2$' ||
        die "ring_config_init_sized is not in the RINGCOMM_0.2 node: $(nm -D --defined-only "$so" | grep config_init)"
fi

# The .pc file says prefix=/usr/local (the real prefix), while the files sit under DESTDIR.
# PKG_CONFIG_SYSROOT_DIR prefixes -I/-L paths with DESTDIR, which is exactly the staging
# relation; --define-prefix would guess the prefix from the .pc location and gets it wrong for
# multiarch libdirs (lib/x86_64-linux-gnu/pkgconfig is three levels below the prefix).
# PKG_CONFIG_LIBDIR instead of _PATH: a ringcomm installed on this machine must not answer.
# The system's own directories follow the staging one: the static library's private
# requirements (hwloc when built with it) are system packages.
syspc=$(pkg-config --variable pc_path pkg-config 2>/dev/null || true)
pkgconf() { PKG_CONFIG_LIBDIR=$(dirname "$pc")${syspc:+:$syspc} PKG_CONFIG_SYSROOT_DIR=$dest pkg-config "$@"; }
pkgconf --exists ringcomm || die "pkg-config does not find ringcomm in $(dirname "$pc")"
[ "$(pkgconf --modversion ringcomm)" = "$(sed -n "s/^ *version *: *'\([^']*\)'.*/\1/p" "$srcdir/meson.build" | head -n1)" ] ||
    die "pkg-config version $(pkgconf --modversion ringcomm) differs from meson.build's"
read -r -a cflags <<<"$(pkgconf --cflags ringcomm)"
read -r -a libs <<<"$(pkgconf --libs ringcomm)"
read -r -a static_libs <<<"$(pkgconf --static --libs ringcomm)"
echo "pkg-config: cflags ${cflags[*]}; libs ${libs[*]}; static ${static_libs[*]}"

warn=(-Wall -Wextra -Werror)
if [ -n "$so" ]; then
    "$CC" -std=c11 "${warn[@]}" "${cflags[@]}" "$srcdir/examples/allreduce.c" -o "$tmp/allreduce" "${libs[@]}"
    "$CXX" -std=c++17 "${warn[@]}" "${cflags[@]}" "$srcdir/examples/allreduce.cpp" -o "$tmp/allreduce_cpp" "${libs[@]}"
    # Strict C11 with the plain shared flags, as a user would build it (the static line below
    # gets -pthread, which hid a missing POSIX feature macro).
    "$CC" -std=c11 "${warn[@]}" "${cflags[@]}" "$srcdir/examples/async_overlap.c" -o "$tmp/async_overlap" "${libs[@]}"
    readelf -d "$tmp/allreduce" | grep -q 'NEEDED.*\[libringcomm\.so\.0\]' || die "allreduce does not need libringcomm.so.0"
fi
if [ -n "$static" ]; then
    # Static: the archive for ringcomm only (libc stays shared; a fully static glibc program
    # has no working getaddrinfo), plus Libs.private, which must carry what the archive needs.
    link_static=()
    for f in "${static_libs[@]}"; do
        if [ "$f" = -lringcomm ]; then link_static+=(-Wl,-Bstatic -lringcomm -Wl,-Bdynamic); else link_static+=("$f"); fi
    done
    "$CC" -std=c11 "${warn[@]}" "${cflags[@]}" "$srcdir/examples/async_overlap.c" -o "$tmp/async_overlap_static" \
        "${link_static[@]}" || die "static link with 'pkg-config --static --libs' failed"
    if readelf -d "$tmp/async_overlap_static" | grep -q 'NEEDED.*libringcomm'; then
        die "async_overlap_static still needs the shared libringcomm"
    fi
fi

run() { # run LD_LIBRARY_PATH PROGRAM ARGS...
    local llp=$1
    shift
    echo "+ ringrun -n 4 $*"
    LD_LIBRARY_PATH=$llp "$ringrun" -n 4 --timeout 120 "$@"
}
# LD_LIBRARY_PATH=$libdir: the installed library, not the build tree's (the build-tree rpath
# is not in these programs; they were linked by hand above).
if [ -n "$so" ]; then
    run "$libdir" "$tmp/allreduce"
    run "$libdir" "$tmp/allreduce_cpp"
fi
# No library path at all: the static program must not need one.
[ -z "$static" ] || run "" "$tmp/async_overlap_static" 262144
echo "install test passed"
