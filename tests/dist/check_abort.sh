#!/bin/sh
# A rank that throws ends the job: its one-line message, a nonzero exit status, and well within
# mpirun's --timeout (a hang would take the full 60 s and exit with the timeout's status).
set -eu
mpirun_sh=$1
program=$2
err=$(mktemp); trap 'rm -f "$err"' EXIT
start=$(date +%s)
status=0
"$mpirun_sh" --timeout 60 -np 2 "$program" 2> "$err" || status=$?
elapsed=$(( $(date +%s) - start ))
[ "$status" -ne 0 ] || { echo "the job exited 0 although rank 1 threw"; cat "$err"; exit 1; }
grep -q "^xgrad: rank 1: a failure on the last rank only$" "$err" ||
  { echo "the thrower's message is missing"; cat "$err"; exit 1; }
[ "$elapsed" -lt 30 ] || { echo "the job took ${elapsed} s to end (a hang until the timeout?)"; cat "$err"; exit 1; }
echo "rank 1 threw: the job ended in ${elapsed} s with status $status and the message"
