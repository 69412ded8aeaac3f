#!/usr/bin/env bash
# Does a second thread ever slow a training step down? Runs `xgrad bench` at --threads 1 and
# --threads 2 alternately (1, 2, 1, 2, ...) on each configuration and prints a markdown table of
# the medians over ROUNDS runs (each run's own value is the median of its steps) and their ratio.
# With --baseline, a second binary (say, a build of the code before a change) runs in the same
# rounds (baseline 1, baseline 2, xgrad 1, xgrad 2, ...) and gets its own columns.
#   bench/threads.sh [--xgrad build/src/xgrad] [--baseline OTHER_XGRAD] [--rounds 5]
#                    [--configs "tiny small detr stack"]
# stack is a 6-block Transformer-shaped model at d_model 64 (`xgrad bench --layers 6`). Timings
# are comparable only on an idle machine: the load average is printed before and after.
set -euo pipefail
cd "$(dirname "$0")/.."
xgrad=build/src/xgrad baseline="" rounds=5 configs="tiny small detr stack"
while [[ $# -gt 0 ]]; do
    case "$1" in
        --xgrad) xgrad=$2 ;;
        --baseline) baseline=$2 ;;
        --rounds) rounds=$2 ;;
        --configs) configs=$2 ;;
        *) echo "bench/threads.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift 2
done
for bin in "$xgrad" ${baseline:+"$baseline"}; do
    [[ -x $bin ]] || { echo "bench/threads.sh: no executable $bin (meson compile -C build src/xgrad)" >&2; exit 2; }
done

# name: B L E H layers steps
declare -A shape=([tiny]="2 6 100 5 0 400" [small]="8 32 64 4 0 200" [detr]="8 64 256 8 0 40"
                  [stack]="4 50 64 8 6 40")
field() { grep -o "\"$1\":[^,}]*" <<<"$2" | cut -d: -f2 | tr -d '"'; }
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
if [[ -n $baseline ]]; then
    echo "| config (B, L, E, H, layers) | baseline 1 thread µs | baseline 2 threads µs | baseline 2 / 1 | 1 thread µs | 2 threads µs | 2 / 1 |"
    echo "|---|---|---|---|---|---|---|"
else
    echo "| config (B, L, E, H, layers) | 1 thread µs | 2 threads µs | 2 / 1 |"
    echo "|---|---|---|---|"
fi
for name in $configs; do
    [[ -n ${shape[$name]:-} ]] || { echo "bench/threads.sh: unknown config $name" >&2; exit 2; }
    read -r B L E H layers steps <<<"${shape[$name]}"
    args=(bench --batch "$B" --seq "$L" --embed "$E" --heads "$H" --layers "$layers" --steps "$steps")
    declare -A runs=()
    for ((r = 0; r < rounds; ++r)); do
        for bin in ${baseline:+"$baseline"} "$xgrad"; do
            for threads in 1 2; do
                runs[$bin.$threads]+="$(field median_us "$("$bin" "${args[@]}" --threads "$threads")") "
            done
        done
    done
    row="| $name ($B, $L, $E, $H, $layers) |"
    for bin in ${baseline:+"$baseline"} "$xgrad"; do
        one=$(tr ' ' '\n' <<<"${runs[$bin.1]}" | grep . | median) two=$(tr ' ' '\n' <<<"${runs[$bin.2]}" | grep . | median)
        row+=" $(printf '%.1f' "$one") | $(printf '%.1f' "$two") | $(ratio "$two" "$one") |"
    done
    echo "$row"
    unset runs
done
echo
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg); $rounds alternating rounds, float32," \
    "$(date -u +%Y-%m-%d), $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores"
