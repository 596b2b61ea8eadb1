"""Write hoststate/data/vllm_compilation_fields.json: each recorded vLLM version's CompilationConfig input fields.

``--compilation-config`` (its JSON, ``-O.KEY`` / ``--compilation-config.KEY``, a ``--config`` file's mapping) is
validated by pydantic into ``CompilationConfig`` (vllm/engine/arg_utils.py ``parse_dataclass``:
``TypeAdapter(cls).validate_json``), and its ``pass_config`` / ``dynamic_shapes_config`` mappings into the nested
config classes. A key that is no input field of the class (not declared, or declared with ``init=False``) is
dropped silently where the class is a plain ``pydantic.dataclasses.dataclass`` (pydantic's default
``extra="ignore"``: 0.10.2-0.12.0), and refused where ``vllm.config.utils.config`` makes it one with
``ConfigDict(extra="forbid")`` (0.33.0). So a misspelt or foreign key is the server without it, or a server that
does not start, never a setting.

This script reads the fields with ``ast`` from each version's unpacked source (nothing of vLLM is imported or run):
class-level annotated names of ``vllm/config/compilation.py``'s CompilationConfig and of the config classes its
fields are typed as, less ``ClassVar``/``InitVar`` and ``field(init=False)``; and the extra policy from
``vllm/config/utils.py``'s ``config`` decorator.

    python scripts/vllm_compilation_fields.py --src /tmp/rtb            # rewrite from /tmp/rtb/vllm-<version>/
    python scripts/vllm_compilation_fields.py --src /tmp/rtb --check    # exit 1 when the file is stale
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
OUT = REPO / "hoststate" / "data" / "vllm_compilation_fields.json"
VERSIONS = ("0.10.2", "0.11.0", "0.11.1", "0.12.0", "0.33.0")


def _input_fields(node: ast.ClassDef) -> dict[str, str]:
    """The class's dataclass input fields: name -> annotation text."""
    out = {}
    for st in node.body:
        if not (isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name)):
            continue
        annotation = ast.unparse(st.annotation)
        if annotation.startswith(("ClassVar", "InitVar", "typing.ClassVar")):
            continue
        if isinstance(st.value, ast.Call) and ast.unparse(st.value.func) in ("field", "Field", "dataclasses.field") \
                and any(kw.arg == "init" and isinstance(kw.value, ast.Constant) and kw.value.value is False
                        for kw in st.value.keywords):
            continue
        out[st.target.id] = annotation
    return out


def _decorated_config(node: ast.ClassDef) -> bool:
    return any(ast.unparse(d).split("(")[0] in ("config", "dataclass") for d in node.decorator_list)


def derive_version(root: Path) -> dict[str, Any]:
    module = ast.parse((root / "vllm" / "config" / "compilation.py").read_text())
    classes = {n.name: n for n in module.body if isinstance(n, ast.ClassDef) and _decorated_config(n)}
    top = _input_fields(classes["CompilationConfig"])
    nested = {name: sorted(_input_fields(classes[ann])) for name, ann in top.items() if ann in classes}
    utils = (root / "vllm" / "config" / "utils.py").read_text()
    extra = "forbid" if 'ConfigDict(extra="forbid")' in utils else "ignore"
    return {"extra": extra, "fields": sorted(top), "nested": nested}


def derive(src: Path) -> dict[str, Any]:
    return {
        "about": "CompilationConfig input fields per vLLM version (scripts/vllm_compilation_fields.py, from "
                 "vllm/config/compilation.py and vllm/config/utils.py): a key that is none of them is ignored "
                 "(extra=ignore) or refused (extra=forbid)",
        "versions": {v: derive_version(src / f"vllm-{v}") for v in VERSIONS if (src / f"vllm-{v}").is_dir()},
    }


def render(table: dict[str, Any]) -> str:
    return json.dumps(table, indent=1) + "\n"


def main(argv: list[str]) -> int:
    src = Path(argv[argv.index("--src") + 1]) if "--src" in argv else Path("/tmp/rtb")
    text = render(derive(src))
    if "--check" in argv:
        return 0 if OUT.exists() and OUT.read_text() == text else 1
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
