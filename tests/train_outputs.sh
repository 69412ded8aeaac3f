# Shell functions shared by the `xgrad train` checks (sourced: `. "$(dirname "$0")/train_outputs.sh"`).

# check_train_outputs DIR: the five files of a run's --out folder exist, the pictures are PNGs.
check_train_outputs() {
  for f in metrics.json loss.csv loss.png attention.png checkpoint.npz; do
    [ -s "$1/$f" ] || { echo "missing $f"; exit 1; }
  done
  for f in loss.png attention.png; do
    [ "$(head -c 8 "$1/$f" | od -An -tx1 | tr -d ' \n')" = "89504e470d0a1a0a" ] || { echo "$f is not a PNG"; exit 1; }
  done
}

# check_resumed_tail FULL RESUMED REST: RESUMED/loss.csv holds REST steps, bit-identical to the
# last REST rows of FULL/loss.csv (the same run uninterrupted).
check_resumed_tail() {
  [ "$(wc -l < "$2/loss.csv")" -eq $(($3 + 1)) ] || { echo "resumed run: expected $3 rows in loss.csv"; exit 1; }
  tail -n "$3" "$1/loss.csv" > "$1.tail.csv"
  tail -n "$3" "$2/loss.csv" > "$2.tail.csv"
  cmp "$1.tail.csv" "$2.tail.csv" || { echo "the last $3 steps differ after resuming"; exit 1; }
}

# expect_error NAME PATTERN COMMAND...: COMMAND fails with exit status 2 and one line on stderr
# matching PATTERN (the caller's $dir holds the line; fail() is the caller's).
expect_error() {  # expect_error NAME PATTERN COMMAND...
  name=$1 pattern=$2; shift 2
  status=0
  "$@" > /dev/null 2> "$dir/err" || status=$?
  [ "$status" -eq 2 ] || fail "$name: exit status $status, expected 2"
  [ "$(wc -l < "$dir/err")" -eq 1 ] || fail "$name: expected one line on stderr: $(cat "$dir/err")"
  grep -q "$pattern" "$dir/err" || fail "$name: unexpected message: $(cat "$dir/err")"
  echo "ok $name"
}
