# Sourced by scripts/setup.sh and the other scripts that build xgrad.
# Compiler, build system, the libraries xgrad is written against and the default text of `xgrad
# train gpt` (README: "Packages").
# shellcheck disable=SC2034  # used by the scripts that source this file
XGRAD_PACKAGES="g++ meson ninja-build pkg-config cmake
  xtensor-dev libxtensor-blas-dev libxsimd-dev libopenblas-dev libboost-dev
  doctest-dev libcli11-dev libfmt-dev nlohmann-json3-dev libzip-dev libpcre2-dev libsentencepiece-dev libcairo2-dev fonts-dejavu-core graphviz
  python3-numpy
  libopenmpi-dev openmpi-bin libdnnl-dev fortunes"
# What ./scripts/test adds: a real browser for the explore page's test (tests/explore/); node and npm
# for the BPE tokenizer's reference, the npm package gpt-3-encoder (tests/text/check_bpe.sh): Debian's
# npm only when no npm is on the PATH (a machine with another Node.js keeps its own).
XGRAD_TEST_PACKAGES="chromium chromium-driver python3-selenium"
command -v npm > /dev/null 2>&1 || XGRAD_TEST_PACKAGES="$XGRAD_TEST_PACKAGES npm"

# xgrad_install_missing PKG...: installs those of the Debian packages PKG... that are not installed
# yet, with apt-get (as root or through sudo), quietly: its output goes to $XGRAD_APT_LOG (default
# build/meson-logs/apt-get.txt), printed with the log's path if apt-get fails.
xgrad_install_missing() {
  missing=""
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing="$missing $pkg"
  done
  [ -n "$missing" ] || return 0
  apt_log=${XGRAD_APT_LOG:-build/meson-logs/apt-get.txt}
  mkdir -p "$(dirname "$apt_log")"
  echo "xgrad: installing the missing Debian packages:$missing"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  # shellcheck disable=SC2086
  if ! { $SUDO env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
         $SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $missing
       } > "$apt_log" 2>&1; then
    tail -n 10 "$apt_log"
    echo "xgrad: apt-get failed; its full log: $apt_log"
    exit 1
  fi
}
