#!/bin/sh
# A steady training step makes no heap allocation: usage check_bench_allocs.sh XGRAD
# `xgrad bench` counts every malloc of its timed steps (the tape reuses its nodes and buffers):
# checked for the MultiheadAttention workload and the Transformer ones (an encoder layer, and
# encoder + decoder stacks with padding and causal masks, dropout in training mode, and 3DETR's
# encoder with a (B, L, L) mask per layer), a GPT step (nanoGPT's loss, AdamW) and a grouped-query
# Llama step (llama2.c's model.py).
# The configurations avoid the shapes where OpenBLAS itself mallocs (bench/HISTORY.md,
# "Where the time goes on the Zen 5-class EPYC"). Checked with each GEMM back end that allocates nothing
# (XGRAD_GEMM=xgrad where the build has it, and openblas): oneDNN's primitives allocate their
# argument map on every call, so a step whose products oneDNN won counts those (docs/performance.md). Under AddressSanitizer nothing is counted (allocs_per_step
# is null) and the check is skipped.
set -u
xgrad=$1
fail() { echo "FAIL: $*"; exit 1; }
# check NAME ARGS...: one bench run, which must report 0 allocations per steady step
check() {
    name="$1 (GEMM: $XGRAD_GEMM)"
    shift
    line=$("$xgrad" bench "$@" --steps 10 --warmup 3) || fail "$name: exit status $?"
    allocs=$(echo "$line" | grep -o '"allocs_per_step":[^,}]*' | cut -d: -f2)
    case "$allocs" in
        null) echo "$name: allocations not counted in this build (sanitizer)" ;;
        0.0 | 0) echo "$name: 0 allocations per step" ;;
        *) fail "$name: $allocs heap allocations per steady step, expected 0: $line" ;;
    esac
}
backends=openblas
XGRAD_GEMM=xgrad "$xgrad" bench --steps 1 --warmup 0 > /dev/null 2>&1 && backends="xgrad openblas"
for XGRAD_GEMM in $backends; do
export XGRAD_GEMM
for dtype in float32 float64; do
    check "mha $dtype" --batch 4 --seq 16 --embed 64 --heads 4 --dtype "$dtype"
    check "encoder_layer $dtype" --model encoder_layer --batch 4 --seq 16 --embed 64 --heads 4 --ffn 128 \
        --dropout 0.1 --dtype "$dtype"
    check "transformer $dtype" --model transformer --batch 4 --seq 16 --embed 32 --heads 4 --ffn 64 --layers 2 \
        --dropout 0.1 --dtype "$dtype"
    check "masked_encoder $dtype" --model masked_encoder --batch 4 --seq 16 --embed 32 --heads 4 --ffn 64 --layers 2 \
        --dropout 0.1 --dtype "$dtype"
    check "gpt $dtype" --model gpt --layers 2 --heads 4 --embed 32 --vocab 61 --batch 4 --seq 24 --dtype "$dtype"
    check "llama $dtype" --model llama --layers 2 --heads 4 --kv-heads 2 --embed 32 --vocab 61 --batch 4 --seq 24 \
        --dtype "$dtype"
done
# bfloat16 (where the CPU has it): xgrad's kernel and OpenBLAS multiply the rounded operands widened
# to float (kernels::gemm_rounded), in buffers that grow once
if "$xgrad" bench --dtype bfloat16 --steps 1 --warmup 0 > /dev/null 2>&1; then
    check "mha bfloat16" --batch 4 --seq 16 --embed 64 --heads 4 --dtype bfloat16
    check "gpt bfloat16" --model gpt --layers 2 --heads 4 --embed 32 --vocab 61 --batch 4 --seq 24 --dtype bfloat16
fi
done
