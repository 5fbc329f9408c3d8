"""The compact form of the release expected-value files written by
gen_dsv32_releases.py, gen_dsv4_releases.py and gen_dsv41_releases.py
(dsv32_releases_expected.json, dsv4_sglang_expected.json,
dsv41_sglang_expected.json), read back by `compact_tests.rs`.

Written as recorded, those files hold each golden request body, its message
contents (again in `glue` and `encoder`) and its rendered prompt once per
case, profile and release: tens of megabytes of the same few strings. The
compact form keeps every value the tests read, in three ways:

* a case's `body` that is exactly `json.dumps` of a shared golden case's
  `request` (../shared/goldens/cases/<case>.json, the text the generator sent)
  becomes `{"golden": <case>, "sha256": <hex>}`, the hash of that request as
  `json.dumps(request, ensure_ascii=False, separators=(",", ":"))` writes it
  (serde_json's compact form of the same value, which the test checks); any
  other body stays as text;
* an `encoder.output` longer than OUTPUT_LIMIT bytes of UTF-8 becomes
  `{"sha256": <hex of its UTF-8>, "chars": <its length>}` (shorter ones stay
  as text, so a failure shows them);
* every value (string, list or object) whose JSON text is at least
  INTERN_MIN characters long and that occurs more than once in the file goes
  once into the top-level `values` table, each occurrence replaced by
  `{"$v": <index>}`; an entry may refer to earlier entries only (the insides
  of a repeated message list, say, are entries before it).

The file is `{"format": FORMAT, "values": [...], "releases": {version: run}}`,
one table entry and one case a line. `expand` undoes the third step only;
`compact` accepts bodies and outputs already in compact form, so a generator
can read the file back, replace one release and write it again (`read`,
`write`), and the same recorded values always give the same file.

Converting a file recorded in the full form, in place:

    python3 crates/count/src/encoder/testdata/compact_expected.py FILE.json...
"""
import hashlib
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
CRATE = os.path.abspath(os.path.join(HERE, "..", "..", "..", "..", ".."))
SHARED = os.environ.get("PREFILL_GUARD_SHARED", os.path.join(CRATE, "..", "shared"))

FORMAT = "prefill-guard compact expected values 1"
OUTPUT_LIMIT = 4096
INTERN_MIN = 32
REF = "$v"


def _load(path):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def release_tuple(version):
    return tuple(int(x) for x in version.split(".")[:3] if x.isdigit())


def release_order(version):
    """0.5.6 before 0.5.6.post2 before 0.5.7, whatever order they came in."""
    return release_tuple(version), version


def sha256(text):
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def canonical(value):
    """serde_json's `to_string` of the same value (no floats in the goldens)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


class Goldens:
    """The shared golden chat cases, read on first use."""

    def __init__(self, shared=SHARED):
        self.dir = os.path.join(shared, "goldens", "cases")
        self.cache = {}

    def request(self, case):
        if case not in self.cache:
            path = os.path.join(self.dir, case + ".json")
            self.cache[case] = _load(path)["request"] if os.path.exists(path) else None
        return self.cache[case]


def _compact_body(case, goldens):
    body = case.get("body")
    name = case.get("name", "")
    if not isinstance(body, str) or not name.startswith("golden/"):
        return body
    request = goldens.request(name[len("golden/"):])
    # The reference stands for the body only where the body is exactly the
    # text the generator sends for that golden case.
    if request is None or json.dumps(request) != body:
        return body
    return {"golden": name[len("golden/"):], "sha256": sha256(canonical(request))}


def _compact_output(output):
    if isinstance(output, str) and len(output.encode("utf-8")) > OUTPUT_LIMIT:
        return {"sha256": sha256(output), "chars": len(output)}
    return output


def _key(value):
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _count(value, counts):
    """Occurrences of every string, list and object, a repeated one counted
    without its insides again (they go into the table once, with it)."""
    if not isinstance(value, (str, dict, list)):
        return
    key = _key(value)
    counts[key] = counts.get(key, 0) + 1
    if counts[key] > 1 or isinstance(value, str):
        return
    if isinstance(value, dict):
        assert set(value) != {REF}, f"a recorded object reads as a table reference: {value}"
        value = value.values()
    for v in value:
        _count(v, counts)


def _intern(value, counts, table, index):
    if not isinstance(value, (str, dict, list)):
        return value
    key = _key(value)
    if key in index:
        return {REF: index[key]}
    if isinstance(value, dict):
        value = {k: _intern(v, counts, table, index) for k, v in value.items()}
    elif isinstance(value, list):
        value = [_intern(v, counts, table, index) for v in value]
    if counts[key] > 1 and len(key) >= INTERN_MIN:
        # After its insides: an entry refers to earlier entries only.
        index[key] = len(table)
        table.append(value)
        return {REF: index[key]}
    return value


def compact(releases, goldens=None):
    """{version: run} (full or compact bodies and outputs) -> the file's object."""
    goldens = goldens or Goldens()
    out = {}
    for version, run in sorted(releases.items(), key=lambda kv: release_order(kv[0])):
        cases = []
        for case in run["cases"]:
            case = dict(case)
            if "body" in case:
                case["body"] = _compact_body(case, goldens)
            if isinstance(case.get("encoder"), dict) and "output" in case["encoder"]:
                case["encoder"] = {**case["encoder"], "output": _compact_output(case["encoder"]["output"])}
            cases.append(case)
        out[version] = {**run, "cases": cases}
    counts, table, index = {}, [], {}
    for run in out.values():
        _count(run["cases"], counts)
    for version, run in out.items():
        out[version] = {**run, "cases": [_intern(c, counts, table, index) for c in run["cases"]]}
    return {"format": FORMAT, "values": table, "releases": out}


def _resolve(value, table):
    if isinstance(value, dict):
        if set(value) == {REF}:
            return table[value[REF]]
        return {k: _resolve(v, table) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(v, table) for v in value]
    return value


def expand(data):
    """The file's object -> {version: run}, table references resolved (bodies
    and long outputs stay as they are)."""
    if data.get("format") != FORMAT:
        return data  # written before the compact form: already {version: run}
    table = []
    for entry in data["values"]:
        table.append(_resolve(entry, table))
    return {v: {**run, "cases": _resolve(run["cases"], table)} for v, run in data["releases"].items()}


def dumps(releases, goldens=None):
    """One table entry and one case a line."""
    data = compact(releases, goldens)
    lines = ["{" + f'"format":{_key(data["format"])},', '"values":[']
    lines += [_key(v) + "," for v in data["values"]]
    if data["values"]:
        lines[-1] = lines[-1][:-1]
    lines.append('],"releases":{')
    for i, (version, run) in enumerate(data["releases"].items()):
        head = {k: v for k, v in run.items() if k != "cases"}
        lines.append(_key(version) + ":" + _key(head)[:-1] + ("," if head else "") + '"cases":[')
        lines += [_key(c) + "," for c in run["cases"]]
        if run["cases"]:
            lines[-1] = lines[-1][:-1]
        lines.append("]}" + ("," if i + 1 < len(data["releases"]) else ""))
    lines.append("}}")
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == data
    return text


def read(path):
    """The releases recorded in `path` ({} if there is none yet)."""
    return expand(_load(path)) if os.path.exists(path) else {}


def write(path, releases, goldens=None):
    """Writes `releases` to `path` in the compact form; returns its size."""
    text = dumps(releases, goldens)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return len(text.encode("utf-8"))


if __name__ == "__main__":
    for path in sys.argv[1:]:
        before = os.path.getsize(path)
        after = write(path, read(path))
        print(f"{path}: {before} -> {after} bytes")
