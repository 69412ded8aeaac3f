# shellcheck shell=sh
# shellcheck disable=SC2154  # xgrad and work: set by the script that sources this file
# Shared by the CLI checks that compare a command's .npy files with a reference run (sourced).
# fail MESSAGE: prints FAIL and exits 1. compare EXPECTED_DIR GOT_DIR TOLERANCE: the same file
# names, and every value within TOLERANCE · (1 + |expected|).
fail() { echo "FAIL: $*"; exit 1; }
/usr/bin/python3 -c 'import numpy' || fail "python3-numpy is needed (scripts/packages.sh installs it)"

compare() {
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

# expect_error COMMAND NAME PATTERN: `xgrad COMMAND --from $work/bad --to $work/bad_out` exits 2
# with one line on stderr matching PATTERN and writes nothing.
expect_error() {
    "$xgrad" "$1" --from "$work/bad" --to "$work/bad_out" 2> "$work/err"
    status=$?
    [ "$status" -eq 2 ] || fail "$2: exit status $status, expected 2"
    [ "$(wc -l < "$work/err")" -eq 1 ] || fail "$2: expected one line on stderr: $(cat "$work/err")"
    grep -q "$3" "$work/err" || fail "$2: unexpected message: $(cat "$work/err")"
    [ ! -e "$work/bad_out" ] || fail "$2: left an output folder"
    echo "ok $2: $(cat "$work/err")"
}
