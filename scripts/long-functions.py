#!/usr/bin/env python3
"""Lists the functions under src/ longer than a limit (150 lines), unit tests
included. Generated tables and dispatch tables that mirror CPython or glibc
one arm per case are allowed by name below; any other long function is a
place to split. Exit 1 if there is one.

Usage: scripts/long-functions.py [--limit N] [--all]"""
import argparse
import pathlib
import re
import sys

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"

# One arm per Python `str` method and per strftime conversion: splitting
# them would only scatter the table a reader compares with CPython/glibc.
ALLOWED = {
    ("count/template/methods.rs", "string_method"),
    ("count/template/strftime.rs", "glibc_strftime"),
}


def blank_literals(src: str) -> str:
    """The source with comments, strings and char literals blanked (newlines
    kept), so braces inside them do not count."""
    out, i, n = [], 0, len(src)
    keep_lines = lambda s: re.sub(r"[^\n]", " ", s)
    while i < n:
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i) + 2
        elif (m := re.match(r'b?r(#*)"', src[i : i + 10])) and not (i and (src[i - 1].isalnum() or src[i - 1] == "_")):
            end = '"' + m.group(1)
            j = src.find(end, i + len(m.group(0))) + len(end)
        elif src[i] == '"' or src.startswith('b"', i) and not (i and src[i - 1].isalnum()):
            j = src.index('"', i) + 1
            while src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
        elif src[i] == "'" and (m := re.match(r"'(\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|\\.|[^\\'])'", src[i : i + 14])):
            j = i + len(m.group(0))
        else:
            out.append(src[i])
            i += 1
            continue
        out.append(keep_lines(src[i:j]))
        i = j
    return "".join(out)


FN = re.compile(r"\s*(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?(?:const\s+)?(?:unsafe\s+)?fn\s+(\w+)")


def functions(path: pathlib.Path):
    lines = blank_literals(path.read_text()).split("\n")
    for start, line in enumerate(lines):
        m = FN.match(line)
        if not m:
            continue
        depth, opened = 0, False
        for end in range(start, len(lines)):
            for ch in lines[end]:
                if ch == "{":
                    depth, opened = depth + 1, True
                elif ch == "}":
                    depth -= 1
                elif ch == ";" and not opened:
                    break
            else:
                if not (opened and depth == 0):
                    continue
            break
        yield m.group(1), start + 1, end - start + 1


parser = argparse.ArgumentParser()
parser.add_argument("--limit", type=int, default=150)
parser.add_argument("--all", action="store_true", help="also list the allowed ones")
args = parser.parse_args()
long = []
for f in sorted(SRC.rglob("*.rs")):
    rel = f.relative_to(SRC).as_posix()
    for name, line, length in functions(f):
        if length > args.limit and (args.all or (rel, name) not in ALLOWED):
            long.append((length, f"src/{rel}:{line}", name))
for length, where, name in sorted(long, reverse=True):
    print(f"{length:5} lines  {where}  {name}")
print(f"{len(long)} function(s) over {args.limit} lines" + ("" if args.all else " (outside the dispatch tables allowed above)"))
sys.exit(1 if long and not args.all else 0)
