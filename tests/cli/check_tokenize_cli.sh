#!/bin/sh
# `xgrad tokenize`: a `train gpt` checkpoint's character tokenizer and a folder of BPE files (a small
# vocabulary in GPT-2's layout, both file names) encode standard input and decode ids back; bad
# input is one line and exit status 2.   check_tokenize_cli.sh XGRAD
set -eu
xgrad=$1
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
expect_error() {  # expect_error WHAT INPUT ARGS...: exit status 2 and one line containing WHAT
  what=$1 input=$2; shift 2
  status=0
  printf '%s' "$input" | "$xgrad" tokenize "$@" > /dev/null 2> "$dir/err" || status=$?
  [ "$status" -eq 2 ] || fail "exit status $status, not 2, for: $*"
  [ "$(wc -l < "$dir/err")" -eq 1 ] || fail "not one line: $(cat "$dir/err")"
  grep -qF -- "$what" "$dir/err" || fail "'$what' is not in: $(cat "$dir/err")"
}

# a checkpoint: characters sorted by code point (' ' 0, ',' 1, '\n' is first: 10 < 32)
for i in 1 2 3 4 5 6; do printf 'hello world, hello text\n'; done > "$dir/text.txt"
"$xgrad" train gpt --text "$dir/text.txt" --n_layer 1 --n_head 1 --n_embd 8 --block_size 4 --batch_size 2 \
  --max_iters 1 --eval_interval 1 --eval_iters 1 --sample-tokens 4 --quiet --out "$dir/run" > /dev/null
ckpt=$dir/run/checkpoint.npz
[ "$(printf 'hello' | "$xgrad" tokenize --model "$ckpt")" = "5,4,6,6,7" ] || fail "character ids of 'hello'"
[ "$(printf 'hello world' | "$xgrad" tokenize --model "$ckpt" | "$xgrad" tokenize --model "$ckpt" --decode)" = "hello world" ] ||
  fail "character round trip"
expect_error "the character 'q' (U+0071) at byte 4 is not in the vocabulary" "hellq" --model "$ckpt"

# a BPE folder: GPT-2's 256 byte characters as ids 0..255, merges "a b", "ab c" and "Ġ a"
/usr/bin/env python3 - "$dir/bpe" <<'PY'
import json, os, sys
printable = [b for b in range(256) if ord("!") <= b <= ord("~") or 0xA1 <= b <= 0xAC or 0xAE <= b]
vocab, n = {}, 256
for b in range(256):
    vocab[chr(b) if b in printable else chr(n)] = b
    n += b not in printable
vocab.update({"ab": 256, "abc": 257, "\u0120a": 258, "<|endoftext|>": 259})
os.makedirs(sys.argv[1])
with open(os.path.join(sys.argv[1], "vocab.json"), "w", encoding="utf-8") as f:
    json.dump(vocab, f, ensure_ascii=False)
with open(os.path.join(sys.argv[1], "merges.txt"), "w", encoding="utf-8") as f:
    f.write("#version: 0.2\na b\nab c\n\u0120 a\n")
PY
bpe=$dir/bpe
[ "$(printf 'abc abd' | "$xgrad" tokenize --model "$bpe")" = "257,32,256,100" ] || fail "BPE ids of 'abc abd'"
[ "$(printf 'x<|endoftext|> ac' | "$xgrad" tokenize --model "$bpe" --special)" = "120,259,258,99" ] || fail "--special"
[ "$(printf '257, 32,256,100\n' | "$xgrad" tokenize --model "$bpe" --decode)" = "abc abd" ] || fail "BPE decode"
mkdir "$dir/openai" && cp "$bpe/vocab.json" "$dir/openai/encoder.json" && cp "$bpe/merges.txt" "$dir/openai/vocab.bpe"
[ "$(printf 'abc abd' | "$xgrad" tokenize --model "$dir/openai")" = "257,32,256,100" ] || fail "OpenAI's file names"
# a byte token alone is broken UTF-8: written as it is to a pipe
[ "$(printf '195' | "$xgrad" tokenize --model "$bpe" --decode | od -An -tx1 | tr -d ' ')" = "c3" ] || fail "raw bytes to a pipe"

expect_error "'x' is not a token id" "1,x" --model "$bpe" --decode
expect_error "'-3' is not a token id" "-3" --model "$bpe" --decode
expect_error "id 999 is not in the BPE vocabulary of 260" "999" --model "$bpe" --decode
expect_error "has no tokenizer files (vocab.json and merges.txt, or encoder.json and vocab.bpe)" "a" --model "$dir"
printf '{"a": 0}' > "$dir/openai/encoder.json"
expect_error "encoder.json: has no token for byte 0" "a" --model "$dir/openai"
expect_error "text.txt: not a readable npz (zip) archive" "a" --model "$dir/text.txt"
echo "tokenize: checkpoint and BPE folders encode, decode and fail in one line"
