#!/bin/sh
# `xgrad train copy` learns: held-out accuracy >= 0.99 after 600 steps; same seed, same losses.
set -eu
xgrad=$1
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$xgrad" train copy --steps 600 --eval-every 600 --out "$dir/a" > /dev/null
"$xgrad" train copy --steps 600 --eval-every 600 --out "$dir/b" > /dev/null
cmp "$dir/a/loss.csv" "$dir/b/loss.csv" || { echo "losses differ between two runs with the same seed"; exit 1; }
for f in metrics.json loss.csv checkpoint.npz; do [ -s "$dir/a/$f" ] || { echo "missing $f"; exit 1; }; done
acc=$(sed -n 's/.*"accuracy": *\([0-9.e-]*\).*/\1/p' "$dir/a/metrics.json")
echo "held-out accuracy after 600 steps: $acc"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.99) }' || { echo "accuracy below 0.99"; exit 1; }
