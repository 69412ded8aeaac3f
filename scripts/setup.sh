# Sourced by ./scripts/test and ./scripts/demo: installs the missing Debian packages, then
# configures and builds xgrad in build/.
set -eu
cd "$(dirname "$0")/.."
. scripts/packages.sh

# shellcheck disable=SC2086
xgrad_install_missing $XGRAD_PACKAGES

if [ ! -f build/build.ninja ]; then
  meson setup build --buildtype=release
fi
# Two compile jobs: a translation unit of xtensor templates needs about 1 GB.
meson compile -C build -j "${XGRAD_JOBS:-2}"
