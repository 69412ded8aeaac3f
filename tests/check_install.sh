#!/bin/sh
# `meson install` of this build into a scratch folder, then examples/consumer, a project of its own,
# built against it as a user's would be, with nothing but what the package gives (and -Wall
# -Wextra -Werror: xgrad's headers add no warning to a user's program), and run:
#   - with meson, through xgrad.pc (pkg-config);
#   - with CMake, through find_package(xgrad CONFIG) and xgrad::xgrad (and xgrad::dist);
#   - and with each, once more with xgrad/pch.hpp precompiled (it must be used, and warn of nothing).
# The consumer must use libxgrad's compiled code (the package gives libxgrad's SIMD level).
# With MPI (WITH_MPI = mpi), xgrad-dist.pc must be installed too: examples/data_parallel.cpp is
# built with it alone and run under 2 ranks (a program built without XGRAD_HAVE_MPI refuses mpirun);
# the CMake consumer builds it with xgrad::dist.
#   check_install.sh BUILD_DIR SOURCE_DIR WITH_MPI
set -eu
build=$1
src=$2
with_mpi=$3
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
meson install -C "$build" --destdir "$dir/root" --no-rebuild --quiet > "$dir/install.log"
pc=$(find "$dir/root" -name xgrad.pc)
[ -n "$pc" ] || { echo "xgrad.pc was not installed"; exit 1; }
[ -n "$(find "$dir/root" -path '*/include/xgrad/nn/multihead_attention.hpp')" ] || { echo "headers not installed"; exit 1; }
[ -n "$(find "$dir/root" -path '*/bin/xgrad' -type f)" ] || { echo "the xgrad tool was not installed"; exit 1; }
[ -n "$(find "$dir/root" -name libxgrad.a)" ] || { echo "libxgrad was not installed"; exit 1; }
config=$(find "$dir/root" -name xgradConfig.cmake)
[ -n "$config" ] || { echo "xgradConfig.cmake was not installed"; exit 1; }
[ -n "$(find "$dir/root" -name xgradConfigVersion.cmake)" ] || { echo "xgradConfigVersion.cmake was not installed"; exit 1; }
# Both are relocatable (their prefix follows their folder), so the scratch install is found as it is.
export PKG_CONFIG_PATH="$(dirname "$pc")"
prefix=$(cd "$(dirname "$pc")/../../.." && pwd)
[ -d "$prefix/include/xgrad" ] || prefix=$(cd "$(dirname "$pc")/../.." && pwd)
echo "pkg-config --cflags --libs xgrad: $(pkg-config --cflags --libs xgrad)"

# The unit of the target named $2 in build folder $1, parsed again with -H (and -fsyntax-only: the
# parse is what tells): g++ marks a header it read from a precompiled .gch with '!'. Fails when it read
# none (a precompiled header that something before it voided is skipped silently).
pch_used() {
  "$src/tests/unit_command.py" "$1" "$2" -H -fsyntax-only > "$dir/pch.log" 2>&1 || { cat "$dir/pch.log"; exit 1; }
  grep -q '^! .*\.gch$' "$dir/pch.log" || { echo "$2 did not use its precompiled header"; exit 1; }
}

# The program's output: the consumer's first and last loss, and that libxgrad's code was used.
run() {
  status=0; "$1" > "$dir/run.log" || status=$?
  cat "$dir/run.log"
  [ "$status" -eq 0 ] || { echo "$1 failed"; exit "$status"; }
}

meson setup "$dir/meson" "$src/examples/consumer" -Dwerror=true > "$dir/setup.log" || { cat "$dir/setup.log"; exit 1; }
# all_modules_pch stands for all_modules, as with CMake below: the same unit, and the headers' warnings
# show when the precompiled header is built with the same flags.
meson compile -C "$dir/meson" consumer all_modules_pch > "$dir/compile.log" || { cat "$dir/compile.log"; exit 1; }
! grep -q 'warning:' "$dir/compile.log" || { grep 'warning:' "$dir/compile.log"; exit 1; }
echo "meson consumer (xgrad.pc), -Wall -Wextra -Werror: consumer.cpp and all_modules.cpp built without a warning"
run "$dir/meson/consumer"
grep -q "compiled code: used" "$dir/run.log" || { echo "the consumer compiled what libxgrad holds"; exit 1; }
pch_used "$dir/meson" all_modules_pch
run "$dir/meson/all_modules_pch"
echo "all_modules.cpp with xgrad/pch.hpp precompiled (cpp_pch : xgrad.get_variable('pch')): used, no warning"

# The same program without libxgrad's define (every template compiled in the program, as
# for ops libxgrad does not list), where g++ 12's false '__Y' warnings came from.
# shellcheck disable=SC2046  # pkg-config's flags are a word list
c++ -O2 -Wall -Wextra -Werror $(pkg-config --cflags xgrad | sed 's/-DXGRAD_LIBRARY_SIMD_ALIGNMENT=[0-9]*//') \
  -c "$src/examples/consumer/all_modules.cpp" -o "$dir/header_only.o" > "$dir/header-only.log" 2>&1 ||
  { head -n 20 "$dir/header-only.log"; echo "all_modules.cpp, every template in the program: $(grep -c 'warning:' "$dir/header-only.log") warnings"; exit 1; }
