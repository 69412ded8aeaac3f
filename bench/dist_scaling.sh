#!/bin/sh
# Data-parallel scaling of `xgrad bench` (docs/distributed.md): alternates, for --rounds rounds,
#   1 process of 1 thread | 2 ranks of 1 thread (mpirun, overlap) | 2 ranks without overlap |
#   1 process of 2 threads | 2 ranks on two hosts (1 rank each)
# on one workload and prints each one's median step time, global throughput (sequences/s), the
# ratio to 1 process of 1 thread, and the median time per step spent in synchronize() (the
# reduction not hidden behind backward), with the load average.
#   bench/dist_scaling.sh [--rounds 5] [--steps 20] [--model mha|transformer] [--mpi "ARGS"] [BUILD_DIR]
# --model mha (default): the base MultiheadAttention step, B 8, L 128, E 512, H 8 (4 tape nodes).
# --model transformer: a 2+2-layer encoder-decoder, B 8, L 64, E 256, H 8, ffn 1024 (a deep tape:
#   its buckets start one after the other during backward).
# --mpi "ARGS": more mpirun arguments (e.g. "--mca coll_tuned_use_dynamic_rules 1 ...").
# The ranks share memory through the single-copy path (tests/dist/mpirun.sh --cma) when a probe
# shows the machine allows it (a container may forbid process_vm_readv), else copy in, copy out.
# Two hosts: tests/dist/two_hosts.sh's network namespaces on this machine (root only; the row is left
# out otherwise): the same compute as 2 ranks on one host, the gradients over TCP across a veth link,
# so the difference is what the TCP path costs.
set -eu
rounds=5 steps=20 model=mha mpi_args=""
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --model) model=$2; shift 2 ;;
    --mpi) mpi_args=$2; shift 2 ;;
    *) break ;;
  esac
done
case $model in
  mha) shape="--batch 8 --seq 128 --embed 512 --heads 8" ;;
  transformer) shape="--model transformer --batch 8 --seq 64 --embed 256 --heads 8 --ffn 1024 --layers 2" ;;
  *) echo "bench/dist_scaling.sh: --model is mha or transformer, not $model" >&2; exit 2 ;;
esac
build=${1:-build}
here=$(cd "$(dirname "$0")/.." && pwd)
xgrad=$build/src/xgrad
mpirun_sh=$here/tests/dist/mpirun.sh
out=$(mktemp); trap 'rm -f "$out"' EXIT
transport="copy in, copy out (single copy not allowed here)"
# shellcheck disable=SC2086
if "$mpirun_sh" --cma --timeout 30 -np 2 "$xgrad" bench $shape --steps 1 --warmup 0 > /dev/null 2>&1; then
  mpi_args="--cma $mpi_args" transport="single copy (CMA)"
fi
echo "shared memory between the ranks: $transport" >&2
two_hosts=$here/tests/dist/two_hosts.sh kinds="1x1 2x1 2x1-no-overlap 1x2 2x1-two-hosts"
"$two_hosts" true > /dev/null 2>&1 || { kinds=${kinds% *}; echo "no two-host row: $("$two_hosts" true)" >&2; }
field() { sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p"; }
echo "$model: $shape; load average before: $(cut -d' ' -f1-3 /proc/loadavg)" >&2
for r in $(seq "$rounds"); do
  # shellcheck disable=SC2086
  {
    printf '1x1 %s\n' "$("$xgrad" bench $shape --steps "$steps" --threads 1)"
    printf '2x1 %s\n' "$("$mpirun_sh" --timeout 600 $mpi_args -np 2 "$xgrad" bench $shape --steps "$steps" --threads 1)"
    printf '2x1-no-overlap %s\n' "$("$mpirun_sh" --timeout 600 $mpi_args -np 2 "$xgrad" bench $shape --steps "$steps" --threads 1 --no-overlap)"
    printf '1x2 %s\n' "$("$xgrad" bench $shape --steps "$steps" --threads 2)"
    [ "${kinds%two-hosts}" = "$kinds" ] ||
      printf '2x1-two-hosts %s\n' "$("$two_hosts" "$mpirun_sh" --timeout 600 $mpi_args -np 2 "$xgrad" bench $shape --steps "$steps" --threads 1)"
  } >> "$out"
  echo "round $r/$rounds done, load average $(cut -d' ' -f1-3 /proc/loadavg)" >&2
done
median() { sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
base=$(grep '^1x1 ' "$out" | field median_us | median)
printf '%-16s %12s %14s %8s %12s\n' "processes x threads" "step (ms)" "sequences/s" "ratio" "reduce (ms)"
for kind in $kinds; do
  us=$(grep "^$kind " "$out" | field median_us | median)
  reduce=$(grep "^$kind " "$out" | field reduce_us | median)
  awk -v k="$kind" -v us="$us" -v b="$base" -v red="$reduce" \
    'BEGIN { printf "%-19s %12.2f %14.1f %8.2f %12.3f\n", k, us / 1000, 8e6 / us, b / us, red / 1000 }'
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg) ($(nproc) cores); shared memory: $transport"
