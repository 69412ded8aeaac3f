#!/bin/sh
# GPT-2's BPE against its reference, the npm package gpt-3-encoder (pinned): installs it once into
# the build folder (gpt2_package.sh), makes the reference ids with gpt2_reference.js and runs the
# BPE tests on them.   check_bpe.sh TEST_EXECUTABLE BUILD_SUBFOLDER
# Skipped (exit status 77) when npm or node is missing (Debian's npm package).
set -eu
exe=$1
ref=$2/gpt2-reference
here=$(dirname "$0")
package=$("$here/gpt2_package.sh" "$2") || exit $?
node "$here/gpt2_reference.js" "$package" "$ref"
XGRAD_GPT2_REFERENCE=$ref exec "$exe"
