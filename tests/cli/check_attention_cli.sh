#!/bin/sh
# `xgrad attention` end to end: usage check_attention_cli.sh XGRAD FIXTURES_DIR
# Every case in FIXTURES_DIR/io/attention runs (with the flags in in/args.txt) and writes exactly the
# files torch wrote, and every value is compared with python3-numpy (1e-10, float32 1e-5).
# Bad input exits 2 with one line on stderr naming the file and leaves OUT absent.
set -u
xgrad=$1
cases=$2/io/attention
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

/usr/bin/python3 -c 'import numpy' || fail "python3-numpy is needed (scripts/packages.sh installs it)"

for dir in "$cases"/*/; do
    name=$(basename "$dir")
    args=""
    [ -f "$dir/in/args.txt" ] && args=$(cat "$dir/in/args.txt")
    # shellcheck disable=SC2086
    "$xgrad" attention --from "$dir/in" --to "$work/$name" $args || fail "$name: exit status $?"
    [ "$(ls "$dir/expected")" = "$(ls "$work/$name")" ] || fail "$name: files differ: $(ls "$work/$name")"
    /usr/bin/python3 - "$dir/expected" "$work/$name" <<'EOF' || fail "$name: values differ"
import os, sys
import numpy as np
want_dir, got_dir = sys.argv[1:]
for f in sorted(os.listdir(want_dir)):
    want, got = np.load(os.path.join(want_dir, f)), np.load(os.path.join(got_dir, f))
    tol = 1e-5 if want.dtype == np.float32 else 1e-10
    err = np.abs(want.astype(np.float64) - got.astype(np.float64)).max()
    if want.shape != got.shape or want.dtype != got.dtype or not err <= tol:
        sys.exit(f"{f}: shape {got.shape} {got.dtype} vs {want.shape} {want.dtype}, max abs error {err}")
EOF
    echo "ok $name"
done

# bad input: a missing parameter file
cp -r "$cases/basic/in" "$work/bad"
rm "$work/bad/out_proj.weight.npy"
"$xgrad" attention --from "$work/bad" --to "$work/bad_out" 2>"$work/err"
status=$?
[ $status -eq 2 ] || fail "missing file: exit status $status, expected 2"
[ "$(wc -l <"$work/err")" -eq 1 ] || fail "missing file: expected one line on stderr, got: $(cat "$work/err")"
grep -q 'out_proj.weight.npy' "$work/err" || fail "missing file: stderr does not name the file: $(cat "$work/err")"
[ ! -e "$work/bad_out" ] || fail "missing file: OUT was written"
ls -a "$work" | grep -q 'tmp' && fail "a temporary directory was left behind"

# bad input: a config field of the wrong type
cp "$cases/basic/in/out_proj.weight.npy" "$work/bad/"
sed 's/"bias": true/"bias": "yes"/' "$cases/basic/in/config.json" >"$work/bad/config.json"
"$xgrad" attention --from "$work/bad" --to "$work/bad_out" 2>"$work/err"
status=$?
[ $status -eq 2 ] || fail "bad config: exit status $status, expected 2"
grep -q 'config.json: field "bias"' "$work/err" || fail "bad config: stderr: $(cat "$work/err")"
[ ! -e "$work/bad_out" ] || fail "bad config: OUT was written"
echo "all attention CLI checks passed"
