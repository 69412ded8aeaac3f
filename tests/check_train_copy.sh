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

# Resume: 300 steps, checkpoint, 300 more == the same 600 steps uninterrupted, bit for bit.
"$xgrad" train copy --steps 300 --eval-every 600 --out "$dir/c" > /dev/null
"$xgrad" train copy --steps 600 --eval-every 600 --resume "$dir/c/checkpoint.npz" --out "$dir/d" > /dev/null
[ "$(wc -l < "$dir/d/loss.csv")" -eq 301 ] || { echo "resumed run: expected 300 rows in loss.csv"; exit 1; }
tail -n 300 "$dir/a/loss.csv" > "$dir/a-tail.csv"
tail -n 300 "$dir/d/loss.csv" > "$dir/d-tail.csv"
cmp "$dir/a-tail.csv" "$dir/d-tail.csv" || { echo "steps 301-600 differ after resuming"; exit 1; }
echo "resume after 300 steps: steps 301-600 bit-identical"

# A checkpoint of another model: one line naming the file and the mismatch, exit 2, no output folder.
status=0
"$xgrad" train copy --embed 16 --heads 2 --steps 600 --resume "$dir/c/checkpoint.npz" --out "$dir/e" \
  > /dev/null 2> "$dir/err.txt" || status=$?
[ "$status" -eq 2 ] || { echo "mismatched resume: expected exit 2, got $status"; exit 1; }
[ "$(wc -l < "$dir/err.txt")" -eq 1 ] || { echo "mismatched resume: expected one line on stderr"; cat "$dir/err.txt"; exit 1; }
grep -q "checkpoint.npz: cannot load the checkpoint: .*embed.weight has shape (11, 32), the model expects (11, 16)" \
  "$dir/err.txt" || { echo "mismatched resume: unexpected message"; cat "$dir/err.txt"; exit 1; }
[ ! -e "$dir/e" ] || { echo "mismatched resume left an output folder"; exit 1; }
