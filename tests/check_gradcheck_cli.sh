#!/bin/sh
# `xgrad gradcheck`: --list names >= 40 registered checks; a --filter subset runs and its last line
# reports every one of them passed (the unit tests run every case: tests/check/registry.cpp); a bad
# --filter is a one-line error with exit code 2. Usage: check_gradcheck_cli.sh XGRAD XGRAD_GRADCHECK
# XGRAD is linked without the cases and runs XGRAD_GRADCHECK, the tool with them, from its folder
# (commands/gradcheck.cpp): every check below goes through that; without it, one line and exit 2.
xgrad=$1
with_cases=$2
fail() { echo "$1"; exit 1; }
[ "$(dirname "$xgrad")" = "$(dirname "$with_cases")" ] || fail "expected $with_cases beside $xgrad"

alone=$(mktemp -d)
trap 'rm -rf "$alone"' EXIT
cp "$xgrad" "$alone/xgrad"
err=$("$alone/xgrad" gradcheck --list 2>&1); status=$?
[ "$status" = 2 ] && [ "$(echo "$err" | wc -l)" = 1 ] && echo "$err" | grep -q "xgrad-gradcheck, which is not built" ||
  fail "xgrad without xgrad-gradcheck beside it: expected one line and exit 2, got $status: $err"
echo "alone: $err"

list=$("$xgrad" gradcheck --list) || fail "xgrad gradcheck --list exited nonzero"
count=$(echo "$list" | tail -n 1 | sed -n 's/^\([0-9]*\) checks$/\1/p')
[ -n "$count" ] && [ "$count" -ge 40 ] || fail "expected '>= 40 checks', got: $(echo "$list" | tail -n 1)"
echo "$count registered checks"

# the linalg and reduce ops: cheap, and both families
filter='^(matmul|linear|sum)$'
listed=$("$xgrad" gradcheck --list --filter "$filter" | tail -n 1 | sed -n 's/^\([0-9]*\) checks$/\1/p')
out=$("$xgrad" gradcheck --filter "$filter") || { echo "$out"; fail "xgrad gradcheck --filter exited nonzero"; }
echo "$out"
last=$(echo "$out" | tail -n 1)
[ "$last" = "$listed passed, 0 failed" ] && [ "$listed" -ge 10 ] ||
  fail "expected '$listed passed, 0 failed' (>= 10), got: $last"
rows=$(echo "$out" | grep -c ' pass$')
[ "$rows" = "$listed" ] || fail "expected $listed rows ending in 'pass', got $rows"

err=$("$xgrad" gradcheck --filter '(' 2>&1); status=$?
[ "$status" = 2 ] && [ "$(echo "$err" | wc -l)" = 1 ] || fail "a bad --filter: expected one line and exit 2, got $status: $err"
echo "bad filter: $err"
