"""Reading Rust source as text for the layout check (import-cycles.py):
literals and comments blanked so that braces inside them do not count, and
the end of a braced item."""
import re

_RAW = re.compile(r'b?r(#*)"')
_CHAR = re.compile(r"'(\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|\\.|[^\\'])'")


def blank_literals(src: str) -> str:
    """The source with comments, strings and char literals turned into
    spaces. Newlines are kept and the length is unchanged, so offsets and
    line numbers still point into the original."""
    out, i, n = [], 0, len(src)
    while i < n:
        ident_before = i > 0 and (src[i - 1].isalnum() or src[i - 1] == "_")
        if src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
        elif src.startswith("/*", i):
            j = src.find("*/", i) + 2
        elif (m := _RAW.match(src, i)) and not ident_before:
            end = '"' + m.group(1)
            j = src.find(end, m.end()) + len(end)
        elif src[i] == '"':
            j = i + 1
            while src[j] != '"':
                j += 2 if src[j] == "\\" else 1
            j += 1
        elif src[i] == "'" and (m := _CHAR.match(src, i)):
            j = m.end()
        else:
            out.append(src[i])
            i += 1
            continue
        out.append(re.sub(r"[^\n]", " ", src[i:j]))
        i = j
    return "".join(out)


def block_end(blank: str, start: int) -> int:
    """The offset just past the `{...}` block that opens at or after `start`
    in blanked source, or past the `;` that ends the item first."""
    depth = 0
    for i in range(start, len(blank)):
        c = blank[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i + 1
        elif c == ";" and depth == 0:
            return i + 1
    return len(blank)
