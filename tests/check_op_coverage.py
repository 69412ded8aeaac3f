#!/usr/bin/env python3
"""Every public op (a function of include/xgrad/ops/, nn/sdpa.hpp or nn/position_embedding.hpp
outside a detail namespace, a line of the elementwise table or a reduction) has a registered
gradcheck and an entry in docs/ops.md, and every module (a reflected struct of include/xgrad/nn/) a
registered gradcheck and a mention in docs/, so that adding one without them fails
(CONTRIBUTING.md, "Adding an op").
Usage: check_op_coverage.py SOURCE_ROOT XGRAD_GRADCHECK (the tool with the registry: `gradcheck --list`)"""
import os
import re
import subprocess
import sys

FUNCTION = re.compile(r"^(?:inline\s+)?(?:Var<[^>]*>|auto|[A-Z]\w*<[^>]*>)\s+([a-z_][a-z_0-9]*)\(")
# the elementwise table (ops/elementwise.hpp) and the reductions (ops/reduce.hpp)
TABLE = re.compile(r"^XGRAD_(?:(?:VECTOR_)?(?:UNARY|BINARY)_OP|REDUCTION)\((\w+),")
SYMBOL = {"add": "a + b", "sub": "a - b", "mul": "a * b", "div": "a / b"}  # documented as the operator
MODULE = re.compile(r"^\s*BOOST_HANA_DEFINE_STRUCT\((\w+)")
DETAIL_OPEN = re.compile(r"^namespace\s+[\w:]*\bdetail\s*\{")
DETAIL_CLOSE = re.compile(r"^\}\s*//\s*namespace\s+[\w:]*\bdetail\b")
# What has no gradcheck of its own, and why.
NO_GRADCHECK = {
    "additive_mask": "makes a mask (ops/mask.hpp): no gradient flows into a mask",
    "rotary_tables": "makes rotary_embedding's constant cos and sin tables: no gradient flows into them",
    "gpt_loss": "nanoGPT's loss: cross_entropy with ignore_index -1, checked as GPT's loss",
    "linear_cross_entropy": "checked against linear then cross_entropy in tests/ops/linear_cross_entropy.cpp",
    "add_dropout": "dropout(x) + residual in one pass: checked as dropout's fused variant",
    "attend": "the attention entry of MultiheadAttention: checked through MultiheadAttention and sdpa",
    "GPTBlock": "checked as GPT", "GPTMLP": "checked as GPT",
    "GPTSelfAttention": "checked as GPT", "GPTTransformer": "checked as GPT",
    "LlamaAttention": "checked as Llama", "LlamaBlock": "checked as Llama",
    "DetrTransformer": "its stacks are checked (TransformerEncoder, TransformerDecoder) and parity in tests/nn/detr.cpp",
}
# Ops documented on a page of their own instead of docs/ops.md.
ELSEWHERE = {"additive_mask": "docs/masking.md"}
# The modules' own parts, documented with the module.
PARTS = {"GPTBlock", "GPTMLP", "GPTSelfAttention", "GPTTransformer", "LlamaAttention", "LlamaBlock"}


def public_ops(root):
    paths = [os.path.join(root, "include/xgrad/ops", f) for f in sorted(os.listdir(os.path.join(root, "include/xgrad/ops")))]
    paths += [os.path.join(root, "include/xgrad/nn", f) for f in ("sdpa.hpp", "position_embedding.hpp")]
    names = {}
    for path in paths:
        in_detail = 0
        for line in open(path, encoding="utf-8"):
            if DETAIL_OPEN.match(line):
                in_detail += 1
            elif DETAIL_CLOSE.match(line):
                in_detail -= 1
            elif not in_detail and (m := FUNCTION.match(line) or TABLE.match(line)):
                names.setdefault(m.group(1), os.path.relpath(path, root))
    return names


def modules(root):
    names = {}
    folder = os.path.join(root, "include/xgrad/nn")
    for f in sorted(os.listdir(folder)):
        if f.endswith(".hpp"):
            for line in open(os.path.join(folder, f), encoding="utf-8"):
                if m := MODULE.match(line):
                    names.setdefault(m.group(1), "include/xgrad/nn/" + f)
    return names


def main():
    root, tool = sys.argv[1], sys.argv[2]
    listing = subprocess.run([tool, "gradcheck", "--list"], check=True, capture_output=True, text=True).stdout
    registered = {line.split()[0] for line in listing.splitlines() if line.strip() and not line.startswith(" ")}
    def read(page):
        return open(os.path.join(root, page), encoding="utf-8").read()

    docs = "\n".join(read(os.path.join("docs", f)) for f in sorted(os.listdir(os.path.join(root, "docs"))) if f.endswith(".md"))
    ops, mods = public_ops(root), modules(root)
    problems = []
    for name, where in sorted({**ops, **mods}.items()):
        if name not in registered and name not in NO_GRADCHECK:
            problems.append(f"{name} ({where}) has no registered gradcheck (checks/) and no reason in NO_GRADCHECK")
        page = ELSEWHERE.get(name, "docs/ops.md") if name in ops else "docs/"
        text = read(page) if name in ops else docs
        mentioned = re.search(r"`(?:xgrad::)?(?:nn::)?" + re.escape(name) + r"[`(<]", text) or (
            name in SYMBOL and "`" + SYMBOL[name] + "`" in text)
        if not mentioned and name not in PARTS:
            problems.append(f"{name} ({where}) has no entry in {page}")
    for p in problems:
        print(p)
    print(f"{len(ops)} ops and {len(mods)} modules; {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
