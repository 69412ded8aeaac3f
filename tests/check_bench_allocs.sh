#!/bin/sh
# A steady MultiheadAttention training step makes no heap allocation: usage check_bench_allocs.sh XGRAD
# `xgrad bench` counts every malloc of its timed steps (the tape reuses its nodes and buffers).
# The configuration avoids the shapes where OpenBLAS itself mallocs (bench/HISTORY.md,
# "Where the time goes on machine A"). Under AddressSanitizer nothing is counted (allocs_per_step
# is null) and the check is skipped.
set -u
xgrad=$1
fail() { echo "FAIL: $*"; exit 1; }
for dtype in float32 float64; do
    line=$("$xgrad" bench --batch 4 --seq 16 --embed 64 --heads 4 --dtype "$dtype" --steps 10 --warmup 3) ||
        fail "$dtype: exit status $?"
    allocs=$(echo "$line" | grep -o '"allocs_per_step":[^,}]*' | cut -d: -f2)
    case "$allocs" in
        null) echo "$dtype: allocations not counted in this build (sanitizer)"; continue ;;
        0.0 | 0) echo "$dtype: 0 allocations per step" ;;
        *) fail "$dtype: $allocs heap allocations per steady step, expected 0: $line" ;;
    esac
done
