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
. "$(dirname "$0")/npy_compare.sh"

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

fresh_bad() { rm -rf "$work/bad"; cp -r "$case_dir" "$work/bad"; rm -rf "$work/bad/expected"; }

fresh_bad; rm "$work/bad/transformer.h.1.mlp.c_fc.weight.npy"
expect_error gpt "missing parameter" "transformer.h.1.mlp.c_fc.weight.npy"
fresh_bad; sed -i 's/"erf"/"relu"/' "$work/bad/config.json"
expect_error gpt "bad gelu" 'config.json: field "gelu" must be "erf" or "tanh", got "relu"'
fresh_bad; /usr/bin/python3 -c "import numpy as np; a = np.load('$work/bad/targets.npy'); a[0, 0] = 13; np.save('$work/bad/targets.npy', a)"
expect_error gpt "target out of range" "targets.npy: element 0 is 13, outside \[-1 (ignored), 0, 13)"
fresh_bad; /usr/bin/python3 -c "import numpy as np; a = np.load('$work/bad/transformer.h.0.attn.bias.npy'); a[0, 0, 0, 3] = 1; np.save('$work/bad/transformer.h.0.attn.bias.npy', a)"
expect_error gpt "not a causal buffer" "transformer.h.0.attn.bias of shape (1, 1, 8, 8) is not a causal mask"
