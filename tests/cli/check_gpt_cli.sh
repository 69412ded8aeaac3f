#!/bin/sh
# `xgrad gpt` end to end: usage check_gpt_cli.sh XGRAD FIXTURES_DIR
# The folder tests/fixtures/gpt/gpt_cli (nanoGPT's model.py, float64; tests/fixtures/make_gpt.py)
# gives exactly the files nanoGPT's gradients make, every value within 1e-10; the same folder in
# float32 within 2e-5. Bad input: exit 2, one line on stderr naming the file or field, no OUT.
set -u
xgrad=$1
case_dir=$2/gpt/gpt_cli
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
/usr/bin/python3 -c 'import numpy' || fail "python3-numpy is needed (scripts/packages.sh installs it)"

compare() {  # compare EXPECTED_DIR GOT_DIR TOLERANCE
    [ "$(ls "$1")" = "$(ls "$2")" ] || fail "files differ: $(ls "$2" | tr '\n' ' ')"
    /usr/bin/python3 - "$1" "$2" "$3" <<'PY' || fail "values differ"
import os, sys
import numpy as np
want_dir, got_dir, tol = sys.argv[1], sys.argv[2], float(sys.argv[3])
for f in sorted(os.listdir(want_dir)):
    want, got = np.load(os.path.join(want_dir, f)), np.load(os.path.join(got_dir, f))
    err = (np.abs(want - got.astype(np.float64)) / (1 + np.abs(want))).max()
    if want.shape != got.shape or not err <= tol:
        sys.exit(f"{f}: shape {got.shape} vs {want.shape}, max relative error {err}")
PY
}

"$xgrad" gpt --from "$case_dir" --to "$work/out64" || fail "float64: exit status $?"
compare "$case_dir/expected" "$work/out64" 1e-10
echo "ok float64 against nanoGPT"

mkdir "$work/in32"
cp "$case_dir"/*.npy "$case_dir/config.json" "$work/in32/"
/usr/bin/python3 - "$work/in32" <<'PY'
import glob, sys
import numpy as np
for f in glob.glob(sys.argv[1] + "/transformer.*.npy") + glob.glob(sys.argv[1] + "/lm_head.*.npy"):
    np.save(f, np.load(f).astype(np.float32))
PY
"$xgrad" gpt --from "$work/in32" --to "$work/out32" || fail "float32: exit status $?"
compare "$case_dir/expected" "$work/out32" 2e-5
echo "ok float32 against nanoGPT"

expect_error() {  # expect_error NAME PATTERN: run on $work/bad, one line matching PATTERN, exit 2, no output
    "$xgrad" gpt --from "$work/bad" --to "$work/bad_out" 2> "$work/err"
    status=$?
    [ "$status" -eq 2 ] || fail "$1: exit status $status, expected 2"
    [ "$(wc -l < "$work/err")" -eq 1 ] || fail "$1: expected one line on stderr: $(cat "$work/err")"
    grep -q "$2" "$work/err" || fail "$1: unexpected message: $(cat "$work/err")"
    [ ! -e "$work/bad_out" ] || fail "$1: left an output folder"
    echo "ok $1: $(cat "$work/err")"
}
fresh_bad() { rm -rf "$work/bad"; cp -r "$case_dir" "$work/bad"; rm -rf "$work/bad/expected"; }

fresh_bad; rm "$work/bad/transformer.h.1.mlp.c_fc.weight.npy"
expect_error "missing parameter" "transformer.h.1.mlp.c_fc.weight.npy"
fresh_bad; sed -i 's/"erf"/"relu"/' "$work/bad/config.json"
expect_error "bad gelu" 'config.json: field "gelu" must be "erf" or "tanh", got "relu"'
fresh_bad; /usr/bin/python3 -c "import numpy as np; a = np.load('$work/bad/targets.npy'); a[0, 0] = 13; np.save('$work/bad/targets.npy', a)"
expect_error "target out of range" "targets.npy: element 0 is 13, outside \[-1 (ignored), 0, 13)"
fresh_bad; /usr/bin/python3 -c "import numpy as np; a = np.load('$work/bad/transformer.h.0.attn.bias.npy'); a[0, 0, 0, 3] = 1; np.save('$work/bad/transformer.h.0.attn.bias.npy', a)"
expect_error "not a causal buffer" "transformer.h.0.attn.bias of shape (1, 1, 8, 8) is not a causal mask"
