#!/bin/sh
# `xgrad explore` end to end, every kind of source: usage check_explore_cli.sh XGRAD FIXTURES_DIR
# Checkpoints of train copy, sort, gpt and llama (trained here for a few steps), a Llama's folder and
# its llama2.c file, the folders of `xgrad attention` and `xgrad gpt`: each writes one page holding
# its attentions and losses. Bad input is
# one line on stderr, exit status 2, and no page. (The page in a browser: tests/explore/.)
set -u
xgrad=$1
fixtures=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

# explore SOURCE WANT [OPTIONS]: the page is written and the summary line says WANT
explore() {
    source=$1 want=$2
    shift 2
    rm -f "$work/page.html"
    "$xgrad" explore "$source" --out "$work/page.html" "$@" >"$work/out" 2>"$work/err" ||
        fail "explore $source: exit status $?: $(cat "$work/err")"
    grep -q "$want" "$work/out" || fail "explore $source: expected '$want' in: $(cat "$work/out")"
    grep -q '<script id="xgrad-data" type="application/json">{' "$work/page.html" || fail "explore $source: no data in the page"
}
# expect_error WHAT MESSAGE ARGS...: exit 2, MESSAGE as the one line on stderr, no page
expect_error() {
    what=$1 message=$2
    shift 2
    rm -f "$work/page.html"
    "$xgrad" explore "$@" >"$work/out" 2>"$work/err"
    status=$?
    [ "$status" -eq 2 ] || fail "$what: exit status $status, expected 2"
    [ "$(wc -l < "$work/err")" -eq 1 ] && grep -q "^xgrad explore: .*$message" "$work/err" ||
        fail "$what: expected one line with '$message', got: $(cat "$work/err")"
    [ ! -e "$work/page.html" ] || fail "$what: a page was written"
}

"$xgrad" train copy --steps 30 --eval-every 30 --out "$work/copy" >/dev/null || fail "train copy"
"$xgrad" train sort --steps 20 --seq 5 --d-model 16 --ffn 32 --batch 8 --warmup 5 --decay-steps 20 --eval-sequences 8 \
    --out "$work/sort" >/dev/null || fail "train sort"
printf 'the cat sat on the mat. ' > "$work/text.txt"
for _ in 1 2 3 4 5 6; do cat "$work/text.txt" "$work/text.txt" > "$work/t2" && mv "$work/t2" "$work/text.txt"; done
"$xgrad" train gpt --text "$work/text.txt" --n_layer 2 --n_head 2 --n_embd 16 --block_size 16 --batch_size 4 \
    --max_iters 10 --eval_interval 10 --eval_iters 1 --sample-tokens 4 --out "$work/gpt" >/dev/null || fail "train gpt"
"$xgrad" train llama --text "$work/text.txt" --tokenizer char --dim 16 --n_layers 2 --n_heads 2 --n_kv_heads 1 \
    --max_seq_len 16 --batch_size 4 --max_iters 10 --eval_interval 10 --eval_iters 1 --sample-tokens 4 \
    --out "$work/llama" >/dev/null || fail "train llama"
mkdir "$work/llama2c" && "$xgrad" export "$work/llama/checkpoint.npz" "$work/llama2c/model.bin" >/dev/null ||
    fail "export to a llama2.c .bin"

explore "$work/copy/checkpoint.npz" "1 attention(s), 9 loss(es)" --head-sequences 16
explore "$work/copy/checkpoint.npz" "1 attention(s), 3 loss(es)" --tokens 1,2,3,4,5,6,7,8 --positions 2 --head-sequences 0
explore "$work/sort/checkpoint.npz" "3 attention(s), 6 loss(es)" --tokens 4,1,3,0,2
explore "$work/gpt/checkpoint.npz" "2 attention(s), 12 loss(es)" --corpus "$work/text.txt" --head-sequences 4 --text "the mat sat."
explore "$work/llama/checkpoint.npz" "^Llama checkpoint.npz: 2 attention(s), 12 loss(es)" --corpus "$work/text.txt" \
    --head-sequences 4 --text "the mat sat."
