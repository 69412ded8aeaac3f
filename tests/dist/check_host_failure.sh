#!/bin/sh
# Under tests/dist/two_hosts.sh: a failure on host 2 in the middle of `xgrad train gpt` ends every
# rank on both hosts within BOUND seconds, with a line that names host 2 (10.77.0.2) unless mpirun
# itself crashes relaying it (Open MPI 4.1, docs/distributed.md), never a hang;
# the last periodic checkpoint then resumes the run, bit for bit the uninterrupted run.
#
#   check_host_failure.sh kill|link-down BOUND [--ranks N] MPIRUN_SH XGRAD
#
# kill: SIGKILL to a rank on host 2. link-down: host 2's end of the link is taken down
# (`ip link set ... down`) and brought back up for the resume.
set -eu
mode=$1 bound=$2
shift 2
np=2
[ "$1" != --ranks ] || { np=$2; shift 2; }
mpirun_sh=$1 xgrad=$2
[ -n "${XGRAD_HOSTS:-}" ] || { echo "FAIL: run me under tests/dist/two_hosts.sh"; exit 1; }
ns1=${XGRAD_HOSTS% *} ns2=${XGRAD_HOSTS#* } veth2=${XGRAD_HOST_VETH#* }
text=/usr/share/games/fortunes/linux
[ -f "$text" ] || { echo "FAIL: $text is missing (Debian's fortunes package)"; exit 1; }
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
# Steps long enough (about 0.1 s) that the failure lands a step or two after the first checkpoint.
opts="--text $text --n_layer 2 --n_head 2 --n_embd 64 --block_size 64 --batch_size 16 --learning_rate 3e-3
  --warmup_iters 10 --lr_decay_iters 60 --eval_interval 1000 --eval_iters 2 --sample-tokens 10 --threads 1
  --checkpoint-every 10"
steps=60
# The processes left in a namespace (mpirun itself runs in host 1's).
left() { ip netns pids "$1"; }
now() { date +%s.%N; }

# The uninterrupted run.
# shellcheck disable=SC2086  # $opts is a list of options
"$mpirun_sh" -np "$np" "$xgrad" train gpt $opts --max_iters "$steps" --out "$dir/whole" > /dev/null

# The same run, cut by the failure once its first checkpoint is written.
# shellcheck disable=SC2086
"$mpirun_sh" --timeout 300 -np "$np" "$xgrad" train gpt $opts --max_iters 100000 --out "$dir/cut" > "$dir/cut.txt" 2>&1 &
job=$!
waited=0
until [ -f "$dir/cut/checkpoint.npz" ]; do
  kill -0 "$job" 2> /dev/null || { cat "$dir/cut.txt"; fail "the run ended before its first checkpoint"; }
  [ "$waited" -lt 1200 ] || fail "no checkpoint after 120 s"
  sleep 0.1; waited=$((waited + 1))
done
start=$(now)
case $mode in
  kill)
    victim=
    for pid in $(left "$ns2"); do [ "$(cat "/proc/$pid/comm" 2> /dev/null)" != xgrad ] || victim=$pid; done
    [ -n "$victim" ] || fail "no xgrad rank on host 2"
    kill -9 "$victim"
    what="a rank on host 2 killed (SIGKILL)" expected="on node 10.77.0.2 exited on signal 9" ;;
  link-down)
    ip -n "$ns2" link set "$veth2" down
    what="host 2's link down" expected="Remote daemon: .* on node 10.77.0.2" ;;
  *) fail "mode is kill or link-down, not $mode" ;;
esac
# Every rank ended: no process left on either host (mpirun included).
while [ -n "$(left "$ns1")$(left "$ns2")" ]; do
  awk -v s="$start" -v n="$(now)" -v b="$bound" 'BEGIN { exit !(n - s > b) }' && break
  sleep 0.1
done
elapsed=$(awk -v s="$start" -v n="$(now)" 'BEGIN { printf "%.1f", n - s }')
# (two_hosts.sh ends what is left.)
[ -z "$(left "$ns1")$(left "$ns2")" ] ||
  { cat "$dir/cut.txt"; fail "$what: processes still running on the hosts after $bound s (a hang)"; }
status=0
wait "$job" || status=$?
[ "$status" -ne 0 ] || fail "$what: mpirun exited 0"
if grep -q "$expected" "$dir/cut.txt"; then
  echo "$what: every rank on both hosts ended in $elapsed s (bound $bound s), mpirun status $status:"
  grep "$expected" "$dir/cut.txt"
else
  # Open MPI 4.1's mpirun can segfault in its PMIx log handler while it relays the failure across
  # the hosts (docs/distributed.md); the line naming host 2 is then never printed. Only that crash
  # excuses it: everything else (all ended within the bound, a failing status, the resume) holds.
  grep -q "pmix_server_log" "$dir/cut.txt" || { cat "$dir/cut.txt"; fail "$what: no line naming host 2 ($expected)"; }
  echo "$what: every rank on both hosts ended in $elapsed s (bound $bound s); mpirun crashed relaying it" \
    "(Open MPI 4.1's PMIx log handler), status $status"
fi

# Resume from the last periodic checkpoint: the whole run's loss.csv, bit for bit.
[ "$mode" != link-down ] || ip -n "$ns2" link set "$veth2" up
done_steps=$(tail -n 1 "$dir/cut/loss.csv" | cut -d, -f1)
[ "$done_steps" -lt "$steps" ] || fail "the failure came after step $steps (checkpoint at $done_steps)"
# shellcheck disable=SC2086
"$mpirun_sh" -np "$np" "$xgrad" train gpt $opts --max_iters "$steps" --resume "$dir/cut/checkpoint.npz" \
  --out "$dir/resumed" > /dev/null
cmp "$dir/whole/loss.csv" "$dir/resumed/loss.csv" || fail "the resumed run differs from the uninterrupted one"
echo "resumed from the last checkpoint (loss.csv written to step $done_steps): loss.csv of steps 0-$steps bit-identical to the uninterrupted run"
