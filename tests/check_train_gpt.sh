#!/bin/sh
# `xgrad train gpt` on real text (one file of the fortunes package): a small GPT learns (val loss
# falls by more than 1), the same seed gives the same losses, a run killed with SIGKILL resumes
# from its last periodic checkpoint and then follows the uninterrupted run bit for bit, `xgrad
# sample` continues a prompt from the checkpoint (.npz or .safetensors), and mistakes are one line with exit status 2.
# XGRAD_TRAIN_GPT_STEPS below 400 (scripts/sanitize: a slow build) runs the same commands with fewer
# steps and leaves out what needs a trained model: the fall of the val loss.
set -eu
xgrad=$1
. "$(dirname "$0")/train_outputs.sh"
text=/usr/share/games/fortunes/linux
[ -f "$text" ] || { echo "FAIL: $text is missing (Debian's fortunes package; scripts/packages.sh installs it)"; exit 1; }
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
run() {  # run OUT STEPS [options]: the test's small model (n_embd ${EMBD:-32}, n_head ${HEADS:-2});
  out=$1 run_steps=$2; shift 2  # EXEC=exec in a background subshell: the subshell becomes xgrad (kill reaches it)
  ${EXEC:-} "$xgrad" train gpt --text "$text" --n_layer 2 --n_head "${HEADS:-2}" --n_embd "${EMBD:-32}" --block_size 32 --batch_size 8 \
    --learning_rate 3e-3 --warmup_iters 10 --lr_decay_iters 400 --max_iters "$run_steps" --eval_interval 40 \
    --eval_iters 4 --sample-tokens 40 --threads 1 --out "$out" "$@"
}

# run() as a script of its own too, for expect_error
{ echo "xgrad='$xgrad' text='$text'"; sed -n '/^run() {/,/^}/p' "$0"; } > "$dir/run.sh"

steps=${XGRAD_TRAIN_GPT_STEPS:-400}
run "$dir/a" "$steps" > "$dir/a.txt"
run "$dir/b" "$steps" --quiet
cmp "$dir/a/loss.csv" "$dir/b/loss.csv" || fail "losses differ between two runs with the same seed"
check_train_outputs "$dir/a"
[ -s "$dir/a/samples.txt" ] || fail "no samples.txt"
grep -q "^step 40: train loss [0-9.]*, val loss [0-9.]*$" "$dir/a.txt" || fail "no evaluation line: $(cat "$dir/a.txt")"
first=$(awk -F, '$1 == 0 { print $4 }' "$dir/a/loss.csv")
last=$(awk -F, -v s="$steps" '$1 == s { print $4 }' "$dir/a/loss.csv")
echo "val loss: $first at step 0, $last after $steps steps"
if [ "$steps" -ge 400 ]; then
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1) }' || fail "the val loss did not fall by 1"
fi

# SIGKILL in the middle of a run that checkpoints every 10 steps (once it has written step 30's
# rows), then --resume: the same losses. Its checkpoints are safetensors files.
(EXEC=exec run "$dir/k" "$steps" --checkpoint-every 10 --checkpoint-format safetensors --quiet) &
pid=$!
until [ -e "$dir/k/loss.csv" ] && grep -q "^30," "$dir/k/loss.csv"; do
  kill -0 "$pid" 2> /dev/null || fail "the run ended before its third checkpoint"
  sleep 0.02
done
kill -9 "$pid" 2> /dev/null || true
wait "$pid" 2> /dev/null || true
! kill -0 "$pid" 2> /dev/null || fail "the killed run is still running"
[ ! -e "$dir/k/metrics.json" ] || fail "the run finished before it was killed: make it longer"
done_steps=$(tail -n 1 "$dir/k/loss.csv" | cut -d, -f1)
[ ! -e "$dir/k/checkpoint.npz" ] || fail "--checkpoint-format safetensors wrote checkpoint.npz"
run "$dir/k" "$steps" --resume "$dir/k/checkpoint.safetensors" --checkpoint-format safetensors --quiet
cmp "$dir/a/loss.csv" "$dir/k/loss.csv" || fail "the killed and resumed run differs from the uninterrupted one"
echo "killed after step $done_steps (SIGKILL), resumed from its last checkpoint (safetensors): loss.csv bit-identical"

# sample: the prompt, then the new characters
out=$("$xgrad" sample --checkpoint "$dir/a/checkpoint.npz" --prompt "The " --tokens 30 --seed 3)
case "$out" in "The "*) ;; *) fail "sample does not start with the prompt: $out" ;; esac
[ "$(printf '%s' "$out" | wc -m)" -ge 30 ] || fail "sample too short: $out"
[ "$out" = "$("$xgrad" sample --checkpoint "$dir/a/checkpoint.npz" --prompt "The " --tokens 30 --seed 3)" ] ||
  fail "same seed, different samples"
[ "$out" = "$("$xgrad" sample --checkpoint "$dir/k/checkpoint.safetensors" --prompt "The " --tokens 30 --seed 3)" ] ||
  fail "the resumed run's safetensors checkpoint samples otherwise than the uninterrupted run's npz"
echo "sample: $(printf '%s' "$out" | head -n 1)"

expect_error "unknown prompt character" "the character '€' (U+20AC) at byte 0 is not in the vocabulary" \
  "$xgrad" sample --checkpoint "$dir/a/checkpoint.npz" --prompt "€"
expect_error "resume with another model" "the checkpoint was made with n_embd=32, this run has n_embd=64" \
  env EMBD=64 sh -c '. "$0"; run "$@"' "$dir/run.sh" "$dir/e" 200 --resume "$dir/a/checkpoint.npz"
[ ! -e "$dir/e" ] || fail "a refused resume left an output folder"
expect_error "n_head not dividing n_embd" "n_head: must divide --n_embd 32" \
  env HEADS=3 sh -c '. "$0"; run "$@"' "$dir/run.sh" "$dir/f" 10

# examples/words_twice.py (docs/gpt.md, section 6): every line is a phrase written twice, the same
# seed gives the same file, and train gpt learns from it
words=$(dirname "$0")/../examples/words_twice.py
/usr/bin/python3 "$words" "$dir/twice.txt" --chars 200000 --seed 3 > /dev/null
/usr/bin/python3 "$words" "$dir/twice2.txt" --chars 200000 --seed 3 > /dev/null
cmp "$dir/twice.txt" "$dir/twice2.txt" || fail "words_twice.py: the same seed gave another text"
awk '{ n = split($0, halves, ", "); words = split(halves[1], w, " ")
  if (n != 2 || halves[1] "." != halves[2] || halves[1] !~ /^[a-z ]+$/ || words < 3 || words > 6) bad++ }
  END { exit !(NR > 3000 && bad == 0) }' "$dir/twice.txt" || fail "words_twice.py: a line is not a phrase written twice"
"$xgrad" train gpt --text "$dir/twice.txt" --n_layer 1 --n_head 2 --n_embd 32 --block_size 32 --batch_size 8 \
  --max_iters 20 --eval_interval 20 --eval_iters 2 --threads 1 --quiet --out "$dir/words"
[ -s "$dir/words/checkpoint.npz" ] || fail "train gpt on words_twice.py's text wrote no checkpoint"
echo "ok words_twice.py: $(wc -l < "$dir/twice.txt") lines, each a phrase written twice"
