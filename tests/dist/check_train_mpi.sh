#!/bin/sh
# shellcheck disable=SC2086  # $opts is a list of options
# `mpirun -np 2 xgrad train COMMAND` (copy, sort) against one process: the same global batch gives
# the same loss curve up to float32 rounding and the same held-out score; only rank 0 prints and
# writes; resuming under mpirun is bit for bit; a --batch the ranks cannot share is one clear error.
#
#   check_train_mpi.sh [--ranks N] MPIRUN_SH XGRAD COMMAND STEPS SCORE TOLERANCE [OPTION...]
#
# --ranks N: N ranks instead of 2. Under tests/dist/two_hosts.sh, MPIRUN_SH spreads them over its hosts.
# SCORE: the metrics.json field the two runs must agree on within TOLERANCE; OPTIONs go to every
# run. XGRAD_TRAIN_COPY_STEPS replaces STEPS for copy (scripts/sanitize: a slow build).
set -eu
np=2
[ "$1" != --ranks ] || { np=$2; shift 2; }
mpirun_sh=$1 xgrad=$2 cmd=$3 steps=$4 score=$5 tolerance=$6
shift 6
[ "$cmd" = copy ] && steps=${XGRAD_TRAIN_COPY_STEPS:-$steps}
half=$((steps / 2))
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
opts="$* --steps $steps --eval-every $steps"

"$xgrad" train "$cmd" $opts --out "$dir/one" > /dev/null
"$mpirun_sh" -np "$np" "$xgrad" train "$cmd" $opts --out "$dir/many" > "$dir/many.txt"
[ "$(grep -c "^$cmd task:" "$dir/many.txt")" -eq 1 ] || { echo "expected one header line (rank 0 only)"; cat "$dir/many.txt"; exit 1; }
# mpirun hands rank 0 a pseudo-terminal even with its output in a file: plain lines, never a bar.
cr=$(printf '\r')
! grep -q "$cr" "$dir/many.txt" || { echo "the log of a run under mpirun holds carriage returns (a progress bar)"; exit 1; }
grep -q "^step *$steps/$steps " "$dir/many.txt" || { echo "the log of a run under mpirun lacks its last progress line"; cat "$dir/many.txt"; exit 1; }
grep -q "\"world_size\": $np" "$dir/many/metrics.json" || { echo "metrics.json lacks world_size $np"; exit 1; }
grep -q '"world_size": 1' "$dir/one/metrics.json" || { echo "metrics.json lacks world_size 1"; exit 1; }

# The loss curves (column 2 of each loss.csv): relative differences of float32 rounding (the
# shards' gradients are added in another order), the same score.
paste -d, "$dir/one/loss.csv" "$dir/many/loss.csv" | awk -F, -v np="$np" '
  NR > 1 { d = $2 - $(NF / 2 + 2); if (d < 0) d = -d; r = d / $2; if (r > worst) { worst = r; at = $1 }
           if (NR <= 11 && r > worst10) worst10 = r }
  END { printf "loss, %d ranks against 1 process: largest relative difference %.2e (step %d), %.2e over the first 10 steps\n", np, worst, at, worst10
        if (worst10 > 1e-5 || worst > 1e-4) exit 1 }' || { echo "the loss curves differ beyond float32 rounding"; exit 1; }
score1=$(sed -n "s/.*\"$score\": *\([0-9.e-]*\).*/\1/p" "$dir/one/metrics.json")
score2=$(sed -n "s/.*\"$score\": *\([0-9.e-]*\).*/\1/p" "$dir/many/metrics.json")
echo "held-out $score: 1 process $score1, $np ranks $score2"
awk -v a="$score1" -v b="$score2" -v t="$tolerance" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= t) }' ||
  { echo "the held-out scores differ by more than $tolerance"; exit 1; }

# Resume under mpirun: the rest of the steps bit-identical to the uninterrupted $np-rank run.
"$mpirun_sh" -np "$np" "$xgrad" train "$cmd" "$@" --steps "$half" --eval-every "$steps" --out "$dir/half" > /dev/null
"$mpirun_sh" -np "$np" "$xgrad" train "$cmd" $opts --resume "$dir/half/checkpoint.npz" --out "$dir/resumed" > /dev/null
rest=$((steps - half))
tail -n "$rest" "$dir/many/loss.csv" > "$dir/many-tail.csv"
tail -n "$rest" "$dir/resumed/loss.csv" > "$dir/resumed-tail.csv"
cmp "$dir/many-tail.csv" "$dir/resumed-tail.csv" || { echo "steps $((half + 1))-$steps differ after resuming"; exit 1; }
echo "resumed under mpirun after $half steps: steps $((half + 1))-$steps bit-identical"

# A global batch the ranks cannot share evenly: one line naming it, exit status 2, no folder.
status=0
"$mpirun_sh" -np "$np" "$xgrad" train "$cmd" --batch 33 --steps 5 --out "$dir/odd" > /dev/null 2> "$dir/err.txt" || status=$?
# Across the two hosts Open MPI 4.1's mpirun itself sometimes segfaults (status 139, in its PMIx log
# handler) while relaying the abort over TCP, even with one rank aborting: there the ranks' message and
# no folder are checked, the status only on one host (the dist-train-* tests).
crash_ok=
[ -z "${XGRAD_HOSTS:-}" ] || crash_ok=139
[ "$status" -eq 2 ] || [ "$status" = "$crash_ok" ] ||
  { echo "--batch 33 over $np ranks: expected exit status 2, got $status"; cat "$dir/err.txt"; exit 1; }
grep -q "^xgrad train $cmd: rank [0-9]*: --batch (33) is the global batch and must be a multiple of the $np ranks" "$dir/err.txt" ||
  { echo "--batch 33 over $np ranks: unexpected message"; cat "$dir/err.txt"; exit 1; }
[ ! -e "$dir/odd" ] || { echo "a failed run left an output folder"; exit 1; }
# An N-rank checkpoint resumed by one process: exit 2, the reason in one line.
status=0
"$xgrad" train "$cmd" $opts --resume "$dir/half/checkpoint.npz" > /dev/null 2> "$dir/err.txt" || status=$?
[ "$status" -eq 2 ] && grep -q "the checkpoint was made by $np ranks; resume it with mpirun -np $np" "$dir/err.txt" ||
  { echo "a $np-rank checkpoint in one process: unexpected outcome ($status)"; cat "$dir/err.txt"; exit 1; }
echo "errors: --batch 33 over $np ranks and a $np-rank checkpoint in one process are one line each"
# A command that does not run data-parallel is refused under mpirun (its ranks would each write the same files).
status=0
"$mpirun_sh" -np "$np" "$xgrad" train mlp > /dev/null 2> "$dir/err.txt" || status=$?
[ "$status" -ne 0 ] && grep -q "^xgrad train mlp: does not run under mpirun (data-parallel commands: xgrad bench, xgrad train copy, xgrad train gpt, xgrad train llama, xgrad train sort)$" \
  "$dir/err.txt" || { echo "train mlp under mpirun: unexpected outcome ($status)"; cat "$dir/err.txt"; exit 1; }
echo "train mlp under mpirun: refused in one line"
