#!/bin/sh
# `xgrad inspect` end to end: usage check_inspect_cli.sh XGRAD FIXTURES_DIR
# On the torch-made problem io/attention/basic: the listing names every MHA step, --dump writes every
# value and gradient (the output and the leaf gradients equal torch's; softmax of the dumped scores
# equals the dumped weights; checked with python3-numpy), --dot renders with Graphviz. When key
# and value equal query the tape shows the packed self-attention path. Bad input exits 2 with one
# line on stderr and writes nothing.
set -u
xgrad=$1
basic=$2/io/attention/basic
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

"$xgrad" inspect --from "$basic/in" --dot "$work/graph.dot" --dump "$work/dump" >"$work/out" ||
    fail "exit status $?"
# listing rows: "<position>  <op>  <name>  <shape>  <inputs>"
for row in '8 +linear +q +\(3, 2, 4\) +query, W_q, b_q$' \
           '9 +attention_weights +weights +\(4, 3, 5\) +q, k$' \
           '\(inside\) +weights.scores +\(4, 3, 5\)' \
           '10 +attention_context +context +\(3, 2, 4\) +weights, v$' \
           '11 +linear +output +\(3, 2, 4\) +context, out_proj.weight, out_proj.bias$' \
           '^backward: 12 of 14 ops reached' \
           '^ +query +parameter +\(3, 2, 4\) +[0-9.]+e[-+][0-9]+$'; do
    grep -Eq "$row" "$work/out" || fail "no line matching '$row' in: $(cat "$work/out")"
done

[ -f "$work/dump/09-weights.scores.grad.npy" ] || fail "--dump: no 09-weights.scores.grad.npy: $(ls "$work/dump")"
[ -f "$work/dump/12-reshape.npy" ] || fail "--dump: an unnamed op is not named after its op: $(ls "$work/dump")"
[ ! -e "$work/dump/12-reshape.grad.npy" ] || fail "--dump: a gradient file for an op no gradient reached"
[ "$(ls "$work/dump" | wc -l)" -eq 42 ] || fail "--dump: expected 42 files (7 leaves and 12 reached ops with gradients, 2 ops without, the scores and their gradient), got $(ls "$work/dump" | wc -l)"
/usr/bin/python3 -c 'import numpy' || fail "python3-numpy is needed (scripts/packages.sh installs it)"
/usr/bin/python3 - "$basic/expected" "$work/dump" <<'EOF' || fail "--dump: values differ"
import sys
import numpy as np
want, got = sys.argv[1:]
def close(a, b, what):
    a, b = np.load(a), np.load(b)
    if a.shape != b.shape or not np.abs(a - b).max() <= 1e-10:
        sys.exit(f"{what}: {b.shape} vs {a.shape}, max abs error {np.abs(a - b).max()}")
close(f"{want}/output.npy", f"{got}/11-output.npy", "output")
close(f"{want}/attn_weights.npy", f"{got}/13-attn_weights.npy", "attn_weights")
for leaf in ["query", "key", "value", "in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"]:
    close(f"{want}/grad.{leaf}.npy", f"{got}/{leaf}.grad.npy", leaf + " gradient")
s, w = np.load(f"{got}/09-weights.scores.npy"), np.load(f"{got}/09-weights.npy")
p = np.exp(s - s.max(-1, keepdims=True))
p /= p.sum(-1, keepdims=True)
if not np.abs(p - w).max() <= 1e-12: sys.exit(f"softmax(scores) != weights: {np.abs(p - w).max()}")
ds, dw = np.load(f"{got}/09-weights.scores.grad.npy"), np.load(f"{got}/09-weights.grad.npy")
want_ds = w * (dw - (dw * w).sum(-1, keepdims=True))  # the softmax's backward, from the dumped weights
if not np.abs(ds - want_ds).max() <= 1e-12: sys.exit(f"scores gradient: {np.abs(ds - want_ds).max()}")
EOF
head -1 "$work/graph.dot" | grep -q '^digraph tape {$' || fail "--dot: $(head -1 "$work/graph.dot")"
command -v dot >/dev/null || fail "graphviz is needed (scripts/packages.sh installs it)"
dot -Tsvg "$work/graph.dot" -o "$work/graph.svg" || fail "--dot: Graphviz cannot render the file"
grep -q '#9 attention_weights' "$work/graph.svg" || fail "--dot: the rendered graph lacks the attention_weights node"

# self-attention: key.npy and value.npy are copies of query.npy
mkdir "$work/self"
cp "$basic/in/"*.npy "$basic/in/config.json" "$work/self/"
rm "$work/self/attn_mask.npy" "$work/self/key_padding_mask.npy"
cp "$basic/in/query.npy" "$work/self/key.npy"
cp "$basic/in/query.npy" "$work/self/value.npy"
"$xgrad" inspect --from "$work/self" >"$work/out" || fail "self-attention: exit status $?"
grep -Eq '^ +0 +linear +qkv +\(3, 2, 12\) +x, in_proj_weight, in_proj_bias$' "$work/out" ||
    fail "self-attention: no packed in-projection: $(cat "$work/out")"
grep -Eq '1 +attention_weights +weights +\(4, 3, 3\) +qkv, qkv$' "$work/out" || fail "self-attention: weights row"

# bad input: a missing parameter file; nothing written
rm "$work/self/out_proj.bias.npy"
"$xgrad" inspect --from "$work/self" --dot "$work/bad.dot" --dump "$work/bad" >"$work/out" 2>"$work/err"
status=$?
[ $status -eq 2 ] || fail "missing file: exit status $status, expected 2"
[ "$(wc -l <"$work/err")" -eq 1 ] || fail "missing file: expected one line on stderr, got: $(cat "$work/err")"
grep -q '^xgrad inspect: .*out_proj.bias.npy' "$work/err" || fail "missing file: stderr: $(cat "$work/err")"
[ ! -s "$work/out" ] || fail "missing file: stdout is not empty"
[ ! -e "$work/bad" ] && [ ! -e "$work/bad.dot" ] || fail "missing file: output was written"
# a dump folder whose parent does not exist
"$xgrad" inspect --from "$basic/in" --dump "$work/no/such/dir" >/dev/null 2>"$work/err"
[ $? -eq 2 ] && grep -q 'parent directory does not exist' "$work/err" || fail "bad --dump: $(cat "$work/err")"
# a failure after the dump was staged (--dot names a directory): no dump, no temporary files
mkdir "$work/adir"
"$xgrad" inspect --from "$basic/in" --dot "$work/adir" --dump "$work/late" >/dev/null 2>"$work/err"
status=$?
[ $status -eq 2 ] && [ "$(wc -l <"$work/err")" -eq 1 ] || fail "dot onto a directory: status $status: $(cat "$work/err")"
[ ! -e "$work/late" ] || fail "dot onto a directory: the dump was left behind"
ls -a "$work" | grep -q 'tmp' && fail "dot onto a directory: temporary files left: $(ls -a "$work")"
echo "all inspect CLI checks passed"
