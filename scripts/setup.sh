# Sourced by ./scripts/test and ./scripts/demo: installs the missing Debian packages and configures
# build/ (once); they then build what they run with xgrad_compile (scripts/build.sh). One line a step,
# the full logs in build/meson-logs/ (README: "Two commands").
set -eu
cd "$(dirname "$0")/.."
. scripts/packages.sh
. scripts/build.sh

# shellcheck disable=SC2086
xgrad_install_missing $XGRAD_PACKAGES

# Unity groups of 6 files: the units share their template instantiations, which builds about
# 40% faster on two cores (scripts/sanitize does the same).
xgrad_configure build --buildtype=release -Dunity=on -Dunity_size=6
