"""Prints BENCHMARKS.md run R's table from criterion's results: the passes a
32k chat needs from any design (the `floor` group of the inspect crate's
`json` bench), and the guard's reader and bound decision against them.

The bound decision's floor is one copy and the tally of its message, scaled
from the floor's 139 kB to the row's 105 kB, plus the part of the decision
that does not grow with the prompt (the row at 3.3 kB). Each row's floor
is its stage's as the stages stand, each making its own copy of the
message; a design whose template shared the reader's strings would make
one copy in all, which the "both" line does not take off.

Usage:
  cargo bench -p prefill-guard-inspect --bench json -- 'floor|one pass/chat 32k, compact'
  cargo bench -p prefill-guard-count --bench count -- 'render/qwen2.5/decide_by_bound/(3300|105000)'
  python3 bench/floor.py [target/criterion]
"""

import json
import sys
from pathlib import Path

# The floor rows' message (`prose(139_000)` in the json bench) and the render
# row's, in bytes.
FLOOR_MESSAGE = 139_000
RENDER_MESSAGE = 105_000

VALIDATION = "floor/32k chat/UTF-8 validation"
END = "floor/32k chat/the string's end (memchr)"
CONTROL = "floor/32k chat/control check"
COPY = "floor/32k chat/one copy into a template string"
TALLY = "floor/32k chat/bound tally"
READER = "json/one pass/chat 32k, compact"
DECISION_SMALL = "render/qwen2.5/decide_by_bound/3300"
DECISION = "render/qwen2.5/decide_by_bound/105000"
PASSES = [VALIDATION, END, CONTROL, COPY, TALLY]


def medians(root: Path) -> dict[str, float]:
    """Median time in µs of every benchmark under `root`, by criterion's full id."""
    out = {}
    for bench in root.glob("**/new/benchmark.json"):
        full_id = json.loads(bench.read_text())["full_id"]
        estimates = json.loads((bench.parent / "estimates.json").read_text())
        out[full_id] = estimates["median"]["point_estimate"] / 1e3
    return out


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "target" / "criterion")
    m = medians(root)
    needed = PASSES + [READER, DECISION_SMALL, DECISION]
    missing = [n for n in needed if n not in m]
    if missing:
        sys.exit("no criterion result for: " + "; ".join(missing) + " (see the usage in bench/floor.py)")
    print("| floor pass, 32k chat | µs |")
    print("|---|---:|")
    for name in PASSES:
        print(f"| {name.removeprefix('floor/32k chat/')} | {m[name]:.2f} |")
    print(f"| **sum** | **{sum(m[n] for n in PASSES):.2f}** |")
    print()
    scale = RENDER_MESSAGE / FLOOR_MESSAGE
    reader_floor = m[VALIDATION] + m[END] + m[CONTROL] + m[COPY]
    decision_floor = (m[COPY] + m[TALLY]) * scale + m[DECISION_SMALL]
    rows = [
        (f"reader (`{READER}`)", m[READER], reader_floor),
        (f"bound decision (`{DECISION}`)", m[DECISION], decision_floor),
    ]
    print("| row | measured µs | floor µs | ratio |")
    print("|---|---:|---:|---:|")
    for name, measured, floor in rows:
        print(f"| {name} | {measured:.2f} | {floor:.2f} | {measured / floor:.2f}× |")
    measured = sum(r[1] for r in rows)
    floor = sum(r[2] for r in rows)
    print(f"| **both** | **{measured:.2f}** | **{floor:.2f}** | **{measured / floor:.2f}×** |")


if __name__ == "__main__":
    main()
