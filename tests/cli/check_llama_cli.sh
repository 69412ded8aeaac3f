#!/bin/sh
# `xgrad llama` end to end: usage check_llama_cli.sh XGRAD FIXTURES_DIR
# The folder tests/fixtures/llama/llama_cli (llama2.c's model.py, float64 with its float32 casts made
# no-ops, grouped-query attention; tests/fixtures/make_llama.py) gives exactly the files model.py's
# gradients make, every value within 1e-10; the same folder in float32 within 2e-5. Bad input: exit
# 2, one line on stderr naming the file or field, no OUT.
set -u
xgrad=$1
case_dir=$2/llama/llama_cli
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
. "$(dirname "$0")/npy_compare.sh"

"$xgrad" llama --from "$case_dir" --to "$work/out64" || fail "float64: exit status $?"
compare "$case_dir/expected" "$work/out64" 1e-10
echo "ok float64 against llama2.c's model.py"

mkdir "$work/in32"
cp "$case_dir"/*.npy "$case_dir/config.json" "$work/in32/"
/usr/bin/python3 - "$work/in32" <<'PY'
import glob, os, sys
import numpy as np
for f in glob.glob(sys.argv[1] + "/*.npy"):
    if os.path.basename(f) not in ("idx.npy", "targets.npy"):
        np.save(f, np.load(f).astype(np.float32))
PY
"$xgrad" llama --from "$work/in32" --to "$work/out32" || fail "float32: exit status $?"
compare "$case_dir/expected" "$work/out32" 2e-5
echo "ok float32 against llama2.c's model.py"

fresh_bad() { rm -rf "$work/bad"; cp -r "$case_dir" "$work/bad"; rm -rf "$work/bad/expected"; }
edit_config() {  # edit_config PYTHON: changes c, the config's dict
    /usr/bin/python3 -c "import json; p = '$work/bad/config.json'; c = json.load(open(p)); $1; json.dump(c, open(p, 'w'))"
}

fresh_bad; rm "$work/bad/layers.1.feed_forward.w3.weight.npy"
expect_error llama "missing parameter" "layers.1.feed_forward.w3.weight.npy"
fresh_bad; edit_config "c['n_kv_heads'] = 3"
expect_error llama "kv heads not dividing" 'config.json: field "n_kv_heads" must divide n_heads 4, got 3'
fresh_bad; edit_config "del c['norm_eps']"
expect_error llama "field missing" 'config.json: field "norm_eps" is missing'
fresh_bad; edit_config "c['multiple_of'] = 'eight'"
expect_error llama "field of the wrong type" 'config.json: field "multiple_of" must be a positive integer, got "eight"'
fresh_bad; edit_config "c['dropout'] = 0.1"
expect_error llama "dropout" 'config.json: field "dropout" must be 0'
fresh_bad; edit_config "c['rope_scaling'] = 2"
expect_error llama "unknown field" 'config.json: unknown field "rope_scaling"'
fresh_bad; /usr/bin/python3 -c "import numpy as np; np.save('$work/bad/layers.0.attention.wk.weight.npy', np.zeros((16, 16)))"
expect_error llama "wrong shape" "layers.0.attention.wk.weight.npy: has shape (16, 16), expected (8, 16)"
fresh_bad; /usr/bin/python3 -c "import numpy as np; a = np.load('$work/bad/output.weight.npy'); a[0, 0] += 1; np.save('$work/bad/output.weight.npy', a)"
expect_error llama "tied pair differing" "are one tensor in the model (tied) but have different values"
fresh_bad; /usr/bin/python3 -c "import numpy as np; a = np.load('$work/bad/idx.npy'); np.save('$work/bad/idx.npy', np.zeros((1, 13), dtype=np.int64))"
expect_error llama "too long" "idx.npy: has shape (1, 13), expected (B, T) with 1 <= T <= max_seq_len 12"

# `xgrad sample` on llama2.c's checkpoint (export.py's file of model.py's float32 model): greedy ids
# as model.py's generate gives them, also past max_seq_len (8), where the window slides.
want=$(/usr/bin/python3 -c "import numpy as np; print(','.join(map(str, np.load('$2/llama/legacy_tied_greedy.npy'))))")
got=$("$xgrad" sample --checkpoint "$2/llama/legacy_tied.bin" --prompt-ids 1,2 --tokens 10 --temperature 0 --print-ids) ||
  fail "sample: exit status $?"
[ "$got" = "$want" ] || fail "sample: greedy ids $got, model.py's $want"
echo "ok sample on llama2.c's checkpoint: greedy $got"
