#!/usr/bin/env python3
"""Validates custom resources (Gateway API, Envoy Gateway, Istio) against
the openAPIV3Schema of their CustomResourceDefinitions, as the API server
would admit them: the version must be served; the structural schema is
checked with unknown fields refused (kubectl's --validate=strict); schema
defaults are applied, then every x-kubernetes-validations (CEL) rule on a
present field is evaluated. A rule using a Kubernetes CEL library function
that cel-python lacks (isURL, quantity, ...) is listed as not evaluated,
never counted as passed; transition rules (oldSelf) do not apply to a
create. Objects of built-in kinds are left to kubernetes-validate.

Usage: crd-check.py --crds DIR [--expect KIND]... FILE...
DIR holds the CRD files (searched recursively).
Every object of a group some CRD in DIR defines must have a CRD (an unknown
kind or version fails); every --expect kind must have been seen."""
import argparse
import copy
import pathlib
import re
import sys

import celpy
import jsonschema
import yaml

# Kubernetes object names (DNS-1123 subdomain).
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def load_crds(directory):
    """(group, version, kind) -> (schema, crd file) for every served version."""
    crds, groups = {}, set()
    files = sorted(pathlib.Path(directory).rglob("*.yaml"))
    if not files:
        sys.exit(f"crd-check: no CRD files in {directory}")
    for f in files:
        for doc in yaml.safe_load_all(f.read_text()):
            if not doc or doc.get("kind") != "CustomResourceDefinition":
                continue
            spec = doc["spec"]
            groups.add(spec["group"])
            for v in spec["versions"]:
                if v.get("served"):
                    key = (spec["group"], v["name"], spec["names"]["kind"])
                    crds[key] = (v["schema"]["openAPIV3Schema"], f.name)
    return crds, groups


def strict(schema):
    """The schema with unknown fields refused wherever the structural schema
    lists the fields and does not preserve unknown ones."""
    s = copy.deepcopy(schema)
    # The API server takes these at the root whatever the schema lists
    # (Istio's CRDs list spec and status only).
    root = s.setdefault("properties", {})
    root.setdefault("apiVersion", {"type": "string"})
    root.setdefault("kind", {"type": "string"})
    root.setdefault("metadata", {"type": "object"})

    def walk(n):
        if not isinstance(n, dict):
            return
        props = n.get("properties")
        if props is not None:
            if "additionalProperties" not in n and not n.get("x-kubernetes-preserve-unknown-fields"):
                n["additionalProperties"] = False
            for p in props.values():
                walk(p)
        if isinstance(n.get("additionalProperties"), dict):
            walk(n["additionalProperties"])
        if isinstance(n.get("items"), dict):
            walk(n["items"])

    walk(s)
    return s


def apply_defaults(schema, value):
    """Structural defaulting, as the API server does before validation."""
    if isinstance(value, dict):
        props = schema.get("properties", {})
        for k, sub in props.items():
            if k not in value and "default" in sub:
                value[k] = copy.deepcopy(sub["default"])
        for k, v in value.items():
            if k in props:
                apply_defaults(props[k], v)
            elif isinstance(schema.get("additionalProperties"), dict):
                apply_defaults(schema["additionalProperties"], v)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for v in value:
            apply_defaults(schema["items"], v)


class Cel:
    def __init__(self):
        self.env = celpy.Environment()
        self.cache = {}
        self.evaluated = 0
        self.skipped = {}

    def check(self, rule, value, where):
        """None if the rule holds, else the failure; a rule that cannot be
        evaluated here is recorded in self.skipped."""
        expr = rule["rule"]
        if re.search(r"\boldSelf\b", expr):
            return None
        try:
            if expr not in self.cache:
                self.cache[expr] = self.env.program(self.env.compile(expr))
            result = self.cache[expr].evaluate({"self": celpy.json_to_cel(value)})
        except Exception as e:  # noqa: BLE001 - any failure: not evaluated
            self.skipped.setdefault(expr, f"at {where or '(root)'}: {type(e).__name__}: {str(e).splitlines()[0][:120]}")
            return None
        if isinstance(result, celpy.celtypes.BoolType):
            self.evaluated += 1
            return None if bool(result) else rule.get("message") or expr
        self.skipped.setdefault(expr, f"at {where or '(root)'}: not a bool: {type(result).__name__} {str(result)[:120]}")
        return None

    def walk(self, schema, value, path, errors):
        for rule in schema.get("x-kubernetes-validations", []):
            msg = self.check(rule, value, path)
            if msg:
                errors.append(f"{path.lstrip('.') or '(root)'}: {msg} (rule: {rule['rule'].strip()})")
        if isinstance(value, dict):
            props = schema.get("properties", {})
            for k, v in value.items():
                if k in props:
                    self.walk(props[k], v, f"{path}.{k}", errors)
                elif isinstance(schema.get("additionalProperties"), dict):
                    self.walk(schema["additionalProperties"], v, f"{path}.{k}", errors)
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            for i, v in enumerate(value):
                self.walk(schema["items"], v, f"{path}[{i}]", errors)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--crds", required=True)
    ap.add_argument("--expect", action="append", default=[])
    ap.add_argument("files", nargs="+")
    args = ap.parse_args()
    crds, groups = load_crds(args.crds)
    validators = {}
    cel = Cel()
    errors, seen = [], {}
    for f in args.files:
        for i, doc in enumerate(yaml.safe_load_all(open(f))):
            if not doc:
                continue
            api, kind = doc.get("apiVersion", ""), doc.get("kind", "")
            group, _, version = api.rpartition("/")
            if group not in groups:
                continue
            name = (doc.get("metadata") or {}).get("name", "")
            where = f"{f}: {kind}/{name or '#' + str(i)}"
            if (group, version, kind) not in crds:
                errors.append(f"{where}: no served {api} {kind} in the CRDs of {args.crds}")
                continue
            if not NAME.match(name) or len(name) > 253:
                errors.append(f"{where}: metadata.name is not a valid object name")
            schema, crd_file = crds[(group, version, kind)]
            key = (group, version, kind)
            if key not in validators:
                validators[key] = jsonschema.Draft4Validator(strict(schema))
            # As the API server: defaults first, then the schema and the rules.
            defaulted = copy.deepcopy(doc)
            apply_defaults(schema, defaulted)
            for e in sorted(validators[key].iter_errors(defaulted), key=lambda e: list(map(str, e.absolute_path))):
                path = ".".join(str(p) for p in e.absolute_path) or "(root)"
                errors.append(f"{where}: {path}: {e.message} (schema: {crd_file})")
            failed = []
            cel.walk(schema, defaulted, "", failed)
            errors += [f"{where}: {e}" for e in failed]
            seen[kind] = seen.get(kind, 0) + 1
    for kind in args.expect:
        if kind not in seen:
            errors.append(f"no {kind} among the files: nothing was validated for it")
    for e in errors:
        print(f"FAIL {e}")
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(seen.items()))
    print(f"crds: {sum(seen.values())} objects validated ({kinds}); {cel.evaluated} CEL rule checks held, "
          f"{len(cel.skipped)} rules not evaluable here")
    for expr, why in sorted(cel.skipped.items()):
        print(f"    not evaluated: {expr.strip()[:160]} ({why})")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
