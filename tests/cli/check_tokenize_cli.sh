#!/bin/sh
# `xgrad tokenize`: a `train gpt` checkpoint's character tokenizer, a folder of BPE files (a small
# vocabulary in GPT-2's layout, both file names) and llama2.c's SentencePiece model of
# FIXTURES/sentencepiece (its ids from the sentencepiece library: make_sentencepiece.py) encode
# standard input and decode ids back; bad input is one line, exit status 2 and nothing on stdout.
#   check_tokenize_cli.sh XGRAD FIXTURES
set -eu
xgrad=$1 fixtures=$2
dir=$(mktemp -d); trap 'rm -rf "$dir"' EXIT
fail() { echo "FAIL: $*"; exit 1; }
expect_error() {  # expect_error WHAT INPUT ARGS...: exit status 2, one line containing WHAT, no stdout
  what=$1 input=$2; shift 2
  status=0
  printf '%s' "$input" | "$xgrad" tokenize "$@" > "$dir/out" 2> "$dir/err" || status=$?
  [ "$status" -eq 2 ] || fail "exit status $status, not 2, for: $*"
  [ "$(wc -l < "$dir/err")" -eq 1 ] || fail "not one line: $(cat "$dir/err")"
  grep -qF -- "$what" "$dir/err" || fail "'$what' is not in: $(cat "$dir/err")"
  [ ! -s "$dir/out" ] || fail "wrote to stdout: $(cat "$dir/out")"
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

# SentencePiece: tok512.model (llama2.c's train_vocab) encodes each text of cases.json to the ids
# sp.encode gave (no <s>), and decodes them to sp.decode's text (whitespace runs, bytes, emoji)
sp=$fixtures/sentencepiece
/usr/bin/python3 - "$xgrad" "$sp" <<'PY' || fail "SentencePiece ids or text differ from the library's"
import json, subprocess, sys
xgrad, sp = sys.argv[1], sys.argv[2]
cases = json.load(open(sp + "/cases.json", encoding="utf-8"))["cases"]
def tokenize(stdin, *args):
    return subprocess.run([xgrad, "tokenize", "--model", sp + "/tok512.model", *args], input=stdin,
                          capture_output=True, check=True).stdout
for c in cases:
    want = ",".join(map(str, c["ids"]))
    got = tokenize(c["text"].encode()).decode()
    assert got == want + "\n", (c["text"], got, want)
    text = tokenize(want.encode(), "--decode")
    assert text == c["decoded"].encode(), (want, text, c["decoded"])
print(f"tokenize: tok512.model, {len(cases)} texts: the sentencepiece library's ids and text")
PY
expect_error "tok512.model: id 512 is outside the vocabulary of 512" "512" --model "$sp/tok512.model" --decode
printf 'not a protobuf' > "$dir/broken.model"
expect_error "$dir/broken.model: not a SentencePiece model" "a" --model "$dir/broken.model"
# llama2.c's tokenizer.bin (as tokenizer.py exports it) is written by `export --to llama2c`, never read
expect_error "$sp/tok512.bin: xgrad writes llama2.c's tokenizer.bin but does not read it" "a" --model "$sp/tok512.bin"
expect_error "give the SentencePiece tokenizer.model instead" "1,2" --model "$sp/tok512.bin" --decode
echo "tokenize: checkpoint, BPE folders and SentencePiece encode, decode and fail in one line"
