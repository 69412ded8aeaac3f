#!/bin/sh
# `meson install` of this build into a scratch folder, then examples/consumer, a project of its own,
# built against it through xgrad.pc (pkg-config) and run: headers, tool and xgrad.pc all installed.
#   check_install.sh BUILD_DIR SOURCE_DIR
set -eu
build=$1
src=$2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
meson install -C "$build" --destdir "$dir/root" --no-rebuild --quiet > "$dir/install.log"
pc=$(find "$dir/root" -name xgrad.pc)
[ -n "$pc" ] || { echo "xgrad.pc was not installed"; exit 1; }
[ -n "$(find "$dir/root" -path '*/include/xgrad/nn/attention.hpp')" ] || { echo "headers not installed"; exit 1; }
[ -n "$(find "$dir/root" -path '*/bin/xgrad' -type f)" ] || { echo "the xgrad tool was not installed"; exit 1; }
# xgrad.pc is relocatable (its prefix follows its folder), so the scratch install is found as it is.
export PKG_CONFIG_PATH="$(dirname "$pc")"
echo "pkg-config --cflags xgrad: $(pkg-config --cflags xgrad)"
meson setup "$dir/consumer" "$src/examples/consumer" > "$dir/setup.log" || { cat "$dir/setup.log"; exit 1; }
meson compile -C "$dir/consumer" > "$dir/compile.log" || { cat "$dir/compile.log"; exit 1; }
"$dir/consumer/consumer"