explore "$work/llama/checkpoint.npz" "clean/corrupted: AtP against exact per head, Pearson" --corpus "$work/text.txt" \
    --head-sequences 0 --text "the mat sat." --corrupt-text "the sat mat." --correct t --wrong a
"$xgrad" explore --model "$work/llama" --out "$work/page.html" --text "the cat sat" --head-sequences 0 > "$work/out" ||
    fail "explore --model on a Llama folder"
grep -q "^Llama llama: 2 attention(s), 11 loss(es)" "$work/out" || fail "explore --model on a Llama folder: $(cat "$work/out")"
explore "$work/llama2c/model.bin" "^Llama model.bin: 2 attention(s), 5 loss(es)" --tokens 1,2,3,4,5
explore "$fixtures/io/attention/basic/in" "1 attention(s), 4 loss(es)"
explore "$fixtures/gpt/gpt_cli" "2 attention(s), 6 loss(es)" --sequence 1
explore "$work/gpt/checkpoint.npz" "clean/corrupted: AtP against exact per head, Pearson" --corpus "$work/text.txt" \
    --head-sequences 0 --text "the mat sat." --corrupt-text "the sat mat." --correct t --wrong a

expect_error "no such source" "source: Path does not exist" "$work/none.npz" --out "$work/page.html"
expect_error "no folder for the page" "$work/no/page.html" "$work/copy/checkpoint.npz" --out "$work/no/page.html"
expect_error "copy --tokens count" "--tokens: the copy task copies 8 tokens, got 2" "$work/copy/checkpoint.npz" \
    --tokens 1,2 --out "$work/page.html"
expect_error "sort digit" "--tokens: token 12 is outside \[0, 10)" "$work/sort/checkpoint.npz" --tokens 1,2,3,4,12 \
    --out "$work/page.html"
expect_error "gpt text" "--text" "$work/gpt/checkpoint.npz" --text "Zebra" --corpus "$work/text.txt" --out "$work/page.html"
expect_error "gpt one token" "the input needs 2 tokens or more" "$work/gpt/checkpoint.npz" --text "t" \
    --corpus "$work/text.txt" --out "$work/page.html"
expect_error "text and tokens" "--text and --tokens: give one input, not both" "$work/gpt/checkpoint.npz" --text "the" \
    --tokens 1,2 --out "$work/page.html"
expect_error "folder sequence" "--sequence: the input has 2 sequence(s), got 5" "$fixtures/gpt/gpt_cli" --sequence 5 \
    --out "$work/page.html"
expect_error "not a checkpoint" "" "$work/text.txt" --out "$work/page.html"
expect_error "corrupt length" "--corrupt-text: 5 tokens, the clean text 7" "$work/gpt/checkpoint.npz" \
    --text "the mat" --corrupt-text "a mat" --corpus "$work/text.txt" --out "$work/page.html"
expect_error "corrupt without text" "--corrupt-text: give the clean input as --text" "$work/gpt/checkpoint.npz" \
    --corrupt-text "a mat" --corpus "$work/text.txt" --out "$work/page.html"
expect_error "llama2c file without tokens" "an llm.c or llama2.c model has no tokenizer here; give --tokens" \
    "$work/llama2c/model.bin" --out "$work/page.html"
expect_error "corrupt on a copy model" "--corrupt-text: .* is not a GPT's or a Llama's checkpoint or folder" \
    "$work/copy/checkpoint.npz" --corrupt-text "a" --out "$work/page.html"
expect_error "correct is two tokens" "--correct: \"at\" is 2 tokens; the logit difference needs one" \
    "$work/gpt/checkpoint.npz" --text "the mat" --corrupt-text "the cat" --correct at --wrong t --out "$work/page.html"
echo "explore cli: 9 sources, two clean/corrupted pairs, 14 errors"
