#!/usr/bin/env bash
# Does a second thread ever slow a training step down? Runs `xgrad bench` at --threads 1 and
# --threads 2 alternately (1, 2, 1, 2, ...) on each configuration and prints a markdown table of
# the medians over ROUNDS runs (each run's own value is the median of its steps) and their ratio.
# With --baseline, a second binary (say, a build of the code before a change) runs in the same
# rounds (baseline 1, baseline 2, xgrad 1, xgrad 2, ...) and gets its own columns.
#   bench/threads.sh [--xgrad build/src/xgrad] [--baseline OTHER_XGRAD] [--rounds 5]
#                    [--configs "tiny small detr transformer encoder_layer"]
# transformer is a 3+3-layer encoder-decoder at d_model 64 and encoder_layer one encoder layer at
# d_model 256 with a 2048-wide feed-forward (`xgrad bench --model transformer | encoder_layer`,
# the workloads of the libtorch_transformer peer, dropout 0.1; encoder_layer is the 2-thread
# target). Timings are comparable only on an idle machine: the load average is printed before and
# after.
set -euo pipefail
cd "$(dirname "$0")/.."
xgrad=build/src/xgrad baseline="" rounds=5 configs="tiny small detr transformer encoder_layer"
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

# name: the bench arguments (the model, B, L, E, H and the timed steps)
declare -A shape=([tiny]="--batch 2 --seq 6 --embed 100 --heads 5 --steps 400"
                  [small]="--batch 8 --seq 32 --embed 64 --heads 4 --steps 200"
                  [detr]="--batch 8 --seq 64 --embed 256 --heads 8 --steps 40"
                  [transformer]="--model transformer --batch 4 --seq 50 --embed 64 --heads 8 --ffn 256 --layers 3 --steps 40"
                  [encoder_layer]="--model encoder_layer --batch 8 --seq 64 --embed 256 --heads 8 --ffn 2048 --dropout 0.1 --steps 20")
field() { grep -o "\"$1\":[^,}]*" <<<"$2" | cut -d: -f2 | tr -d '"'; }
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
if [[ -n $baseline ]]; then
    echo "| config | baseline 1 thread µs | baseline 2 threads µs | baseline 2 / 1 | 1 thread µs | 2 threads µs | 2 / 1 |"
    echo "|---|---|---|---|---|---|---|"
else
    echo "| config | 1 thread µs | 2 threads µs | 2 / 1 |"
    echo "|---|---|---|---|"
fi
for name in $configs; do
    [[ -n ${shape[$name]:-} ]] || { echo "bench/threads.sh: unknown config $name" >&2; exit 2; }
    read -r -a config <<<"${shape[$name]}"
    args=(bench "${config[@]}")
    declare -A runs=()
    for ((r = 0; r < rounds; ++r)); do
        for bin in ${baseline:+"$baseline"} "$xgrad"; do
            for threads in 1 2; do
                runs[$bin.$threads]+="$(field median_us "$("$bin" "${args[@]}" --threads "$threads")") "
            done
        done
    done
    row="| $name |"
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
