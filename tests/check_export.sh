#!/bin/sh
# A model folder from `xgrad train gpt --out` (config.json, model.safetensors, xgrad_tokenizer.json
# beside checkpoint.npz) read by every command that reads a folder; `xgrad export` between the
# checkpoint, a nanoGPT .npz, a folder and llm.c's .bin with bit-identical weights; `train gpt
# --init-from` a folder, which after 0 steps gives the folder's logits; bad input as one line, exit
# status 2, OUT untouched.
#   check_export.sh XGRAD
set -eu
xgrad=$1
text=/usr/share/games/fortunes/linux
[ -f "$text" ] || { echo "FAIL: $text is missing (Debian's fortunes package; scripts/packages.sh installs it)"; exit 1; }
/usr/bin/python3 -c 'import numpy' || { echo "FAIL: python3-numpy is needed (scripts/packages.sh installs it)"; exit 1; }
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
train() {  # train OUT STEPS [options]: a GPT on the text, quietly (the model's options: $small)
  out=$1 steps=$2; shift 2
  "$xgrad" train gpt --text "$text" --batch_size 8 --max_iters "$steps" --eval_interval 400 --eval_iters 2 \
    --sample-tokens 10 --threads 1 --quiet --out "$out" "$@"
}
small="--n_layer 2 --n_head 2 --n_embd 32 --block_size 32"
same_weights() {  # same_weights A.npz B.npz: the same parameters, bit for bit (xgrad's config entries aside)
  /usr/bin/python3 - "$1" "$2" <<'PY' || fail "weights differ: $1 $2"
import sys, numpy as np
a, b = (np.load(p) for p in sys.argv[1:3])
params = lambda f: sorted(k for k in f.files if not k.startswith("train_state/"))
assert params(a) == params(b), (params(a), params(b))
for k in params(a):
    x, y = a[k], b[k]
    assert x.dtype == y.dtype and x.shape == y.shape and x.tobytes() == y.tobytes(), k
print(f"{len(params(a))} tensors bit-identical")
PY
}

# 1. train gpt --out writes the folder; the folder and the checkpoint give the same greedy ids
train "$dir/run" 800 $small --gelu tanh --bias  # llm.c's GPT-2 form, so that the .bin below takes it
for f in checkpoint.npz config.json model.safetensors xgrad_tokenizer.json; do
  [ -s "$dir/run/$f" ] || fail "train gpt --out wrote no $f"
done
grep -q '"kind": "character"' "$dir/run/xgrad_tokenizer.json" || fail "xgrad_tokenizer.json: $(cat "$dir/run/xgrad_tokenizer.json")"
grep -q '"activation_function": "gelu_new"' "$dir/run/config.json" || fail "config.json: $(cat "$dir/run/config.json")"
a=$("$xgrad" sample --checkpoint "$dir/run/checkpoint.npz" --prompt "The " --temperature 0 --tokens 40 --print-ids)
b=$("$xgrad" sample --model "$dir/run" --prompt "The " --temperature 0 --tokens 40 --print-ids)
[ "$(printf '%s' "$a" | tr ',' ' ' | wc -w)" -eq 40 ] || fail "sample --print-ids: $a"
[ "$(printf '%s' "$a" | tr ',' '\n' | sort -u | wc -l)" -ge 3 ] || fail "a trivial continuation, train longer: $a"
[ "$a" = "$b" ] || fail "greedy ids: checkpoint $a, folder $b"
echo "greedy ids, checkpoint and folder: $a"
t1=$(printf 'Linux is' | "$xgrad" tokenize --model "$dir/run/checkpoint.npz")
t2=$(printf 'Linux is' | "$xgrad" tokenize --model "$dir/run")
[ "$t1" = "$t2" ] || fail "tokenize: checkpoint $t1, folder $t2"
[ "$(printf '%s' "$t2" | "$xgrad" tokenize --model "$dir/run" --decode)" = "Linux is" ] || fail "tokenize --decode"
"$xgrad" heads --model "$dir/run" --text "$text" --sequences 4 > "$dir/heads.txt" || fail "heads --model"
"$xgrad" explore --model "$dir/run" --corpus "$text" --head-sequences 0 --out "$dir/page.html" > /dev/null ||
  fail "explore --model"
