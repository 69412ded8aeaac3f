#!/bin/sh
# `xgrad train llama` on real text (one file of the fortunes package) with a SentencePiece vocabulary
# learned from it: a small grouped-query Llama learns (val loss falls by more than 1), a run resumed
# from a checkpoint halfway follows the uninterrupted one bit for bit, `xgrad tokenize` reads the
# run's tokenizer from the checkpoint, its folder and its tokenizer.model alike, `xgrad sample`
# continues a prompt, `xgrad export --to llama2c` writes run.c's model.bin and tokenizer.bin, which
# `xgrad sample` reads back to the same greedy tokens, as it reads the run's model folder (Hugging
# Face's layout), `heads` and `patch` run on it (`patch --model` on the folder too: its values by
# identities), and mistakes are one line with exit status 2.
# XGRAD_TRAIN_LLAMA_STEPS below 300 (scripts/sanitize: a slow build) leaves out the fall of the loss.
set -eu
xgrad=$1
. "$(dirname "$0")/train_outputs.sh"
text=/usr/share/games/fortunes/linux
[ -f "$text" ] || { echo "FAIL: $text is missing (Debian's fortunes package; scripts/packages.sh installs it)"; exit 1; }
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
run() {  # run OUT STEPS [options]: the test's small model, 2 query heads sharing 1 key/value head
  out=$1 run_steps=$2; shift 2
  "$xgrad" train llama --text "$text" --vocab_size 512 --dim 32 --n_layers 2 --n_heads 2 --n_kv_heads 1 \
    --max_seq_len 32 --batch_size 8 --warmup_iters 10 --lr_decay_iters 300 --max_iters "$run_steps" \
    --eval_interval "$every" --eval_iters 4 --sample-tokens 30 --threads 1 --out "$out" "$@"
}

steps=${XGRAD_TRAIN_LLAMA_STEPS:-300}
every=$((steps / 6))  # the run evaluates every 50 of 300 steps; a run evaluates at its last step too,
half=$((3 * every))   # so the halfway stop of the resume check falls on an evaluation
run "$dir/a" "$steps" > "$dir/a.txt"
check_train_outputs "$dir/a"
[ -s "$dir/a/samples.txt" ] && [ -s "$dir/a/tokenizer.model" ] || fail "no samples.txt or tokenizer.model"
grep -q "^Llama: 2 layers, 2 heads (1 key/value), dim 32, .* 512 SentencePiece tokens;" "$dir/a.txt" ||
  fail "no first line naming the model and its tokenizer: $(head -n 1 "$dir/a.txt")"
first=$(awk -F, '$1 == 0 { print $4 }' "$dir/a/loss.csv")
last=$(awk -F, -v s="$steps" '$1 == s { print $4 }' "$dir/a/loss.csv")
echo "val loss: $first at step 0, $last after $steps steps"
if [ "$steps" -ge 300 ]; then
  awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 1) }' || fail "the val loss did not fall by 1"
fi

# half the steps with a checkpoint, then --resume to the end: the uninterrupted run's losses
run "$dir/h" "$half" --checkpoint-every "$half" --quiet
run "$dir/h" "$steps" --resume "$dir/h/checkpoint.npz" --quiet
cmp "$dir/a/loss.csv" "$dir/h/loss.csv" || fail "the resumed run differs from the uninterrupted one"
echo "resumed at step $half: loss.csv bit-identical"

# the tokenizer, from each place it can be read
ids=$(printf 'Linux is not UNIX\n' | "$xgrad" tokenize --model "$dir/a/checkpoint.npz")
for model in "$dir/a/tokenizer.model" "$dir/a"; do
  [ "$(printf 'Linux is not UNIX\n' | "$xgrad" tokenize --model "$model")" = "$ids" ] || fail "tokenize --model $model differs"
done
[ "$(echo "$ids" | "$xgrad" tokenize --model "$dir/a" --decode)" = "Linux is not UNIX" ] || fail "decode of $ids"
echo "tokenize: $ids"

# sample: the prompt, then new text; greedy twice the same
out=$("$xgrad" sample --checkpoint "$dir/a/checkpoint.npz" --prompt "Linux" --tokens 20 --seed 3)
case "$out" in "Linux"*) ;; *) fail "sample does not start with the prompt: $out" ;; esac
greedy=$("$xgrad" sample --checkpoint "$dir/a/checkpoint.npz" --prompt "Linux" --tokens 20 --temperature 0 --print-ids)
echo "$greedy" | grep -Eq '^[0-9]+(,[0-9]+){19}$' || fail "--print-ids: not 20 comma-separated ids: $greedy"

