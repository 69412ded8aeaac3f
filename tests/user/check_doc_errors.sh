#!/bin/sh
# check_doc_errors.sh PYTHON DOC_BLOCKS_PY ROOT EXPECT_FAILURE_SH INCLUDE_DIR DOC.md... -- COMPILER...:
# the docs' blocks marked `<!-- compile: error TEXT -->` each fail to compile with TEXT.
set -eu
python=$1 generator=$2 root=$3 expect=$4 include=$5
shift 5
docs=""
while [ "$1" != "--" ]; do docs="$docs $1"; shift; done
shift
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
# shellcheck disable=SC2086
"$python" "$generator" "$dir/blocks.cpp" "$dir/errors" "$root" $docs
count=0
for snippet in "$dir"/errors/*.cpp; do
  [ -e "$snippet" ] || break
  sh "$expect" "$snippet" "$include" "$@"
  count=$((count + 1))
done
[ "$count" -gt 0 ] || { echo "no block of the docs is marked to fail (docs/options.md has one)"; exit 1; }
echo "$count block(s) failed to compile as their docs say"
