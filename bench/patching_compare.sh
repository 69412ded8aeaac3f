#!/bin/sh
# Patching every head and position of a GPT: xgrad (bench/patching_speed) against PyTorch hooks on
# nanoGPT's model.py (bench/patching_torch.py), one thread each, alternating in one run; each line is
# the median of ROUNDS sweeps (docs/performance.md, "Patching").
#   bench/patching_compare.sh NANOGPT [BUILD_FOLDER] [ALTERNATIONS] [L H C V T] [ROUNDS]
# NANOGPT: a nanoGPT checkout or its fetched git mirror. Defaults: build, 2 alternations, GPT-2
# 124M's shape (12 12 768 50257) at T 32, 3 rounds. Needs Debian's python3-torch.
set -eu
cd "$(dirname "$0")/.."
nanogpt=$1
build=${2:-build}
alternations=${3:-2}
shape=${4:-"12 12 768 50257 32"}
rounds=${5:-3}
/usr/bin/python3 -c 'import torch' 2>/dev/null || { echo "bench/patching_compare.sh: needs python3-torch" >&2; exit 2; }
ninja -C "$build" -j1 bench/patching_speed >/dev/null
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -n 1); shape L H C V T: $shape; commit $(git rev-parse --short HEAD)"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
i=0
while [ "$i" -lt "$alternations" ]; do
  # shellcheck disable=SC2086
  taskset -c 0 "$build/bench/patching_speed" $shape "$rounds"
  # shellcheck disable=SC2086
  taskset -c 0 /usr/bin/python3 bench/patching_torch.py "$nanogpt" $shape "$rounds"
  i=$((i + 1))
done