[ -s "$dir/page.html" ] || fail "explore wrote no page"

# 2. export: checkpoint -> folder -> llm.c .bin -> .npz, the weights bit for bit; the folders byte for byte
"$xgrad" export "$dir/run/checkpoint.npz" "$dir/f1" > /dev/null
for f in config.json model.safetensors xgrad_tokenizer.json; do
  cmp "$dir/run/$f" "$dir/f1/$f" || fail "export's $f differs from train gpt's"
done
"$xgrad" export "$dir/f1" "$dir/m.bin" > /dev/null
"$xgrad" export "$dir/m.bin" "$dir/back.npz" --tokenizer "$dir/f1" > /dev/null
same_weights "$dir/run/checkpoint.npz" "$dir/back.npz"
c=$("$xgrad" sample --checkpoint "$dir/back.npz" --prompt "The " --temperature 0 --tokens 40 --print-ids)
[ "$a" = "$c" ] || fail "greedy ids after the round trip: $c"
"$xgrad" export "$dir/m.bin" "$dir/f2" --tokenizer "$dir/run/checkpoint.npz" > /dev/null
for f in config.json model.safetensors xgrad_tokenizer.json; do cmp "$dir/f1/$f" "$dir/f2/$f" || fail "llm.c -> folder: $f"; done
# a nanoGPT state dict (no xgrad config): --n_head and --gelu say what it does not record
/usr/bin/python3 -c "
import sys, numpy as np
f = np.load(sys.argv[1])
np.savez(sys.argv[2], **{k: f[k] for k in f.files if not k.startswith('train_state/')})" "$dir/run/checkpoint.npz" "$dir/nano.npz"
"$xgrad" export "$dir/nano.npz" "$dir/f3" --n_head 2 --gelu tanh --tokenizer "$dir/run" > /dev/null
for f in config.json model.safetensors; do cmp "$dir/f1/$f" "$dir/f3/$f" || fail "nanoGPT .npz -> folder: $f"; done
"$xgrad" export "$dir/f3" "$dir/nano2.npz" > /dev/null
same_weights "$dir/nano.npz" "$dir/nano2.npz"
"$xgrad" export "$dir/f1" "$dir/out.model" --to npz > /dev/null
same_weights "$dir/run/checkpoint.npz" "$dir/out.model"
echo "export: checkpoint -> folder -> .bin -> .npz and nanoGPT .npz -> folder -> .npz bit-identical"

# 3. --init-from a folder, 0 steps: the folder's logits, bit for bit (xgrad gpt --model)
train "$dir/ft" 0 --init-from "$dir/run"
mkdir "$dir/in"
/usr/bin/python3 -c "
import sys, numpy as np
idx = np.random.default_rng(0).integers(0, 40, size=(2, 32), dtype=np.int64)  # the text has more characters
np.save(sys.argv[1] + '/idx.npy', idx); np.save(sys.argv[1] + '/targets.npy', np.roll(idx, -1, axis=1))" "$dir/in"
"$xgrad" gpt --model "$dir/run" --from "$dir/in" --to "$dir/o1"
"$xgrad" gpt --model "$dir/ft" --from "$dir/in" --to "$dir/o2"
cmp "$dir/o1/logits.npy" "$dir/o2/logits.npy" || fail "--init-from, 0 steps: the logits differ from the folder's"
cmp "$dir/run/model.safetensors" "$dir/ft/model.safetensors" || fail "--init-from, 0 steps: other weights"
train "$dir/ft5" 5 --init-from "$dir/run" --n_layer 2 --gelu tanh  # as the folder: accepted
! cmp -s "$dir/run/model.safetensors" "$dir/ft5/model.safetensors" || fail "--init-from, 5 steps: the weights did not change"
echo "--init-from: 0 steps give the folder's logits bit for bit; 5 steps train"

