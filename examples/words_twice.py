#!/usr/bin/python3
"""A text on which copying pays, to watch an induction head form (docs/gpt.md, section 6).

Each line is 3 to 6 words drawn at random from the 2000 most frequent words of the fortunes
package (the default corpus of `xgrad train gpt`), then the same words again:

    lose change geoffrey, lose change geoffrey.

The first copy can only be guessed word by word; the second is known once the first has been read,
by a model that looks back to where the current word stood before and reads what came next.

    /usr/bin/python3 examples/words_twice.py words_twice.txt [--chars 2500000] [--seed 1]

Standard library only; the same seed gives the same file.
"""
import argparse
import collections
import os
import random
import re

FORTUNES = "/usr/share/games/fortunes"


def fortunes_text():
    # the files xgrad train gpt reads by default: no extension, not links, in name order
    names = sorted(
        name for name in os.listdir(FORTUNES)
        if "." not in name and os.path.isfile(os.path.join(FORTUNES, name))
        and not os.path.islink(os.path.join(FORTUNES, name)))
    return "".join(open(os.path.join(FORTUNES, name), encoding="utf-8", errors="replace").read() for name in names)


def main():
    parser = argparse.ArgumentParser(description="random words written twice, one pair per line")
    parser.add_argument("out", help="the text file to write")
    parser.add_argument("--chars", type=int, default=2_500_000, help="about this many characters")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if not os.path.isdir(FORTUNES):
        raise SystemExit(f"words_twice.py: {FORTUNES} is missing (sudo apt-get install fortunes)")
    counts = collections.Counter(re.findall(r"[a-z]+", fortunes_text().lower()))
    words = [word for word, _ in counts.most_common(2000)]
    rng = random.Random(args.seed)
    lines, size = [], 0
    while size < args.chars:
        phrase = " ".join(rng.choice(words) for _ in range(rng.randint(3, 6)))
        lines.append(f"{phrase}, {phrase}.\n")
        size += len(lines[-1])
    with open(args.out, "w", encoding="utf-8") as out:
        out.write("".join(lines))
    print(f"wrote {args.out}: {size} characters, {len(lines)} lines")


if __name__ == "__main__":
    main()
