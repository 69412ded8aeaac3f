#!/bin/sh
# `xgrad train copy` learns: held-out accuracy >= 0.99 after 600 steps; same seed, same losses.
# XGRAD_TRAIN_COPY_STEPS below 600 (scripts/sanitize: the sanitized -O0 build is ~100x slower)
# runs the same commands with fewer steps and leaves out what needs a trained model: the accuracy
# and the copy head.
set -eu
xgrad=$1
. "$(dirname "$0")/train_outputs.sh"
steps=${XGRAD_TRAIN_COPY_STEPS:-600}
half=$((steps / 2))
trained=$([ "$steps" -ge 600 ] && echo yes || echo no)
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
"$xgrad" train copy --steps "$steps" --eval-every "$steps" --out "$dir/a" > /dev/null
"$xgrad" train copy --steps "$steps" --eval-every "$steps" --out "$dir/b" > /dev/null
cmp "$dir/a/loss.csv" "$dir/b/loss.csv" || { echo "losses differ between two runs with the same seed"; exit 1; }
check_train_outputs "$dir/a"
acc=$(sed -n 's/.*"accuracy": *\([0-9.e-]*\).*/\1/p' "$dir/a/metrics.json")
echo "held-out accuracy after $steps steps: $acc"
if [ "$trained" = yes ]; then
  awk -v a="$acc" 'BEGIN { exit !(a >= 0.99) }' || { echo "accuracy below 0.99"; exit 1; }
fi

# Resume: half the steps, checkpoint, the rest == the same run uninterrupted, bit for bit.
"$xgrad" train copy --steps "$half" --eval-every "$steps" --out "$dir/c" > /dev/null
"$xgrad" train copy --steps "$steps" --eval-every "$steps" --resume "$dir/c/checkpoint.npz" --out "$dir/d" > /dev/null
rest=$((steps - half))
check_resumed_tail "$dir/a" "$dir/d" "$rest"
echo "resume after $half steps: steps $((half + 1))-$steps bit-identical"

# A checkpoint of another model: one line naming the file and the mismatch, exit 2, no output folder.
status=0
"$xgrad" train copy --embed 16 --heads 2 --steps 600 --resume "$dir/c/checkpoint.npz" --out "$dir/e" \
  > /dev/null 2> "$dir/err.txt" || status=$?
[ "$status" -eq 2 ] || { echo "mismatched resume: expected exit 2, got $status"; exit 1; }
[ "$(wc -l < "$dir/err.txt")" -eq 1 ] || { echo "mismatched resume: expected one line on stderr"; cat "$dir/err.txt"; exit 1; }
grep -q "checkpoint.npz: the checkpoint was made with embed=32 heads=4, this run has embed=16 heads=2$" \
  "$dir/err.txt" || { echo "mismatched resume: unexpected message"; cat "$dir/err.txt"; exit 1; }
[ ! -e "$dir/e" ] || { echo "mismatched resume left an output folder"; exit 1; }

# Not a terminal: a plain progress line every --log-every steps and at the last; --quiet: nothing.
"$xgrad" train copy --steps 250 --eval-every 100 --log-every 100 > "$dir/plain.txt"
[ "$(grep -c '^step [ 0-9]*/250  loss [0-9.]*  acc ' "$dir/plain.txt")" -eq 3 ] ||
  { echo "expected progress lines at steps 100, 200 and 250"; cat "$dir/plain.txt"; exit 1; }
grep -q '^step 200/250  loss [0-9.]*  acc [01]\.[0-9]*  [0-9]* steps/s  ETA 0:0[0-9]$' "$dir/plain.txt" ||
  { echo "unexpected progress line"; cat "$dir/plain.txt"; exit 1; }
[ -z "$("$xgrad" train copy --steps 20 --quiet)" ] || { echo "--quiet printed something"; exit 1; }
# A terminal (script(1) gives the run one): the bar is redrawn in place with \r and ends with its line.
if command -v script > /dev/null; then
  script -qec "\"$xgrad\" train copy --steps 100" /dev/null > "$dir/tty.txt"
  grep -q "$(printf '\r')step 100/100 \[####################\]  loss" "$dir/tty.txt" ||
    { echo "no progress bar on a terminal"; cat -A "$dir/tty.txt" | head; exit 1; }
fi

# `xgrad heads` on the 600-step model: some head is labelled the copy head (offset -8, the copied
# length) and removing it costs the most held-out loss; heads.png is a PNG.
"$xgrad" heads "$dir/a/checkpoint.npz" --out "$dir/h" > "$dir/heads.txt"
cat "$dir/heads.txt"
if [ "$trained" = yes ]; then
  grep -q "^ *[0-9]  copy (offset -8) " "$dir/heads.txt" || { echo "no copy head found"; exit 1; }
  top=$(awk '$1 ~ /^[0-9]+$/ && NF >= 8 { print $(NF-1), $0 }' "$dir/heads.txt" | sort -g -r | head -n 1)
  case $top in
    *"copy (offset -8)"*) ;;
    *) echo "the copy head is not the most important by ablation: $top"; exit 1 ;;
  esac
fi
[ "$(head -c 8 "$dir/h/heads.png" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || { echo "heads.png is not a PNG"; exit 1; }
status=0
"$xgrad" heads "$dir/a/loss.csv" > /dev/null 2> "$dir/err.txt" || status=$?
[ "$status" -eq 2 ] && [ "$(wc -l < "$dir/err.txt")" -eq 1 ] || { echo "heads on a non-checkpoint: exit $status"; cat "$dir/err.txt"; exit 1; }
