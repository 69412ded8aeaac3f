#!/usr/bin/env bash
# Runs `xgrad bench` and its libtorch peer alternately on the reference configurations and prints
# a markdown table: both medians (median over ROUNDS alternating runs of each program's median step
# time), the ratio xgrad/libtorch and xgrad's own counters.
#   bench/compare.sh [--dtype float32|float64] [--threads T] [--rounds R]
#                    [--configs "tiny small detr base encoder_layer transformer"] [--xgrad PATH]
# tiny, small, detr and base are the MultiheadAttention step (peer bench/libtorch_mha);
# encoder_layer and transformer the Transformer steps of `xgrad bench --model ...` (peer
# bench/libtorch_transformer, whose header defines the workload). GFLOP/s and "of sgemm" are
# measured for the MultiheadAttention step only.
# Builds into build-bench/ with -Dlibtorch=enabled (needs Debian's libtorch-dev, about 1 GB);
# --xgrad PATH times that xgrad binary instead of build-bench's (only the peers are built then).
# Both programs run with OPENBLAS_NUM_THREADS=T and OMP_NUM_THREADS=T: torch::set_num_threads
# alone leaves Debian's OpenBLAS on every core (perf shows a second thread doing GEMM work), so
# a "1 thread" libtorch run would otherwise use two.
set -euo pipefail
cd "$(dirname "$0")/.."
dtype=float32 threads=1 rounds=3 configs="tiny small detr base encoder_layer transformer" xgrad_bin=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --dtype) dtype=$2 ;;
        --threads) threads=$2 ;;
        --rounds) rounds=$2 ;;
        --configs) configs=$2 ;;
        --xgrad) xgrad_bin=$2 ;;
        *) echo "bench/compare.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift 2
done
if ! dpkg -s libtorch-dev >/dev/null 2>&1; then
    echo "bench/compare.sh: needs libtorch-dev (sudo apt-get install libtorch-dev)" >&2
    exit 2
fi
if [[ ! -d build-bench ]]; then
    meson setup build-bench --buildtype=release -Dunity=on -Dunity_size=6 -Dtests=false -Dlibtorch=enabled >/dev/null
fi
targets=(bench/libtorch_mha bench/libtorch_transformer)
if [[ -z "$xgrad_bin" ]]; then targets+=(src/xgrad) xgrad_bin=build-bench/src/xgrad; fi
nice -n 19 meson compile -C build-bench -j "${XGRAD_JOBS:-2}" "${targets[@]}" >/dev/null

# name B L E H steps [ffn layers dropout]: the last three make it a Transformer workload
declare -A shape=([tiny]="2 6 100 5 400" [small]="8 32 64 4 200" [detr]="8 64 256 8 40" [base]="8 128 512 8 15"
                  [encoder_layer]="8 64 256 8 30 2048 1 0.1" [transformer]="8 32 64 4 100 128 2 0.1")
field() { grep -o "\"$1\":[^,}]*" <<<"$2" | cut -d: -f2 | tr -d '"'; }
# a number with printf's format, or "–" when the line has no such field
num() { if [[ -n "$2" ]]; then printf "$1" "$2"; else printf '–'; fi; }
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "| config (B, L, E, H[, ffn, layers, p]) | xgrad µs | libtorch µs | ratio | xgrad GFLOP/s | of sgemm | allocs/step | peak RSS MB xgrad / libtorch |"
echo "|---|---|---|---|---|---|---|---|"
for name in $configs; do
    [[ -n "${shape[$name]:-}" ]] || { echo "bench/compare.sh: unknown config $name" >&2; exit 2; }
    read -r B L E H steps F layers p <<<"${shape[$name]}"
    common=(--batch "$B" --seq "$L" --embed "$E" --heads "$H" --dtype "$dtype" --threads "$threads" --steps "$steps")
    label="$B, $L, $E, $H"
    if [[ -n "${F:-}" ]]; then
        xgrad=("$xgrad_bin" bench --model "$name" "${common[@]}" --ffn "$F" --layers "$layers" --dropout "$p")
        peer=(build-bench/bench/libtorch_transformer "$name" "$B" "$L" "$E" "$H" "$F" "$layers" "$p" "$dtype" "$threads" "$steps")
        label="$label, $F, $layers, $p"
    else
        xgrad=("$xgrad_bin" bench "${common[@]}")
        peer=(build-bench/bench/libtorch_mha "${common[@]}")
    fi
    export OPENBLAS_NUM_THREADS=$threads OMP_NUM_THREADS=$threads
    xs=() ts=() last_x="" last_t=""
    for ((r = 0; r < rounds; ++r)); do
        last_x=$("${xgrad[@]}")
        last_t=$("${peer[@]}")
        xs+=("$(field median_us "$last_x")") ts+=("$(field median_us "$last_t")")
    done
    x=$(printf '%s\n' "${xs[@]}" | median) t=$(printf '%s\n' "${ts[@]}" | median)
    printf '| %s (%s) | %.0f | %.0f | %.3f | %s | %s | %s | %s / %s |\n' "$name" "$label" \
        "$x" "$t" "$(awk -v a="$x" -v b="$t" 'BEGIN {print a / b}')" "$(num %.1f "$(field gflops "$last_x")")" \
        "$(num %.2f "$(field blas_fraction "$last_x")")" "$(num %.0f "$(field allocs_per_step "$last_x")")" \
        "$(num %.0f "$(field peak_rss_mb "$last_x")")" "$(num %.0f "$(field peak_rss_mb "$last_t")")"
    if [[ -n "$(field blas_core "$last_x")" ]]; then blas_core=$(field blas_core "$last_x"); fi
done
echo
# The CPU model name alone does not tell the machines apart: its AVX-512 extensions and the kernels
# OpenBLAS chose for it (docs/performance.md: machines A and B) do.
avx512=$(grep -o 'avx512[a-z_0-9]*' /proc/cpuinfo | sort -u | tr '\n' ' ' | sed 's/ $//')
echo "dtype $dtype, $threads thread(s), $rounds alternating rounds, $(date -u +%Y-%m-%d)," \
    "load average $load_before at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end, $(lscpu | sed -n 's/^Model name: *//p')," \
    "OpenBLAS kernels ${blas_core:-(not measured by these configs)}, AVX-512: ${avx512:-none}"
