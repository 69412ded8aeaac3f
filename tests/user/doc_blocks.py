#!/usr/bin/env python3
"""Writes every ```cpp block of the given Markdown files into one C++ unit, so that the build
compiles what the docs show (tests/meson.build). Usage: doc_blocks.py OUT.cpp ERRORS_DIR ROOT FILE.md... (ROOT: the
folder the files' names are given relative to, in messages)

Each file's blocks go, in order, into a namespace of its own with `using namespace xgrad;`. A block
is placed by the HTML comment right above it (invisible on the rendered page), or by default:

    <!-- compile: namespace -->      at namespace scope (types, templates, functions)
    <!-- compile: function -->       the default: the body of a function of its own
    <!-- compile: program -->        a whole program (the default when it has `int main(`);
                                     its main is renamed, its #includes go to the top of the unit
    <!-- compile: error TEXT -->     must fail to compile with TEXT in the message: written to
                                     ERRORS_DIR/<file>_<line>.cpp for tests/user/check_doc_errors.sh
    <!-- compile: function
    given: C++ the block assumes, placed just before it (as many lines as needed)
    -->

A block marked `<!-- compile: namespace -->` (or a program) is visible to the blocks after it in the
same file; `given:` code is seen by its block alone. #line directives point compile errors at the
Markdown file's own lines."""
import glob
import os
import re
import sys

COMMENT = re.compile(r"<!--\s*compile:?\s*(.*?)-->", re.S)


def blocks(path):
    """(line of the first code line, code, directive text or '', its line) for each ```cpp block."""
    lines = open(path, encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```cpp":
            start = i + 1
            end = start
            while end < len(lines) and lines[end].strip() != "```":
                end += 1
            if end == len(lines):
                sys.exit(f"{path}:{i + 1}: a ```cpp block that does not end")
            # the directive: an HTML comment ending on the line above the fence (blank lines allowed)
            j = i - 1
            while j >= 0 and not lines[j].strip():
                j -= 1
            directive, directive_line = "", start + 1
            if j >= 0 and lines[j].rstrip().endswith("-->"):
                k = j
                while k >= 0 and "<!--" not in lines[k]:
                    k -= 1
                m = COMMENT.search("\n".join(lines[k:j + 1]))
                if m:
                    directive, directive_line = m.group(1).strip(), k + 1
            out.append((start + 1, lines[start:end], directive, directive_line))
            i = end
        i += 1
    return out


def parse(directive, code, where):
    """(scope, argument, given lines)."""
    head, _, given = directive.partition("given:")
    words = head.split(None, 1)
    scope = words[0] if words else ("program" if any("int main(" in c for c in code) else "function")
    argument = words[1].strip() if len(words) > 1 else ""
    if scope not in ("namespace", "function", "program", "error"):
        sys.exit(f"{where}: unknown compile directive '{scope}'")
    if scope == "error" and not argument:
        sys.exit(f"{where}: 'compile: error' needs the text the error must contain")
    return scope, argument, [g for g in given.strip("\n").split("\n") if g.strip()]


def main():
    out_path, errors_dir, root, sources = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    includes = ["#include <xgrad/xgrad.hpp>"]
    body = []
    listed = {os.path.abspath(p) for p in sources}
    for candidate in [os.path.join(root, "README.md")] + sorted(glob.glob(os.path.join(root, "docs", "*.md"))):
        if os.path.abspath(candidate) not in listed and "```cpp" in open(candidate, encoding="utf-8").read():
            sys.exit(f"{os.path.relpath(candidate, root)} has C++ blocks: add it to tests/user/meson.build's list")
    os.makedirs(errors_dir, exist_ok=True)
    for old in os.listdir(errors_dir):
        os.remove(os.path.join(errors_dir, old))
    count = 0
    for path in sources:
        shown = os.path.relpath(path, root)
        name = re.sub(r"\W", "_", shown)
        body.append(f"namespace doc_{name} {{\nusing namespace xgrad;")
        for line, code, directive, directive_line in blocks(path):
            where = f"{shown}:{line}"
            scope, argument, given = parse(directive, code, where)
            count += 1
            if scope == "error":
                with open(os.path.join(errors_dir, f"{name}_{line}.cpp"), "w", encoding="utf-8") as f:
                    f.write(f"// expect: {argument}\n#include <xgrad/xgrad.hpp>\nusing namespace xgrad;\n")
                    f.write(f'void block() {{\n#line {directive_line} "{shown}"\n' + "\n".join(given) + "\n")
                    f.write(f'#line {line} "{shown}"\n' + "\n".join(code) + "\n}\n")
                continue
            if scope == "program":
                includes += [c for c in code if c.startswith("#include")]
                code = [re.sub(r"\bint main\(", "int main_program(", c) for c in code if not c.startswith("#include")]
                code = [c for c in code if c.strip() != "using namespace xgrad;"]
            if scope == "function":
                includes += [c for c in code if c.startswith("#include")]
                code = [c for c in code if not c.startswith("#include")]
                body.append(f"[[maybe_unused]] void block_{line}() {{")
            if given:
                body.append(f'#line {directive_line} "{shown}"')
                body += given
            body.append(f'#line {line} "{shown}"')
            body += code
            if scope == "function":
                body.append("}")
        body.append(f"}}  // namespace doc_{name}")
    with open(out_path, "w", encoding="utf-8") as f:
        f.write(f"// Generated by tests/user/doc_blocks.py from {len(sources)} Markdown files: {count} blocks.\n")
        f.write("\n".join(dict.fromkeys(includes)) + "\n\n" + "\n".join(body) + "\n")


if __name__ == "__main__":
    main()
