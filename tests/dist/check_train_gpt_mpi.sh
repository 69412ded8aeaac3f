#!/bin/sh
# `mpirun -np 2 xgrad train gpt` against one process, on a file of the fortunes package: the same
# global batch (each rank trains on half of it) gives the one-process loss curve up to float32
# rounding, only rank 0 prints and writes, and a run resumed under mpirun is bit for bit the
# uninterrupted 2-rank run. `train llama`, which shares the loop, gives the one-process curve too.
#   check_train_gpt_mpi.sh [--ranks N] MPIRUN_SH XGRAD
# --ranks N: N ranks instead of 2 (--batch_size 8 must divide). Under tests/dist/two_hosts.sh,
# MPIRUN_SH spreads them over its hosts.
set -eu
np=2
[ "$1" != --ranks ] || { np=$2; shift 2; }
mpirun_sh=$1 xgrad=$2
text=/usr/share/games/fortunes/linux
[ -f "$text" ] || { echo "FAIL: $text is missing (Debian's fortunes package)"; exit 1; }
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
opts="--text $text --n_layer 2 --n_head 2 --n_embd 32 --block_size 32 --batch_size 8 --learning_rate 3e-3
  --warmup_iters 10 --lr_decay_iters 80 --eval_interval 40 --eval_iters 4 --sample-tokens 20 --threads 1"

# shellcheck disable=SC2086  # $opts is a list of options
"$xgrad" train gpt $opts --max_iters 80 --out "$dir/one" > /dev/null
# shellcheck disable=SC2086
"$mpirun_sh" -np "$np" "$xgrad" train gpt $opts --max_iters 80 --out "$dir/many" > "$dir/many.txt"
[ "$(grep -c "^GPT: " "$dir/many.txt")" -eq 1 ] || fail "expected one header line (rank 0 only): $(cat "$dir/many.txt")"
grep -q "ranks" "$dir/many.txt" || fail "the header does not say how the batch is split: $(head -n 1 "$dir/many.txt")"
grep -q "\"world_size\": $np" "$dir/many/metrics.json" || fail "metrics.json lacks world_size $np"
# Float32 rounding (the ranks' gradients are summed in another order) grows as training goes on,
# and a step whose forward amplifies it (LayerNorm of a nearly constant row) may show a few 1e-4
# relative: the first 40 steps must agree to 1e-5, every step to 1e-3. A rank that trained on the
# wrong shard or missed a reduction differs by 1e-2 within a few steps.
paste -d, "$dir/one/loss.csv" "$dir/many/loss.csv" | awk -F, -v np="$np" '
  NR > 2 { d = $2 - $7; if (d < 0) d = -d; r = d / $2; if (r > worst) { worst = r; at = $1 }
           if ($1 <= 40 && r > early) early = r }
  END { printf "train gpt, loss of %d ranks against 1 process: largest relative difference %.2e in steps 1-40, %.2e in all (step %d)\n", np, early, worst, at
        if (early > 1e-5 || worst > 1e-3) exit 1 }' || fail "the loss curves differ beyond float32 rounding"

# shellcheck disable=SC2086
"$mpirun_sh" -np "$np" "$xgrad" train gpt $opts --max_iters 40 --out "$dir/half" > /dev/null
# shellcheck disable=SC2086
"$mpirun_sh" -np "$np" "$xgrad" train gpt $opts --max_iters 80 --resume "$dir/half/checkpoint.npz" --out "$dir/half" > /dev/null
cmp "$dir/many/loss.csv" "$dir/half/loss.csv" || fail "the resumed $np-rank run differs from the uninterrupted one"
echo "train gpt resumed under mpirun after 40 steps: loss.csv bit-identical"

# `train llama` shares the loop: its 2-rank curve is the one-process curve too (20 steps, 1e-5)
lopts="--text $text --vocab_size 512 --dim 32 --n_layers 2 --n_heads 2 --n_kv_heads 1 --max_seq_len 32 --batch_size 8
  --max_iters 20 --eval_interval 20 --eval_iters 2 --sample-tokens 10 --threads 1 --quiet"
# shellcheck disable=SC2086
"$xgrad" train llama $lopts --out "$dir/llama_one"
# shellcheck disable=SC2086
"$mpirun_sh" -np "$np" "$xgrad" train llama $lopts --out "$dir/llama_many"
paste -d, "$dir/llama_one/loss.csv" "$dir/llama_many/loss.csv" | awk -F, '
  NR > 2 { d = $2 - $7; if (d < 0) d = -d; r = d / $2; if (r > worst) worst = r }
  END { printf "train llama, loss of the ranks against 1 process: largest relative difference %.2e in 20 steps\n", worst
        if (worst > 1e-5) exit 1 }' || fail "train llama: the loss curves differ beyond float32 rounding"
