#!/bin/sh
# `meson install` of this build into a scratch folder, then examples/consumer, a project of its own,
# built against it through xgrad.pc (pkg-config) and run: headers, libxgrad, tool and xgrad.pc all
# installed. The consumer is compiled with the flags libxgrad was built with (CXXFLAGS: its SIMD
# level), so it must use the library's compiled code.
# With MPI (WITH_MPI = mpi), xgrad-dist.pc must be installed too: examples/data_parallel.cpp is
# built with it alone and run under 2 ranks (a program built without XGRAD_HAVE_MPI refuses mpirun).
#   check_install.sh BUILD_DIR SOURCE_DIR "CXXFLAGS" WITH_MPI
set -eu
build=$1
src=$2
cxxflags=$3
with_mpi=$4
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
meson install -C "$build" --destdir "$dir/root" --no-rebuild --quiet > "$dir/install.log"
pc=$(find "$dir/root" -name xgrad.pc)
[ -n "$pc" ] || { echo "xgrad.pc was not installed"; exit 1; }
[ -n "$(find "$dir/root" -path '*/include/xgrad/nn/attention.hpp')" ] || { echo "headers not installed"; exit 1; }
[ -n "$(find "$dir/root" -path '*/bin/xgrad' -type f)" ] || { echo "the xgrad tool was not installed"; exit 1; }
[ -n "$(find "$dir/root" -name libxgrad.a)" ] || { echo "libxgrad was not installed"; exit 1; }
# xgrad.pc is relocatable (its prefix follows its folder), so the scratch install is found as it is.
export PKG_CONFIG_PATH="$(dirname "$pc")"
echo "pkg-config --cflags --libs xgrad: $(pkg-config --cflags --libs xgrad)"
meson setup "$dir/consumer" "$src/examples/consumer" -Dcpp_args="$cxxflags" > "$dir/setup.log" ||
    { cat "$dir/setup.log"; exit 1; }
meson compile -C "$dir/consumer" > "$dir/compile.log" || { cat "$dir/compile.log"; exit 1; }
status=0; "$dir/consumer/consumer" > "$dir/run.log" || status=$?
cat "$dir/run.log"
[ "$status" -eq 0 ] || exit "$status"
grep -q "compiled code: used" "$dir/run.log" || { echo "the consumer compiled what libxgrad holds"; exit 1; }
[ "$with_mpi" = mpi ] || exit 0
[ -f "$(dirname "$pc")/xgrad-dist.pc" ] || { echo "xgrad-dist.pc was not installed"; exit 1; }
echo "pkg-config --cflags --libs xgrad-dist: $(pkg-config --cflags --libs xgrad-dist)"
# shellcheck disable=SC2046,SC2086  # pkg-config's and the build's flags are word lists
c++ $cxxflags "$src/examples/data_parallel.cpp" -o "$dir/data_parallel" $(pkg-config --cflags --libs xgrad-dist) \
    > "$dir/dist-compile.log" 2>&1 || { cat "$dir/dist-compile.log"; exit 1; }
"$src/tests/dist/mpirun.sh" --timeout 120 -np 2 "$dir/data_parallel" > "$dir/dist-run.log" 2>&1 ||
    { cat "$dir/dist-run.log"; exit 1; }
tail -n 1 "$dir/dist-run.log"
