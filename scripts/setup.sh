# Sourced by ./scripts/test and ./scripts/demo: installs the missing Debian packages, then
# configures and builds xgrad in build/.
set -eu
cd "$(dirname "$0")/.."
. scripts/packages.sh

# shellcheck disable=SC2086
xgrad_install_missing $XGRAD_PACKAGES

if [ ! -f build/build.ninja ]; then
  # Unity groups of 6 files: the units share their template instantiations, which builds about
  # 40% faster on two cores (scripts/sanitize does the same).
  meson setup build --buildtype=release -Dunity=on -Dunity_size=6
fi
# Two compile jobs: a translation unit of xtensor templates needs about 1 GB.
meson compile -C build -j "${XGRAD_JOBS:-2}"