# 4. bad input: one line naming the file and the field, exit status 2, OUT untouched
expect_error() {  # expect_error NAME PATTERN COMMAND...
  name=$1 pattern=$2; shift 2
  status=0
  "$@" > /dev/null 2> "$dir/err" || status=$?
  [ "$status" -eq 2 ] || fail "$name: exit status $status, expected 2: $(cat "$dir/err")"
  [ "$(wc -l < "$dir/err")" -eq 1 ] || fail "$name: expected one line on stderr: $(cat "$dir/err")"
  grep -qF -- "$pattern" "$dir/err" || fail "$name: unexpected message: $(cat "$dir/err")"
  echo "ok $name"
}
expect_error "init-from, another n_layer" "--n_layer 3 contradicts --init-from $dir/run (2 there)" \
  train "$dir/bad" 5 --init-from "$dir/run" --n_layer 3
expect_error "init-from, another tokenizer" "--tokenizer byte contradicts --init-from $dir/run (char there)" \
  train "$dir/bad" 5 --init-from "$dir/run" --tokenizer byte
expect_error "init-from, no biases" "--bias off contradicts --init-from $dir/run (on there)" \
  train "$dir/bad" 5 --init-from "$dir/run" --no-bias
[ ! -e "$dir/bad" ] || fail "a refused --init-from left an output folder"
mkdir "$dir/keep" && echo old > "$dir/keep/config.json" && echo old > "$dir/keep.bin"
cp -r "$dir/f1" "$dir/broken"
head -c 1000 "$dir/f1/model.safetensors" > "$dir/broken/model.safetensors"
expect_error "export, truncated safetensors" "$dir/broken/model.safetensors" "$xgrad" export "$dir/broken" "$dir/keep"
sed -i 's/"n_head": 2/"n_head": "2"/' "$dir/broken/config.json"
expect_error "export, config field" "$dir/broken/config.json: field \"n_head\" must be a positive integer" \
  "$xgrad" export "$dir/broken" "$dir/keep.bin"
cp "$dir/f1/config.json" "$dir/f1/model.safetensors" "$dir/broken/"
sed -i 's/"character"/"words"/' "$dir/broken/xgrad_tokenizer.json"
expect_error "tokenizer kind" "$dir/broken/xgrad_tokenizer.json: field \"kind\" must be \"byte\" or \"character\"" \
  "$xgrad" export "$dir/broken" "$dir/keep"
printf '{"version": 1, "kind": "character", "characters": "ba"}' > "$dir/broken/xgrad_tokenizer.json"
expect_error "tokenizer order" "$dir/broken/xgrad_tokenizer.json: field \"characters\" must list distinct characters" \
  "$xgrad" sample --model "$dir/broken" --prompt a
[ "$(cat "$dir/keep/config.json")" = old ] && [ "$(ls "$dir/keep")" = config.json ] && [ "$(cat "$dir/keep.bin")" = old ] ||
  fail "a failed export changed OUT"
train "$dir/nobias" 1 $small
expect_error "export, llm.c needs biases" "this model has no biases, the erf GELU, vocab_size" \
  "$xgrad" export "$dir/nobias/checkpoint.npz" "$dir/keep.bin"
[ "$(cat "$dir/keep.bin")" = old ] || fail "a failed export changed OUT"
expect_error "export, .bin to a folder" "$dir/m.bin: holds no tokenizer" "$xgrad" export "$dir/m.bin" "$dir/nope"
expect_error "export, nanoGPT without --n_head" "$dir/nano.npz: a nanoGPT state dict" "$xgrad" export "$dir/nano.npz" "$dir/nope"
expect_error "export, unknown OUT" "$dir/x.safetensors: its name says no kind" \
  "$xgrad" export "$dir/f1" "$dir/x.safetensors"
expect_error "export, --n_head with a folder" "--n_head and --gelu are for a nanoGPT state dict" \
  "$xgrad" export "$dir/f1" "$dir/nope.npz" --n_head 2
[ ! -e "$dir/nope" ] && [ ! -e "$dir/nope.npz" ] && [ ! -e "$dir/x.safetensors" ] || fail "a failed export wrote OUT"
echo "export and --init-from: folders read back, round trips bit-identical, bad input refused"
