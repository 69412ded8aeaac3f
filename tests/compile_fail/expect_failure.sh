#!/bin/sh
# expect_failure.sh SNIPPET INCLUDE_DIR COMPILER...: passes when compiling SNIPPET fails with the
# message given on the snippet's "// expect:" line, and, when it has an "// errors: N" line, with
# exactly N "error:" lines (one readable message, not a cascade).
snippet=$1; include=$2; shift 2
expected=$(sed -n 's|^// expect: ||p' "$snippet")
[ -n "$expected" ] || { echo "$snippet has no '// expect:' line"; exit 1; }
log=$(mktemp); trap 'rm -f "$log"' EXIT
if "$@" -std=c++20 -fsyntax-only -I"$include" "$snippet" >"$log" 2>&1; then
  echo "$snippet compiled, but it must not"; exit 1
fi
if ! grep -qF "$expected" "$log"; then
  echo "$snippet failed to compile, but without the message '$expected':"; head -40 "$log"; exit 1
fi
errors=$(sed -n 's|^// errors: ||p' "$snippet")
if [ -n "$errors" ] && [ "$(grep -c 'error:' "$log")" -ne "$errors" ]; then
  echo "$snippet: expected $errors error(s), got $(grep -c 'error:' "$log"):"; grep 'error:' "$log" | head -20; exit 1
fi
echo "failed as expected: $expected"
