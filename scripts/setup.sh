# Sourced by ./scripts/test and ./scripts/demo: installs the missing Debian packages, then
# configures and builds xgrad in build/.
set -eu
cd "$(dirname "$0")/.."

# Compiler, build system and the libraries xgrad is written against (README: "Packages").
XGRAD_PACKAGES="g++ meson ninja-build pkg-config cmake
  xtensor-dev libxtensor-blas-dev libxsimd-dev libopenblas-dev libboost-dev
  doctest-dev libcli11-dev libfmt-dev nlohmann-json3-dev libzip-dev"

missing=""
for pkg in $XGRAD_PACKAGES; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
done
if [ -n "$missing" ]; then
  echo "xgrad: installing missing Debian packages:$missing"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -q
  # shellcheck disable=SC2086
  $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $missing
fi

if [ ! -f build/build.ninja ]; then
  meson setup build --buildtype=release
fi
# Two compile jobs: a translation unit of xtensor templates needs about 1 GB.
meson compile -C build -j "${XGRAD_JOBS:-2}"
