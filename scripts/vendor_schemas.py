"""Write the JSON Schemas tests/test_deploy.py validates deploy/ against, from their published sources.

    python scripts/vendor_schemas.py KUBERNETES_VALIDATE_WHEEL NFD_CRDS_YAML

* Kubernetes: kubernetes-validate's strict schema of each kind deploy/ uses (kubernetes-validate 1.37.0, Apache-2.0,
  ``kubernetes-json-schema/v1.37.0-local-strict``), with only the ``$defs`` of ``_definitions.json`` it reaches.
* Node Feature Discovery: the ``openAPIV3Schema`` of the NodeFeatureRule CRD (v1alpha1) from
  kubernetes-sigs/node-feature-discovery ``deployment/base/nfd-crds/nfd-api-crds.yaml`` (Apache-2.0).

Both land in tests/schemas/ with a note of where they came from (tests/schemas/README.md).
"""

from __future__ import annotations

import json
import pathlib
import sys
import zipfile
from typing import Any

import yaml

OUT = pathlib.Path(__file__).resolve().parent.parent / "tests" / "schemas"
K8S = "kubernetes_validate/kubernetes-json-schema/v1.37.0-local-strict"
KINDS = {"daemonset-apps-v1": "DaemonSet"}


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        out = {node["$ref"].rsplit("/", 1)[-1]} if isinstance(node.get("$ref"), str) else set()
        for value in node.values():
            out |= _refs(value)
        return out
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node)) if node else set()
    return set()


def _relocate(node: Any) -> Any:
    """``/api/_definitions.json#/$defs/X`` -> ``#/$defs/X``: one self-contained file; descriptions dropped (a
    third of the size, and validation never reads them)."""
    if isinstance(node, dict):
        return {k: ("#/$defs/" + v.rsplit("/", 1)[-1] if k == "$ref" and isinstance(v, str) else _relocate(v))
                for k, v in node.items() if not (k == "description" and isinstance(v, str))}
    if isinstance(node, list):
        return [_relocate(v) for v in node]
    return node


def kubernetes(wheel: str) -> None:
    with zipfile.ZipFile(wheel) as z:
        defs = json.loads(z.read(f"{K8S}/_definitions.json"))["$defs"]
        for name in KINDS:
            schema = json.loads(z.read(f"{K8S}/{name}.json"))
            needed: set[str] = set()
            todo = _refs(schema)
            while todo:
                ref = todo.pop()
                if ref not in needed:
                    needed.add(ref)
                    todo |= _refs(defs[ref])
            schema = _relocate(schema)
            schema["$defs"] = {k: _relocate(defs[k]) for k in sorted(needed)}
            (OUT / f"k8s-{name}.json").write_text(json.dumps(schema, separators=(",", ":"), sort_keys=True) + "\n")


def nfd(crds: str) -> None:
    for doc in yaml.safe_load_all(pathlib.Path(crds).read_text()):
        if doc and doc["spec"]["names"]["kind"] == "NodeFeatureRule":
            version = next(v for v in doc["spec"]["versions"] if v["name"] == "v1alpha1")
            schema = version["schema"]["openAPIV3Schema"]
            (OUT / "nfd-nodefeaturerule-v1alpha1.json").write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")


def main(argv: list[str]) -> int:
    OUT.mkdir(parents=True, exist_ok=True)
    kubernetes(argv[0])
    nfd(argv[1])
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
