#!/usr/bin/env python3
"""Fails when a header includes one of a layer above its own (CONTRIBUTING.md, "Layers"):

    core <- kernels <- ops <- nn <- inspect, io, optim, check, text <- dist <- xgrad.hpp, pch.hpp
    and in the tool: study, tasks, workloads <- commands, main.cpp

A folder may include its own layer and those below it. Also fails when a header that lists what
libxgrad compiles (XGRAD_COMPILED_IN) is not reached from xgrad.hpp, which lib/*.cpp include: its
list would then be declared extern in programs but compiled nowhere.
Usage: check_layers.py SOURCE_ROOT"""
import os
import re
import sys

LIBRARY = {"core": 0, "kernels": 1, "ops": 2, "nn": 3, "inspect": 4, "io": 4, "optim": 4, "check": 4, "text": 4,
           "dist": 5}
UMBRELLA = 6  # include/xgrad/*.hpp: xgrad.hpp, pch.hpp
TOOL = {"study": 0, "tasks": 0, "workloads": 0, "commands": 1}
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')


def library_layer(path):
    """The layer of include/xgrad/<folder>/..., or of xgrad/<folder>/... as included."""
    parts = path.split("/")
    if len(parts) == 2:
        return UMBRELLA
    if parts[1] not in LIBRARY:
        sys.exit(f"check_layers.py: {path}: folder '{parts[1]}' has no layer: add it to LIBRARY")
    return LIBRARY[parts[1]]


def unreached_compiled_lists(include_root):
    """Headers with an XGRAD_COMPILED_IN list that xgrad.hpp does not include, directly or not."""
    reached, pending = set(), ["xgrad/xgrad.hpp"]
    while pending:
        header = pending.pop()
        if header in reached or not os.path.exists(os.path.join(include_root, header)):
            continue
        reached.add(header)
        for line in open(os.path.join(include_root, header), encoding="utf-8"):
            m = INCLUDE.match(line)
            if m and m.group(1).startswith("xgrad/"):
                pending.append(m.group(1))
    problems = []
    for dirpath, _, files in os.walk(os.path.join(include_root, "xgrad")):
        for name in sorted(files):
            header = os.path.relpath(os.path.join(dirpath, name), include_root)
            text = open(os.path.join(include_root, header), encoding="utf-8").read()
            if header != "xgrad/core/compiled.hpp" and "XGRAD_COMPILED_IN" in text and header not in reached:
                problems.append(f"include/{header}: lists what libxgrad compiles, but xgrad.hpp does not include it")
    return problems


def main():
    root = sys.argv[1]
    problems = []
    for folder, layers, prefix in (("include", None, "xgrad/"), ("src", TOOL, "")):
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                if not name.endswith((".hpp", ".cpp")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, os.path.join(root, folder))
                if layers is None:
                    own = library_layer(rel)
                else:
                    top = rel.split("/")[0]
                    own = layers.get(top, max(layers.values()))  # main.cpp: the top
                for number, line in enumerate(open(path, encoding="utf-8"), 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    target = m.group(1)
                    if layers is None and target.startswith(prefix):
                        included = library_layer(target)
                    elif layers is not None and target.split("/")[0] in layers:
                        included = layers[target.split("/")[0]]
                    else:
                        continue
                    if included > own:
                        problems.append(f"{folder}/{rel}:{number}: includes {target}, a layer above its own")
    problems += unreached_compiled_lists(os.path.join(root, "include"))
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} problem(s): see CONTRIBUTING.md, \"Layers\" and \"Adding an op\"")
        return 1
    print("every include points down or across its own layer; every compiled list is reached from xgrad.hpp")
    return 0


if __name__ == "__main__":
    sys.exit(main())
