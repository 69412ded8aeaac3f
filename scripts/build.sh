# shellcheck shell=sh
# Sourced by scripts/setup.sh and scripts/sanitize: quiet configure and build steps. Each step is
# one line on the terminal (with ninja's [done/total] count while it compiles); its full output goes
# to a log file, whose path is printed, with the first errors, if the step fails.

# xgrad_logged LOG WHAT COMMAND...: runs COMMAND with its output in LOG, showing "xgrad: WHAT ...".
xgrad_logged() {
  log=$1 what=$2
  shift 2
  mkdir -p "$(dirname "$log")"
  : > "$log"
  : > "$log.status"
  start=$(date +%s)
  tty=
  [ ! -t 1 ] || tty=1
  printf 'xgrad: %s ...' "$what"
  # Every line goes to the log; on a terminal, the step's line is redrawn with ninja's [n/m]. (A shell
  # loop, not awk: mawk reads a pipe in blocks, which would hold the lines back.)
  { rc=0; "$@" 2>&1 || rc=$?; echo $rc > "$log.status"; } |
    while IFS= read -r line || [ -n "$line" ]; do
      printf '%s\n' "$line" >&3
      case $tty$line in
        1\[*/*\]*) printf '\r\033[Kxgrad: %s ... %s]' "$what" "${line%%]*}" ;;
      esac
    done 3>> "$log"
  status=$(cat "$log.status")
  rm -f "$log.status"
  seconds=$(( $(date +%s) - start ))
  [ -z "$tty" ] || printf '\r\033[Kxgrad: %s ...' "$what"
  if [ "$status" = 0 ]; then
    printf ' done (%dm%02ds)\n' $(( seconds / 60 )) $(( seconds % 60 ))
    return 0
  fi
  echo " failed"
  grep -m 10 -E 'error|ERROR|FAILED' "$log" || tail -n 10 "$log"
  echo "xgrad: the full log: $log"
  exit 1
}

# xgrad_werror: true when the environment says CI (CI=true): warnings fail the build there. Left
# off on other machines, whose compiler or CPU (-march=native) may warn where CI's does not.
xgrad_werror() {
  case ${CI:-} in
    '' | false | 0) echo false ;;
    *) echo true ;;
  esac
}

# xgrad_configure DIR MESON_SETUP_OPTION...: configures DIR once; an existing DIR gets werror
# switched when the environment changed it.
xgrad_configure() {
  dir=$1
  shift
  werror=$(xgrad_werror)
  if [ ! -f "$dir/build.ninja" ]; then
    xgrad_logged "$dir/meson-logs/setup.txt" "configuring $dir/" meson setup "$dir" "$@" -Dwerror="$werror"
  elif [ "$(meson configure "$dir" | awk '$1 == "werror" { print $2 }')" != "$werror" ]; then
    xgrad_logged "$dir/meson-logs/setup.txt" "configuring $dir/ with werror=$werror" \
      meson configure "$dir" -Dwerror="$werror"
  fi
}

# xgrad_compile DIR WHAT [TARGET...]: builds TARGET (default: everything) in DIR, with two compile
# jobs (XGRAD_JOBS): a translation unit of xtensor templates needs 1 to 2.2 GB (lib/nn.cpp, the most).
xgrad_compile() {
  dir=$1 what=$2
  shift 2
  xgrad_logged "$dir/meson-logs/compile.txt" "building $what" meson compile -C "$dir" -j "${XGRAD_JOBS:-2}" "$@"
  warnings=$(grep -c 'warning:' "$dir/meson-logs/compile.txt" || true)
  [ "$warnings" -eq 0 ] || echo "xgrad: $warnings compiler warnings, see $dir/meson-logs/compile.txt"
}
