#!/usr/bin/env bash
# nn::Llama against its peers at llama2.c's stories15M shape (dim 288, 6 layers, 6 heads, 6 kv heads,
# vocabulary 32000, max_seq_len 256), one thread each, alternating ROUNDS times:
#   training: `xgrad bench --model llama` (B 4, T 256) against llama2.c's model.py under PyTorch
#             (the shared peers' llama2c_step.py), median step times;
#   generation: `xgrad sample` against llama2.c's run.c (built as its `make runfast`, with
#             -march=native as the peers' README says) on the same checkpoint: export.py's file of
#             model.py's model (its init, weights scaled by 3 so that greedy tokens vary) and a
#             tokenizer.bin whose token i is "<i>"; 256 greedy steps from BOS. run.c prints its
#             tokens/s; xgrad's is timed as (time of 256 tokens − time of 1 token) / 255, so that
#             both leave out loading. Both must print the same ids.
#   bench/llama_compare.sh LLAMA2C PEERS [--rounds R] [--xgrad PATH]
#     LLAMA2C  a karpathy/llama2.c checkout or its git mirror
#     PEERS    the folder of the peer scripts kept outside this repository (llama2c_step.py)
set -euo pipefail
src=$(realpath "$1") peers=$(realpath "$2")  # before the cd: they may be relative to the caller
shift 2
cd "$(dirname "$0")/.."
rounds=3 xgrad_bin=build/src/xgrad
while [[ $# -gt 0 ]]; do
    case "$1" in
        --rounds) rounds=$2 ;;
        --xgrad) xgrad_bin=$2 ;;
        *) echo "bench/llama_compare.sh: unknown option $1" >&2; exit 2 ;;
    esac
    shift 2
done
xgrad_bin=$(realpath "$xgrad_bin")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
show() { if [[ -f "$src/$1" ]]; then cat "$src/$1"; else git -C "$src" show "HEAD:$1"; fi; }  # a checkout or a mirror
show run.c > "$work/run.c"
gcc -Ofast -march=native -o "$work/run" "$work/run.c" -lm
/usr/bin/python3 - "$src" "$work" <<'PY'
import contextlib, io, os, struct, sys
import torch
sys.path.insert(0, os.path.join(os.getcwd(), "tests/fixtures"))
from reference_model import import_model
src, work = sys.argv[1], sys.argv[2]
model_py, export_py = import_model(src), import_model(src, "export")
torch.manual_seed(0)
with contextlib.redirect_stdout(io.StringIO()):
    m = model_py.Transformer(model_py.ModelArgs(dim=288, n_layers=6, n_heads=6, n_kv_heads=6, vocab_size=32000,
                                                multiple_of=32, max_seq_len=256))
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(3.0)
    export_py.legacy_export(m, os.path.join(work, "model.bin"))
with open(os.path.join(work, "tokenizer.bin"), "wb") as f:
    pieces = [f"<{i}>".encode() for i in range(32000)]
    f.write(struct.pack("i", max(len(p) for p in pieces)))
    for p in pieces:
        f.write(struct.pack("fi", 0.0, len(p)) + p)
PY

field() { grep -o "\"$1\": *[^,}]*" <<<"$2" | cut -d: -f2 | tr -d ' "'; }
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
seconds() { local s e; s=$(date +%s.%N); "$@" > "$work/ids.txt"; e=$(date +%s.%N); awk -v a="$s" -v b="$e" 'BEGIN {print b - a}'; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
xs=() ps=() xg=() rg=()
for ((r = 0; r < rounds; ++r)); do
    x=$("$xgrad_bin" bench --model llama --layers 6 --heads 6 --kv-heads 6 --embed 288 --vocab 32000 --batch 4 --seq 256 \
        --threads 1 --steps 5 --warmup 1)
    p=$(/usr/bin/python3 "$peers/llama2c_step.py" "$src" 288 6 6 6 32000 4 256 1 5)
    xs+=("$(field median_us "$x")") ps+=("$(field median_us "$p")")
    sample=("$xgrad_bin" sample --checkpoint "$work/model.bin" --prompt-ids 1 --temperature 0 --print-ids --tokens)
    one=$(seconds "${sample[@]}" 1)
    all=$(seconds "${sample[@]}" 255)
    xg+=("$(awk -v a="$one" -v b="$all" 'BEGIN {print 254 / (b - a)}')")
    "$work/run" "$work/model.bin" -z "$work/tokenizer.bin" -t 0 -n 256 > "$work/run.txt" 2>&1  # tokens/s on stderr
    rg+=("$(grep -o 'achieved tok/s: [0-9.]*' "$work/run.txt" | cut -d' ' -f3)")
    want=$(grep -o '<[0-9]*>' "$work/run.txt" | tr -d '<>' | head -n 255 | paste -sd,)
    [[ "$(cat "$work/ids.txt")" == "$want" ]] || { echo "bench/llama_compare.sh: xgrad's greedy ids differ from run.c's" >&2; exit 1; }
done
x=$(printf '%s\n' "${xs[@]}" | median) p=$(printf '%s\n' "${ps[@]}" | median)
g=$(printf '%s\n' "${xg[@]}" | median) c=$(printf '%s\n' "${rg[@]}" | median)
echo "| stories15M shape, one thread | xgrad | peer | ratio |"
echo "|---|---|---|---|"
printf '| training step (B 4, T 256), ms | %.0f | %.0f (model.py, PyTorch) | %.2f |\n' "$(awk -v v="$x" 'BEGIN {print v / 1000}')" \
    "$(awk -v v="$p" 'BEGIN {print v / 1000}')" "$(awk -v a="$x" -v b="$p" 'BEGIN {print a / b}')"
printf '| greedy generation, tokens/s (255 tokens, same ids) | %.0f | %.0f (run.c) | %.2f |\n' "$g" "$c" \
    "$(awk -v a="$g" -v b="$c" 'BEGIN {print a / b}')"
echo
echo "CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//'), family $(grep -m1 'cpu family' /proc/cpuinfo | cut -d: -f2 | tr -d ' ') model $(grep -m1 '^model[[:space:]]' /proc/cpuinfo | cut -d: -f2 | tr -d ' '); rounds $rounds; $(date -u +%F)"