# run.c's files: model.bin and tokenizer.bin; read back, the same greedy tokens, with the run's
# tokenizer or as ids after <s> (1)
"$xgrad" export --to llama2c "$dir/a/checkpoint.npz" "$dir/l2c" > /dev/null
[ -s "$dir/l2c/model.bin" ] && [ -s "$dir/l2c/tokenizer.bin" ] || fail "export --to llama2c wrote no model.bin or tokenizer.bin"
[ "$("$xgrad" sample --checkpoint "$dir/l2c/model.bin" --tokenizer "$dir/a/tokenizer.model" --prompt "Linux" --tokens 20 \
      --temperature 0 --print-ids)" = "$greedy" ] || fail "model.bin's greedy tokens differ from the checkpoint's"
prompt_ids=1,$(printf 'Linux' | "$xgrad" tokenize --model "$dir/a")
[ "$("$xgrad" sample --checkpoint "$dir/l2c/model.bin" --prompt-ids "$prompt_ids" --tokens 20 --temperature 0 \
      --print-ids)" = "$greedy" ] || fail "model.bin's greedy tokens after --prompt-ids $prompt_ids differ"
# and back into a checkpoint with the tokenizer
mkdir "$dir/back"
"$xgrad" export "$dir/l2c/model.bin" "$dir/back/model.npz" --tokenizer "$dir/a/tokenizer.model" > /dev/null
[ "$("$xgrad" sample --checkpoint "$dir/back/model.npz" --prompt "Linux" --tokens 20 --temperature 0 --print-ids)" = "$greedy" ] ||
  fail "the checkpoint exported back from model.bin samples other greedy tokens"
echo "export --to llama2c and back: the same greedy tokens ($greedy)"
# the run's folder in Hugging Face's layout, and one exported from model.bin: the same greedy tokens
[ "$("$xgrad" sample --model "$dir/a" --prompt "Linux" --tokens 20 --temperature 0 --print-ids)" = "$greedy" ] ||
  fail "the run's model folder samples other greedy tokens"
"$xgrad" export "$dir/l2c/model.bin" "$dir/hf" --tokenizer "$dir/a/tokenizer.model" > /dev/null
[ "$("$xgrad" sample --model "$dir/hf" --prompt "Linux" --tokens 20 --temperature 0 --print-ids)" = "$greedy" ] ||
  fail "the folder exported from model.bin samples other greedy tokens"

# a character vocabulary trains too; run.c's tokenizer.bin needs SentencePiece
"$xgrad" train llama --text "$text" --tokenizer char --dim 16 --n_layers 1 --n_heads 2 --max_seq_len 16 \
  --batch_size 4 --max_iters 5 --eval_interval 5 --eval_iters 1 --threads 1 --quiet --out "$dir/c"
[ -s "$dir/c/checkpoint.npz" ] && [ -s "$dir/c/xgrad_tokenizer.json" ] || fail "train llama --tokenizer char wrote no checkpoint"

# heads and patch on a Llama: the table and picture; the patched runs, where putting back layer 0's
# input at the one differing position restores the clean run's metric
"$xgrad" heads "$dir/a/checkpoint.npz" --text "$text" --sequences 8 --out "$dir/heads" > "$dir/heads.txt"
grep -q "checkpoint.npz: Llama 2 layers, 2 heads, width 32; 8 val windows of 32 tokens" "$dir/heads.txt" ||
  fail "heads: no header line: $(head -n 1 "$dir/heads.txt")"
[ "$(grep -c "^ *[01] *[01]  " "$dir/heads.txt")" -eq 4 ] && [ -s "$dir/heads/heads.png" ] || fail "heads: not 4 heads and heads.png"
"$xgrad" patch --checkpoint "$dir/c/checkpoint.npz" --clean-text "the cat sat on" --corrupt-text "the cut sat on" \
  --to "$dir/patch" > /dev/null
[ ! -e "$dir/patch/dla.head.npy" ] && [ -s "$dir/patch/patch.png" ] || fail "patch on a Llama with the loss: dla.head.npy written, or no patch.png"
/usr/bin/python3 -c '
import sys, numpy as np
d = sys.argv[1]
clean, corrupt, resid = (np.load(f"{d}/{n}.npy") for n in ("clean_metric", "corrupt_metric", "patch.resid_pre"))
assert resid.shape == (1, 14), resid.shape
assert abs(resid[0, 5] - clean) < 1e-5 * abs(clean) and abs(clean - corrupt) > 1e-3, (resid[0], clean, corrupt)
assert np.allclose(resid[0, :5], corrupt, rtol=1e-6) and np.allclose(resid[0, 6:], corrupt, rtol=1e-6), resid[0]
' "$dir/patch" || fail "patch on a Llama: resid_pre at layer 0 does not give the runs' metrics"
# with a logit difference: direct logit attribution, one term per head and per MLP
"$xgrad" patch --checkpoint "$dir/c/checkpoint.npz" --clean-text "the cat sat on" --corrupt-text "the cut sat on" \
  --correct " " --wrong "e" --ig-steps 2 --to "$dir/patch_diff" > /dev/null
