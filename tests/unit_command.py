#!/usr/bin/python3
"""unit_command.py BUILD_DIR OBJECT FLAG...: runs, in its folder, the compile command that BUILD_DIR's
compile_commands.json has for the object (.o) whose path contains OBJECT, with FLAG... added and without
its dependency-file flags; exits with the compiler's status. With -fsyntax-only it checks a unit
(templates instantiated, warnings and all) without generating its code."""
import json
import shlex
import subprocess
import sys

build, wanted, flags = sys.argv[1], sys.argv[2], sys.argv[3:]


def output(unit):  # CMake before 3.20 writes no "output"
    words = shlex.split(unit["command"])
    return unit.get("output") or words[words.index("-o") + 1]


units = [u for u in json.load(open(build + "/compile_commands.json")) if wanted in output(u) and output(u).endswith(".o")]
if len(units) != 1:
    sys.exit(f"unit_command.py: {len(units)} units of {build} match '{wanted}', not one")
words, kept = shlex.split(units[0]["command"]), []
skip = 0
for word in words:
    if skip:
        skip -= 1
    elif word in ("-MQ", "-MF", "-MT"):
        skip = 1
    elif word not in ("-MD", "-MMD"):
        kept.append(word)
sys.exit(subprocess.run(kept + flags, cwd=units[0]["directory"]).returncode)
