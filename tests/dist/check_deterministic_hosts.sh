#!/bin/sh
# Under tests/dist/two_hosts.sh: `xgrad train copy --deterministic` over N ranks on the two hosts (TCP
# across the link) and over N ranks on one host (shared memory) give the same bits: the same
# loss.csv, the same arrays in checkpoint.npz (weights, Adam's moments, generators).
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
cmp "$dir/hosts/loss.csv" "$dir/one-host/loss.csv" ||
  { echo "FAIL: --deterministic over $np ranks: loss.csv differs between two hosts and one"; exit 1; }
# The arrays' bytes (the zip files' own timestamps differ).
/usr/bin/python3 - "$dir/hosts/checkpoint.npz" "$dir/one-host/checkpoint.npz" <<'EOF' ||
import sys, numpy as np
a, b = np.load(sys.argv[1]), np.load(sys.argv[2])
assert sorted(a.files) == sorted(b.files), "different arrays"
differ = [k for k in a.files if a[k].dtype != b[k].dtype or a[k].tobytes() != b[k].tobytes()]
assert not differ, f"different bits: {differ[:5]}"
print(f"checkpoint.npz: {len(a.files)} arrays bit-identical")
EOF
  { echo "FAIL: --deterministic over $np ranks: checkpoint.npz differs between two hosts and one"; exit 1; }
echo "train copy --deterministic, $np ranks: loss.csv and checkpoint.npz's arrays bit-identical on two hosts and on one"
