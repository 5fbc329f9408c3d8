"""Prints the counting micro-benchmarks (crates/count/benches/count.rs) as one Markdown
table: per fixture, the median time of each benchmark and its ratio to the
`tokenizers` crate's own encode (the floor).

Usage: cargo bench --bench count && python3 bench/criterion_table.py [target/criterion]
"""

import json
import sys
from pathlib import Path

FLOOR = "tokenizers_encode_floor"


def main() -> None:
    root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parent.parent / "target" / "criterion")
    rows: dict[str, dict[str, tuple[str, float]]] = {}
    for est in sorted(root.glob("count_*/*/*/new/estimates.json")):
        param_dir = est.parent.parent
        function = param_dir.parent.name
        fixture = param_dir.parent.parent.name.removeprefix("count_")
        median_s = json.loads(est.read_text())["median"]["point_estimate"] / 1e9
        rows.setdefault(fixture, {})[function] = (param_dir.name, median_s)
    if not rows:
        sys.exit(f"no criterion results under {root}")
    functions = sorted({f for r in rows.values() for f in r}, key=lambda f: (f != FLOOR, f))
    print("| fixture | tokens | " + " | ".join(f"{f} (ms)" for f in functions) + " |")
    print("|---|---:|" + "---:|" * len(functions))
    for fixture, r in sorted(rows.items()):
        floor = r.get(FLOOR, (None, None))[1]
        cells = []
        for f in functions:
            if f not in r:
                cells.append("—")
                continue
            t = r[f][1]
            ratio = f" ({t / floor:.2f}×)" if floor and f != FLOOR else ""
            if floor and f != FLOOR and t / floor < 0.01:
                ratio = f" ({t / floor:.4f}×)"
            cells.append((f"{t * 1e3:.2f}" if t >= 1e-4 else f"{t * 1e3:.4f}") + ratio)
        tokens = r.get(FLOOR, next(iter(r.values())))[0]
        print(f"| {fixture} | {tokens} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
