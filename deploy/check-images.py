#!/usr/bin/env python3
"""Every container image the deployment files name is pinned: a tag other
than `latest`, or a digest. An untagged name means `latest` to every
runtime, and `latest` changes under a running deployment whenever a node
pulls again.

Checked: every `image:` in the YAML under deploy/ (an untagged name there
passes only if a kustomization under deploy/ sets its tag or digest with
`images:`, whose own newTag must be pinned), every `FROM` of the image
files (deploy/**/Containerfile*, Dockerfile*, and ./Dockerfile), and every
`image:` of the rendered manifests given as arguments (kustomize's output).

Usage: check-images.py [RENDERED.yaml]..."""
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent


def pinned(ref):
    """Why `ref` is not pinned, or None."""
    if "@sha256:" in ref:
        return None
    last = ref.rsplit("/", 1)[-1]
    if ":" not in last:
        return "no tag (a runtime pulls :latest)"
    tag = last.rsplit(":", 1)[1]
    if tag.lower() == "latest" or not tag:
        return "the tag latest"
    return None


def images(node):
    """Every string under an `image` key."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k == "image" and isinstance(v, str):
                yield v
            else:
                yield from images(v)
    elif isinstance(node, list):
        for v in node:
            yield from images(v)


def docs(path):
    try:
        return [d for d in yaml.safe_load_all(path.read_text()) if d]
    except yaml.YAMLError:
        return []


def main():
    problems, seen = [], 0
    yaml_files = sorted(p for p in (ROOT / "deploy").rglob("*") if p.suffix in (".yaml", ".yml"))
    # Names a kustomization pins with images: (name -> newTag/digest).
    set_by_kustomize = {}
    for f in yaml_files:
        if f.name != "kustomization.yaml":
            continue
        for d in docs(f):
            for entry in d.get("images") or []:
                rel = f.relative_to(ROOT)
                ref = entry.get("newName", entry["name"])
                if entry.get("digest"):
                    ref += "@" + entry["digest"]
                elif "newTag" in entry:
                    ref += ":" + str(entry["newTag"])
                why = pinned(ref)
                seen += 1
                if why:
                    problems.append(f"{rel}: images: {entry['name']} -> {ref}: {why}")
                else:
                    set_by_kustomize[entry["name"]] = ref
    for f in yaml_files:
        rel = f.relative_to(ROOT)
        for d in docs(f):
            for ref in images(d):
                seen += 1
                why = pinned(ref)
                if why and ref not in set_by_kustomize:
                    problems.append(f"{rel}: image {ref}: {why}")
    image_files = [ROOT / "Dockerfile"] + sorted(
        p for p in (ROOT / "deploy").rglob("*") if p.is_file() and p.name.startswith(("Containerfile", "Dockerfile"))
    )
    for f in image_files:
        if not f.exists():
            continue
        stages = set()
        for line in f.read_text().splitlines():
            m = re.match(r"^\s*FROM\s+(?:--platform=\S+\s+)?(\S+)(?:\s+AS\s+(\S+))?", line, re.I)
            if not m:
                continue
            ref, stage = m.group(1), m.group(2)
            seen += 1
            if ref != "scratch" and ref.lower() not in stages:
                why = "an ARG in the image name cannot be checked" if "$" in ref else pinned(ref)
                if why:
                    problems.append(f"{f.relative_to(ROOT)}: FROM {ref}: {why}")
            if stage:
                stages.add(stage.lower())
    for rendered in sys.argv[1:]:
        for d in docs(pathlib.Path(rendered)):
            for ref in images(d):
                seen += 1
                why = pinned(ref)
                if why:
                    problems.append(f"{rendered} ({d.get('kind')}/{d.get('metadata', {}).get('name')}): image {ref}: {why}")
    for p in problems:
        print(f"FAIL {p}")
    print(f"images: {seen} references checked, {len(problems)} not pinned")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
