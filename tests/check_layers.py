#!/usr/bin/env python3
"""Fails when a header includes one of a layer above its own (CONTRIBUTING.md, "Layers"):

    core <- kernels <- ops <- nn <- inspect, io, optim, check, text <- dist <- xgrad.hpp, pch.hpp
    and in the tool: study, tasks, workloads <- commands, main.cpp

A folder may include its own layer and those below it. Usage: check_layers.py SOURCE_ROOT"""
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
    for p in problems:
        print(p)
    if problems:
        print(f"{len(problems)} include(s) against the layers (CONTRIBUTING.md, \"Layers\")")
        return 1
    print("every include points down or across its own layer")
    return 0


if __name__ == "__main__":
    sys.exit(main())
