#!/bin/sh
# Runs `xgrad gradcheck`; passes when it exits 0 and its last line reports >= 40 passed, 0 failed.
out=$("$1" gradcheck) || { echo "$out"; echo "xgrad gradcheck exited nonzero"; exit 1; }
echo "$out"
last=$(echo "$out" | tail -n 1)
passed=$(echo "$last" | sed -n 's/^\([0-9]*\) passed, 0 failed$/\1/p')
[ -n "$passed" ] && [ "$passed" -ge 40 ] || { echo "expected '>= 40 passed, 0 failed', got: $last"; exit 1; }
