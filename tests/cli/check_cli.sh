#!/bin/sh
# The command line itself: usage check_cli.sh XGRAD
# `xgrad` alone (or `xgrad train`) lists its commands, then one error line, exit 2; every
# command's --help shows the default of every option that takes a value; a value out of range or
# of the wrong kind is one short line naming the command and the option, exit 2.
set -u
xgrad=$1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# run ARGS...: the tool's stdout in $work/out, stderr in $work/err, its exit status in $status
run() { "$xgrad" "$@" >"$work/out" 2>"$work/err"; status=$?; }

# expect_error "ARGS" "MESSAGE": exit 2 and exactly MESSAGE, one line, on stderr
expect_error() {
    # shellcheck disable=SC2086
    run $1
    [ "$status" -eq 2 ] || fail "xgrad $1: exit status $status, expected 2"
    [ "$(cat "$work/err")" = "$2" ] || fail "xgrad $1: expected '$2' on stderr, got: $(cat "$work/err")"
}

# Without a command: the commands with their descriptions, then the error.
run
[ "$status" -eq 2 ] || fail "xgrad alone: exit status $status, expected 2"
for cmd in train heads explore inspect attention transformer gradcheck bench patch; do
    grep -Eq "^  $cmd +[a-z]" "$work/err" || fail "xgrad alone does not list '$cmd': $(cat "$work/err")"
done
[ "$(tail -n 1 "$work/err")" = "xgrad: A subcommand is required" ] || fail "xgrad alone: $(tail -n 1 "$work/err")"
run train
[ "$status" -eq 2 ] || fail "xgrad train: exit status $status, expected 2"
grep -q "^Usage: xgrad train \[OPTIONS\] SUBCOMMAND$" "$work/err" && grep -Eq "^  copy +attention learns" "$work/err" &&
    grep -Eq "^  mlp +a small MLP" "$work/err" && grep -Eq "^  sort +a Transformer encoder-decoder" "$work/err" ||
    fail "xgrad train does not list copy, sort and mlp: $(cat "$work/err")"
[ "$(tail -n 1 "$work/err")" = "xgrad train: A subcommand is required" ] || fail "xgrad train: $(tail -n 1 "$work/err")"
run --help
[ "$status" -eq 0 ] && grep -Eq "^  gradcheck +check every op" "$work/out" || fail "xgrad --help: status $status"

# --help of every command: each option that takes a value shows its default ([...]) or says what
# happens without it ("default:"), unless it is required.
for cmd in "train copy" "train sort" "train mlp" heads explore export inspect attention transformer gradcheck bench patch; do
    # shellcheck disable=SC2086
    run $cmd --help
    [ "$status" -eq 0 ] || fail "xgrad $cmd --help: exit status $status"
    # one line per option: a description wrapped onto the next line joined to its option
    missing=$(awk '/^  -/ { if (o) print o; o = $0; next } /^      / && o { o = o $0; next } { if (o) print o; o = "" }
                   END { if (o) print o }' "$work/out" |
              grep -E '^  -[^ ]* (INT|UINT|FLOAT|TEXT)' | grep -v -e 'REQUIRED' -e '\[' -e 'default:')
    [ -z "$missing" ] || fail "xgrad $cmd --help: no default shown for: $missing"
done
run train copy --help
grep -Eq '^  --steps INT:>=1 \[1000\] +training steps$' "$work/out" || fail "train copy --help: $(grep -e --steps "$work/out")"
grep -Eq '^  --lr FLOAT:>0 \[0\.003\] +Adam learning rate$' "$work/out" || fail "train copy --help: $(grep -e --lr "$work/out")"
grep -Eq '^  --seq UINT:1\.\.256 \[8\] ' "$work/out" || fail "train copy --help: $(grep -e --seq "$work/out")"

# Out of range, not a number, unknown or missing: one line naming the command and the option.
expect_error "train copy --steps -5" "xgrad train copy: --steps: must be >= 1, got -5"
expect_error "train copy --lr 0" "xgrad train copy: --lr: must be > 0, got 0"
expect_error "train copy --seq 300" "xgrad train copy: --seq: must be in [1, 256], got 300"
expect_error "train copy --steps many" "xgrad train copy: --steps: must be a number, got many"
run train sort --help
grep -Eq '^  --steps INT:>=1 \[2000\] +training steps$' "$work/out" || fail "train sort --help: $(grep -e --steps "$work/out")"
grep -Eq '^  --d-model UINT:>=1 \[64\] +model dimension$' "$work/out" || fail "train sort --help: $(grep -e --d-model "$work/out")"
expect_error "train sort --seq 0" "xgrad train sort: --seq: must be in [1, 64], got 0"
expect_error "train sort --warmup -1" "xgrad train sort: --warmup: must be >= 0, got -1"
expect_error "train mlp --hidden 0" "xgrad train mlp: --hidden: must be >= 1, got 0"
expect_error "bench --warmup -1" "xgrad bench: --warmup: must be in [0, 1000000], got -1"
touch "$work/x.npz"
expect_error "heads --sequences 0 $work/x.npz" "xgrad heads: --sequences: must be in [1, 100000], got 0"
expect_error "attention --from a --to b --adam-steps 0" \
    "xgrad attention: --adam-steps: must be in [1, 1000000000], got 0"
expect_error "train copy --bogus" "xgrad train copy: The following argument was not expected: --bogus"
expect_error "inspect" "xgrad inspect: --from is required"
expect_error "explore $work" "xgrad explore: --out is required"
expect_error "explore $work --out x.html --positions -1" "xgrad explore: --positions: must be in [0, 100000], got -1"
# --dtype bfloat16 where oneDNN has no native bfloat16 code (DNNL_MAX_CPU_ISA=AVX2 caps it as a CPU
# without AVX512_BF16 or AMX would): one line naming Autocast, exit 2, nothing written.
export DNNL_MAX_CPU_ISA=AVX2
for cmd in "train gpt --max_iters 1 --out $work/bf16" "bench --steps 1"; do
    # shellcheck disable=SC2086
    run $cmd --dtype bfloat16
    [ "$status" -eq 2 ] && [ "$(wc -l < "$work/err")" -eq 1 ] &&
        grep -q "^xgrad ${cmd%% -*}: xgrad::Autocast(bfloat16): .*; train in float32 here$" "$work/err" ||
        fail "xgrad $cmd --dtype bfloat16 without native bfloat16: status $status, $(cat "$work/err")"
done
unset DNNL_MAX_CPU_ISA
[ ! -e "$work/bf16" ] || fail "train gpt --dtype bfloat16 wrote its folder before failing"
echo "all command line checks passed"
