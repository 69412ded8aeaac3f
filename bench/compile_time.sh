#!/bin/sh
# How long a user's program takes to compile, as one translation unit at -O2 -march=native with
# the flags of the installed xgrad.pc, in two ways, alternating round by round:
#   libxgrad     as installed: the heavy code is compiled once in libxgrad (the XGRAD_COMPILED_IN lists)
#   in-program   the same without XGRAD_LIBRARY_SIMD_ALIGNMENT: every template compiled in the
#                program (what a program built for another SIMD level does; it still links libxgrad)
#   pch          libxgrad, with xgrad/pch.hpp precompiled (as cpp_pch or xgrad_precompile_headers
#                build it in the program's build folder, once, timed apart)
# Prints every run's wall time, CPU time (user + sys: less disturbed than wall time when other
# jobs share the cores) and peak memory, then the min and the median of each. Fails if the
# program does not link against the installed libxgrad or warns under -Wall -Wextra.
#   bench/compile_time.sh BUILD_DIR [FILE.cpp ...] [ROUNDS]
# (default: examples/training_loop.cpp, a short training loop on the library's modules, and
# examples/port_transformer.cpp, a port-sized model with its own attention and LayerNorm; 3 rounds)
set -eu
build=$1
root=$(cd "$(dirname "$0")/.." && pwd)
shift
files=""
rounds=3
for arg in "$@"; do
    case $arg in
        *.cpp) files="$files $arg" ;;
        *) rounds=$arg ;;
    esac
done
[ -n "$files" ] || files="$root/examples/training_loop.cpp $root/examples/port_transformer.cpp"

out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
meson install -C "$build" --destdir "$out/root" --no-rebuild --quiet > /dev/null
export PKG_CONFIG_PATH="$(dirname "$(find "$out/root" -name xgrad.pc)")"
library_flags="-O2 -march=native -Wall -Wextra $(pkg-config --cflags xgrad)"
in_program_flags=$(echo "$library_flags" | sed 's/-DXGRAD_LIBRARY_SIMD_ALIGNMENT=[0-9]*//')
# the precompiled header first, then nothing before it (the intrinsics prelude would void it)
pch_flags="$(echo "$library_flags" | sed 's/--include=[^ ]*//') -Winvalid-pch"
mkdir "$out/pch"
cp "$(pkg-config --variable=pch xgrad)" "$out/pch/pch.hpp"
# shellcheck disable=SC2086
/usr/bin/time -f '%e %U %S %M' -o "$out/time" ${CXX:-g++} $pch_flags -x c++-header "$out/pch/pch.hpp" -o "$out/pch/pch.hpp.gch"
read -r wall user sys kb < "$out/time"
printf 'the precompiled header (xgrad/pch.hpp, once per program): wall %.2f s  cpu %.2f s  %d MB\n' "$wall" \
    "$(echo "$user $sys" | awk '{ print $1 + $2 }')" "$(( $(stat -c %s "$out/pch/pch.hpp.gch") / 1048576 ))"

echo "$(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
for file in $files; do
echo "g++ $library_flags -c $(basename "$file")"
rm -f "$out"/*.wall "$out"/*.cpu "$out"/*.kb
round=1
while [ "$round" -le "$rounds" ]; do
    for mode in libxgrad in-program pch; do
        case $mode in
            libxgrad) flags=$library_flags ;;
            in-program) flags=$in_program_flags ;;
            pch) flags="$pch_flags -I$out/pch -include pch.hpp" ;;
        esac
        # shellcheck disable=SC2086
        /usr/bin/time -f '%e %U %S %M' -o "$out/time" ${CXX:-g++} $flags -c "$file" -o "$out/$mode.o" \
            2> "$out/$mode.warnings"
        read -r wall user sys kb < "$out/time"
        cpu=$(echo "$user $sys" | awk '{ printf "%.2f", $1 + $2 }')
        printf '%-12s round %d: wall %6.2f s  cpu %6.2f s  peak %4d MB\n' "$mode" "$round" "$wall" "$cpu" $((kb / 1024))
        echo "$wall" >> "$out/$mode.wall"
        echo "$cpu" >> "$out/$mode.cpu"
        echo "$kb" >> "$out/$mode.kb"
    done
    round=$((round + 1))
done
for mode in libxgrad in-program pch; do
    summary=""
    for what in wall cpu; do
        summary="$summary$(sort -n "$out/$mode.$what" | awk -v w="$what" '{ t[NR] = $1 }
            END { printf "%s min %.1f s, median %.1f s;  ", w, t[1], t[int((NR + 1) / 2)] }')"
    done
    peak=$(sort -n "$out/$mode.kb" | tail -1)
    printf '%-12s %speak %d MB\n' "$mode" "$summary" $((peak / 1024))
done
# shellcheck disable=SC2046
${CXX:-g++} "$out/libxgrad.o" -o "$out/program" $(pkg-config --libs xgrad)
for mode in libxgrad pch; do
    if [ -s "$out/$mode.warnings" ]; then
        echo "warnings ($mode):"; cat "$out/$mode.warnings"; exit 1
    fi
done
done