/usr/bin/python3 -c '
import sys, numpy as np
d = sys.argv[1]
head, mlp = np.load(f"{d}/dla.head.npy"), np.load(f"{d}/dla.mlp.npy")
assert head.shape == (1, 2) and mlp.shape == (1,), (head.shape, mlp.shape)
assert np.isfinite(head).all() and np.isfinite(mlp).all() and np.abs(head).max() > 0, (head, mlp)
' "$dir/patch_diff" || fail "patch on a Llama with --correct: no dla.head.npy (1, 2) and dla.mlp.npy (1)"
# patch --model on the run's folder (tokenizer.model): texts differing in their last token only, so
# every earlier position is the same in both runs: any layer's resid_pre patched at the last position
# gives the clean metric, at an earlier position (resid_pre, attn_out, mlp_out, a head's z) the
# corrupted one, AtP 0 there; --checkpoint on the run's checkpoint and --model on the folder exported
# from model.bin give the same files, byte for byte (model.bin alone holds no tokenizer: refused)
ids=$(printf 'Linux is not the' | "$xgrad" tokenize --model "$dir/a"),$(printf 'Linux is not a' | "$xgrad" tokenize --model "$dir/a")
patch_texts() {  # patch_texts OUT MODEL_OPTIONS...
  patch_out=$1; shift
  "$xgrad" patch "$@" --clean-text "Linux is not the" --corrupt-text "Linux is not a" --correct "is" --wrong "not" \
    --ig-steps 8 --to "$patch_out" > /dev/null || fail "patch $*: exit status $?"
}
patch_texts "$dir/patch_folder" --model "$dir/a"
patch_texts "$dir/patch_checkpoint" --checkpoint "$dir/a/checkpoint.npz"
patch_texts "$dir/patch_hf" --model "$dir/hf"
/usr/bin/python3 - "$ids" <<'PY' || fail "the patch texts' ids differ in more than the last"
import sys
ids = [int(i) for i in sys.argv[1].split(",")]
T = len(ids) // 2
assert ids[:T - 1] == ids[T:-1] and ids[T - 1] != ids[-1], ids
PY
T=$(( $(echo "$ids" | tr ',' '\n' | wc -l) / 2 ))
/usr/bin/python3 "$(dirname "$0")/cli/check_patch_last_token.py" "$dir/patch_folder" 2 2 "$T" 1e-5 "--model on a Llama folder" ||
  fail "patch --model on a Llama folder: the files or their values"
for f in "$dir/patch_folder"/*; do
  cmp "$f" "$dir/patch_checkpoint/${f##*/}" || fail "patch --model and --checkpoint differ in ${f##*/}"
  cmp "$f" "$dir/patch_hf/${f##*/}" || fail "patch on the folder exported from model.bin differs in ${f##*/}"
done
echo "heads and patch on a Llama: ok"

expect_error "export of a character model to run.c" "run.c's tokenizer.bin is a SentencePiece vocabulary" \
  "$xgrad" export --to llama2c "$dir/c/checkpoint.npz" "$dir/nope"
[ ! -e "$dir/nope" ] || fail "a refused export left a folder"
expect_error "patch on run.c's model.bin" "model.bin: an llm.c or llama2.c .bin holds no tokenizer for the two texts: export it" \
  "$xgrad" patch --checkpoint "$dir/l2c/model.bin" --clean-text "Linux is not the" --corrupt-text "Linux is not a" --to "$dir/nope"
[ ! -e "$dir/nope" ] || fail "a refused patch left a folder"
expect_error "n_kv_heads not dividing n_heads" "n_kv_heads 3 does not divide n_heads 4" \
  "$xgrad" train llama --text "$text" --n_heads 4 --n_kv_heads 3 --max_iters 1
expect_error "a vocabulary smaller than the text's characters" "Vocabulary size is smaller than required_chars" \
  "$xgrad" train llama --text "$text" --vocab_size 300 --max_iters 1
expect_error "tokenizer-model with vocab_size" "leave out --tokenizer and --vocab_size" \
  "$xgrad" train llama --text "$text" --tokenizer-model "$dir/a/tokenizer.model" --vocab_size 600 --max_iters 1
expect_error "resume with another model" "the checkpoint was made with dim=32 hidden_dim=96, this run has dim=64 hidden_dim=192" \
  "$xgrad" train llama --text "$text" --vocab_size 512 --dim 64 --n_layers 2 --n_heads 2 --n_kv_heads 1 \
  --max_seq_len 32 --max_iters 400 --resume "$dir/a/checkpoint.npz" --out "$dir/e"
[ ! -e "$dir/e" ] || fail "a refused resume left an output folder"
