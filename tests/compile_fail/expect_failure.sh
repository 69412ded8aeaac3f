#!/bin/sh
# expect_failure.sh SNIPPET INCLUDE_DIR COMPILER...: passes when compiling SNIPPET fails with the
# message given on the snippet's "// expect:" line.
snippet=$1; include=$2; shift 2
expected=$(sed -n 's|^// expect: ||p' "$snippet")
[ -n "$expected" ] || { echo "$snippet has no '// expect:' line"; exit 1; }
log=$(mktemp); trap 'rm -f "$log"' EXIT
if "$@" -std=c++20 -fsyntax-only -I"$include" "$snippet" >"$log" 2>&1; then
  echo "$snippet compiled, but it must not"; exit 1
fi
if grep -qF "$expected" "$log"; then echo "failed as expected: $expected"; exit 0; fi
echo "$snippet failed to compile, but without the message '$expected':"; head -40 "$log"; exit 1