echo "all_modules.cpp with every template in the program, -Wall -Wextra -Werror: no warning"

# A debug build at -O0: with -march=native on AVX-512BW, xsimd 8.1's log did not compile there.
cat > "$dir/debug.cpp" <<'PROGRAM'
#include <xgrad/xgrad.hpp>
int main() {
    auto x = xgrad::parameter(xgrad::randn<2>({3, 4}));
    xgrad::backward(xgrad::sum(xgrad::log_softmax(x, 0) + xgrad::softmax(x, 1)));
    return x.grad()(0, 0) == x.grad()(0, 0) ? 0 : 1;
}
PROGRAM
# shellcheck disable=SC2046  # pkg-config's flags are word lists
c++ -O0 -Wall -Wextra -Werror $(pkg-config --cflags xgrad | sed 's/-DXGRAD_LIBRARY_SIMD_ALIGNMENT=[0-9]*//') \
  "$dir/debug.cpp" -o "$dir/debug" $(pkg-config --libs xgrad) > "$dir/debug.log" 2>&1 || { head -n 20 "$dir/debug.log"; exit 1; }
"$dir/debug" || { echo "the -O0 program failed"; exit 1; }
echo "a program at -O0 (softmax and log_softmax over both axes, every template in the program): built and ran"
# Every public module at -O0, every template in the program: the initializers' normal draws took xsimd's log of doubles,
# which failed there in the same way until simd::log.
# shellcheck disable=SC2046  # pkg-config's flags are word lists
c++ -O0 -Wall -Wextra -Werror $(pkg-config --cflags xgrad | sed 's/-DXGRAD_LIBRARY_SIMD_ALIGNMENT=[0-9]*//') \
  "$src/examples/consumer/all_modules.cpp" -o "$dir/all_modules_debug" $(pkg-config --libs xgrad) > "$dir/debug.log" 2>&1 ||
  { head -n 20 "$dir/debug.log"; exit 1; }
run "$dir/all_modules_debug"
echo "all_modules.cpp at -O0, every template in the program: built without a warning and ran"

cmake -G Ninja -S "$src/examples/consumer" -B "$dir/cmake" -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_CXX_FLAGS="-Wall -Wextra -Werror" \
  -DCMAKE_EXPORT_COMPILE_COMMANDS=ON \
  > "$dir/cmake-setup.log" 2>&1 || { cat "$dir/cmake-setup.log"; exit 1; }
# all_modules_pch stands for all_modules: the same unit, and the headers' warnings show when the
# precompiled header is built with the same flags. (Ninja: one build of the three targets in
# parallel, where make would build them one after another.)
targets="consumer all_modules_pch"
[ "$with_mpi" != mpi ] || targets="$targets data_parallel"
# shellcheck disable=SC2086  # a word list
cmake --build "$dir/cmake" --parallel 2 --target $targets > "$dir/cmake-build.log" 2>&1 || { cat "$dir/cmake-build.log"; exit 1; }
! grep -q 'warning:' "$dir/cmake-build.log" || { grep 'warning:' "$dir/cmake-build.log"; exit 1; }
echo "CMake consumer (find_package(xgrad), xgrad::xgrad), -Wall -Wextra -Werror: built without a warning"
run "$dir/cmake/consumer"
grep -q "compiled code: used" "$dir/run.log" || { echo "the CMake consumer compiled what libxgrad holds"; exit 1; }
pch_used "$dir/cmake" all_modules_pch
run "$dir/cmake/all_modules_pch"
echo "all_modules.cpp with xgrad_precompile_headers (CMake): used, no warning"

[ "$with_mpi" = mpi ] || exit 0
[ -f "$(dirname "$pc")/xgrad-dist.pc" ] || { echo "xgrad-dist.pc was not installed"; exit 1; }
[ -x "$dir/cmake/data_parallel" ] || { echo "the CMake consumer found no xgrad::dist"; exit 1; }
echo "pkg-config --cflags --libs xgrad-dist: $(pkg-config --cflags --libs xgrad-dist)"
# shellcheck disable=SC2046  # pkg-config's flags are word lists
c++ -O2 "$src/examples/data_parallel.cpp" -o "$dir/data_parallel" $(pkg-config --cflags --libs xgrad-dist) \
    > "$dir/dist-compile.log" 2>&1 || { cat "$dir/dist-compile.log"; exit 1; }
for program in "$dir/data_parallel" "$dir/cmake/data_parallel"; do
  "$src/tests/dist/mpirun.sh" --timeout 120 -np 2 "$program" > "$dir/dist-run.log" 2>&1 ||
      { cat "$dir/dist-run.log"; exit 1; }
  tail -n 1 "$dir/dist-run.log"
done
