#!/bin/sh
# `xgrad patch` end to end: usage check_patch_cli.sh XGRAD FIXTURES_DIR
# The model of tests/fixtures/gpt/gpt_cli with the inputs of tests/fixtures/patch/<metric>
# (tests/fixtures/make_patch.py: nanoGPT's model.py with PyTorch hooks, float64) gives the files the
# reference computes, every value within 1e-9 (the logit difference, and the loss); the same model in
# float32 within 1e-4; patch.png beside them. A `train gpt` checkpoint with two texts: the files of
# the right shapes, and layer 0's residual patched at the one position where the texts differ gives
# the clean metric. Bad input: exit 2, one line on stderr naming the file or field, no OUT (an
# existing OUT left as it was).
set -u
xgrad=$1
fixtures=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
/usr/bin/python3 -c 'import numpy' || fail "python3-numpy is needed (scripts/packages.sh installs it)"

compare() {  # compare EXPECTED_DIR GOT_DIR TOLERANCE: the same .npy files, every value within TOLERANCE
    [ "$(ls "$1")" = "$(ls "$2" | grep -v '^patch.png$')" ] || fail "files differ: $(ls "$2" | tr '\n' ' ')"
    [ "$(head -c 4 "$2/patch.png" | tail -c 3)" = PNG ] || fail "no patch.png in $2"
    /usr/bin/python3 - "$1" "$2" "$3" <<'PY' || fail "values differ"
import os, sys
import numpy as np
want_dir, got_dir, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
for f in sorted(os.listdir(want_dir)):
    want, got = np.load(os.path.join(want_dir, f)), np.load(os.path.join(got_dir, f))
    if got.dtype != np.float64:
        sys.exit(f"{f}: dtype {got.dtype}, expected float64")
    err = (np.abs(want - got) / (1 + np.abs(want))).max()
    if want.shape != got.shape or not err <= tol:
        sys.exit(f"{f}: shape {got.shape} vs {want.shape}, max relative error {err}")
PY
}

