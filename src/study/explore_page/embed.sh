#!/bin/sh
# Writes OUT, a C++ file with one string per FILE (page.js -> xgrad::cli::explore_assets::page_js),
# so that the tool carries the explore page's parts (study/explore_page.cpp): embed.sh OUT FILE...
set -eu
out=$1
shift
{
  echo '// Generated from src/study/explore_page/ by embed.sh at build time; edit those files.'
  echo 'namespace xgrad::cli::explore_assets {'
  for f in "$@"; do
    name=$(basename "$f" | tr '.-' '__')
    if grep -q ')xgrad_asset"' "$f"; then echo "embed.sh: $f contains the string delimiter" >&2; exit 1; fi
    printf 'extern const char* const %s;\nconst char* const %s = R"xgrad_asset(' "$name" "$name"
    cat "$f"
    printf ')xgrad_asset";\n'
  done
  echo '}  // namespace xgrad::cli::explore_assets'
} >"$out"
