#!/bin/sh
# Under tests/dist/two_hosts.sh: `xgrad train copy --deterministic` over N ranks on the two hosts (TCP
# across the link) and over N ranks on one host (shared memory) give the same bits: the same
# loss.csv, the same checkpoint.npz.
#
#   check_deterministic_hosts.sh [--ranks N] MPIRUN_SH XGRAD
set -eu
np=2
[ "$1" != --ranks ] || { np=$2; shift 2; }
mpirun_sh=$1 xgrad=$2
[ -n "${XGRAD_HOSTS:-}" ] || { echo "FAIL: run me under tests/dist/two_hosts.sh"; exit 1; }
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
opts="--deterministic --steps 200 --eval-every 200 --batch 32"
# shellcheck disable=SC2086  # $opts is a list of options
"$mpirun_sh" -np "$np" "$xgrad" train copy $opts --out "$dir/hosts" > /dev/null
# shellcheck disable=SC2086
XGRAD_HOSTS='' "$mpirun_sh" -np "$np" "$xgrad" train copy $opts --out "$dir/one-host" > /dev/null
grep -q "\"world_size\": $np" "$dir/hosts/metrics.json" || { echo "FAIL: metrics.json lacks world_size $np"; exit 1; }
for file in loss.csv checkpoint.npz; do
  cmp "$dir/hosts/$file" "$dir/one-host/$file" ||
    { echo "FAIL: --deterministic over $np ranks: $file differs between two hosts and one"; exit 1; }
done
echo "train copy --deterministic, $np ranks: loss.csv and checkpoint.npz bit-identical on two hosts and on one"
