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

from rust_source import blank_literals, block_end

SRC = pathlib.Path(__file__).resolve().parent.parent / "src"

# One arm per Python `str` method and per strftime conversion: splitting
# them would only scatter the table a reader compares with CPython/glibc.
ALLOWED = {
    ("count/template/methods.rs", "string_method"),
    ("count/template/strftime.rs", "glibc_strftime"),
}


FN = re.compile(r"(?m)^[ \t]*(?:pub(?:\([^)]*\))?\s+)?(?:async\s+)?(?:const\s+)?(?:unsafe\s+)?fn\s+(\w+)")


def functions(path: pathlib.Path):
    blank = blank_literals(path.read_text())
    for m in FN.finditer(blank):
        start_line = blank.count("\n", 0, m.start(1)) + 1
        end_line = blank.count("\n", 0, block_end(blank, m.end()) - 1) + 1
        yield m.group(1), start_line, end_line - start_line + 1


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
