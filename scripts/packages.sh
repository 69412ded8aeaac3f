# Sourced by scripts/setup.sh and the other scripts that build xgrad.
# Compiler, build system and the libraries xgrad is written against (README: "Packages").
# shellcheck disable=SC2034  # used by the scripts that source this file
XGRAD_PACKAGES="g++ meson ninja-build pkg-config cmake
  xtensor-dev libxtensor-blas-dev libxsimd-dev libopenblas-dev libboost-dev
  doctest-dev libcli11-dev libfmt-dev nlohmann-json3-dev libzip-dev libcairo2-dev fonts-dejavu-core graphviz python3-numpy"

# xgrad_install_missing PKG...: installs those of the Debian packages PKG... that are not installed
# yet, with apt-get (as root or through sudo).
xgrad_install_missing() {
  missing=""
  for pkg in "$@"; do
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
}