input() {  # input DIR METRIC [float32]: the model's files and the metric's inputs in DIR
    mkdir -p "$1"
    cp "$fixtures/gpt/gpt_cli/config.json" "$fixtures/gpt/gpt_cli"/transformer.*.npy "$fixtures/gpt/gpt_cli/lm_head.weight.npy" "$1/"
    cp "$fixtures/patch/$2"/*.npy "$fixtures/patch/$2/metric.json" "$1/"
    [ "${3:-}" = float32 ] || return 0
    /usr/bin/python3 - "$1" <<'PY'
import glob, sys
import numpy as np
for f in glob.glob(sys.argv[1] + "/transformer.*.npy") + glob.glob(sys.argv[1] + "/lm_head.*.npy"):
    np.save(f, np.load(f).astype(np.float32))
PY
}

for metric in logit_diff loss; do
  input "$work/$metric" "$metric"
  "$xgrad" patch --from "$work/$metric" --to "$work/out_$metric" || fail "$metric: exit status $?"
  compare "$fixtures/patch/$metric/expected" "$work/out_$metric" 1e-9
  echo "ok $metric, float64, against nanoGPT with PyTorch hooks"
done
input "$work/in32" logit_diff float32
"$xgrad" patch --from "$work/in32" --to "$work/out32" || fail "float32: exit status $?"
compare "$fixtures/patch/logit_diff/expected" "$work/out32" 1e-4
echo "ok logit_diff, float32"

# a checkpoint and two texts of the same length that differ at position 6 ("is" / "as")
"$xgrad" train gpt --text /usr/share/games/fortunes/linux --max_iters 5 --eval_interval 100 --eval_iters 1 \
  --batch_size 4 --n_layer 2 --n_head 2 --n_embd 16 --block_size 16 --sample-tokens 1 --quiet --out "$work/run" > /dev/null ||
  fail "train gpt: exit status $?"
"$xgrad" patch --checkpoint "$work/run/checkpoint.npz" --clean-text "Linux is free" --corrupt-text "Linux as free" \
  --ig-steps 8 --to "$work/text_out" || fail "patch --checkpoint: exit status $?"
/usr/bin/python3 - "$work/text_out" <<'PY' || fail "patch --checkpoint: outputs"
import sys
import numpy as np
d = sys.argv[1] + "/"
shapes = {"patch.head": (2, 2), "patch.head_pos": (2, 2, 13), "patch.resid_pre": (2, 13), "atp.head": (2, 2),
          "logit_lens": (3,), "ig.embed": (1, 13)}
for name, shape in shapes.items():
    assert np.load(d + name + ".npy").shape == shape, (name, np.load(d + name + ".npy").shape)
clean, resid = float(np.load(d + "clean_metric.npy")), np.load(d + "patch.resid_pre.npy")
assert abs(resid[0, 6] - clean) < 1e-5 * (1 + abs(clean)), (resid[0], clean)  # "is" / "as": character 6
print("patch --checkpoint: loss metric, layer 0's residual at the differing position gives the clean metric")
PY
"$xgrad" patch --checkpoint "$work/run/checkpoint.npz" --clean-text "Linux is free" --corrupt-text "Linux is" \
  --to "$work/bad_out" 2> "$work/err" && fail "texts of different lengths accepted"
grep -q -- "--corrupt-text: 8 tokens, the clean text 13" "$work/err" || fail "different lengths: $(cat "$work/err")"

expect_error() {  # expect_error NAME PATTERN: run on $work/bad, one line matching PATTERN, exit 2, no output
    status=0
    "$xgrad" patch --from "$work/bad" --to "$work/bad_out" 2> "$work/err" > /dev/null || status=$?
    [ "$status" -eq 2 ] || fail "$1: exit status $status, expected 2"
    [ "$(wc -l < "$work/err")" -eq 1 ] || fail "$1: $(cat "$work/err")"
    grep -q "$2" "$work/err" || fail "$1: '$(cat "$work/err")' does not say '$2'"
    [ ! -e "$work/bad_out" ] || fail "$1: wrote $work/bad_out"
    echo "ok $1: $(cat "$work/err")"
}
fresh() { rm -rf "$work/bad"; input "$work/bad" "$1"; }
fresh logit_diff
echo '{"kind": "logit_diff", "correct": [1], "wrong": [2, 3]}' > "$work/bad/metric.json"
expect_error "too few tokens" 'metric.json: field "correct" must be a list of 2 token ids'
echo '{"kind": "logit_diff", "correct": [1, 13], "wrong": [2, 3]}' > "$work/bad/metric.json"
expect_error "token outside the vocabulary" 'metric.json: field "correct" must hold ids in \[0, 13)'
echo '{"kind": "kl"}' > "$work/bad/metric.json"
expect_error "unknown kind" 'metric.json: field "kind" must be "logit_diff" or "loss"'
fresh logit_diff
/usr/bin/python3 -c "import numpy as np; np.save('$work/bad/corrupt.npy', np.zeros((2, 5), dtype=np.int64))"
expect_error "shapes differ" 'corrupt.npy: has shape (2, 5), clean.npy has (2, 6)'
fresh loss
rm "$work/bad/targets.npy"
expect_error "no targets for the loss" 'targets.npy'
fresh logit_diff
rm "$work/bad/clean.npy"
expect_error "no clean ids" 'clean.npy'

# an existing OUT stays as it was when patch fails: only its one file, unchanged, and no staging
# folder left beside it
mkdir "$work/kept" && echo sentinel > "$work/kept/sentinel.txt"
before=$(ls -A "$work")
for bad in from text; do
  status=0
  if [ "$bad" = from ]; then  # $work/bad has no clean.npy
    "$xgrad" patch --from "$work/bad" --to "$work/kept" > "$work/out" 2> "$work/err" || status=$?
  else
    "$xgrad" patch --checkpoint "$work/run/checkpoint.npz" --clean-text "Linux is free" --corrupt-text "Linux is" \
      --to "$work/kept" > "$work/out" 2> "$work/err" || status=$?
  fi
  [ "$status" -eq 2 ] && [ "$(wc -l < "$work/err")" -eq 1 ] && [ ! -s "$work/out" ] ||
    fail "existing OUT, bad --$bad input: exit status $status, stderr '$(cat "$work/err")', stdout '$(cat "$work/out")'"
  [ "$(ls -A "$work/kept")" = sentinel.txt ] && [ "$(cat "$work/kept/sentinel.txt")" = sentinel ] ||
    fail "existing OUT, bad --$bad input: OUT now holds $(ls -A "$work/kept" | tr '\n' ' ')"
  [ "$(ls -A "$work" | grep -v '^out$\|^err$')" = "$(echo "$before" | grep -v '^out$\|^err$')" ] ||
    fail "existing OUT, bad --$bad input: left $(ls -A "$work" | tr '\n' ' ')"
done
echo "ok an existing OUT is left as it was by a failed patch"
