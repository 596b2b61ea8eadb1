"""Write hoststate/data/vllm_config_fields.json: the input fields of each recorded vLLM version's config classes
that dict-valued options are built into (CompilationConfig, SpeculativeConfig).

``--compilation-config`` (its JSON, ``-O.KEY`` / ``--compilation-config.KEY``, a ``--config`` file's mapping) is
validated by pydantic into ``CompilationConfig`` (vllm/engine/arg_utils.py ``parse_dataclass``:
``TypeAdapter(cls).validate_json``), and its ``pass_config`` / ``dynamic_shapes_config`` mappings into the nested
config classes. A key that is no input field of the class (not declared, or declared with ``init=False``) is
dropped silently where the class is a plain ``pydantic.dataclasses.dataclass`` (pydantic's default
``extra="ignore"``: 0.10.2-0.12.0), and refused where ``vllm.config.utils.config`` makes it one with
``ConfigDict(extra="forbid")`` (0.33.0). So a misspelt or foreign key is the server without it, or a server that
does not start, never a setting. ``--speculative-config`` is a plain dict up to EngineArgs.create_speculative_config,
which builds ``SpeculativeConfig(**value)``: the same rule, applied when the engine's config is built.

This script reads the fields with ``ast`` from each version's unpacked source (nothing of vLLM is imported or run):
class-level annotated names of ``vllm/config/compilation.py``'s CompilationConfig and of the config classes its
fields are typed as, less ``ClassVar``/``InitVar`` and ``field(init=False)``; and the extra policy from
``vllm/config/utils.py``'s ``config`` decorator.

    python scripts/vllm_config_fields.py --src /tmp/vllm-src            # rewrite from /tmp/vllm-src/vllm-<version>/
    python scripts/vllm_config_fields.py --src /tmp/vllm-src --check    # exit 1 when the file is stale
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))  # the shared datafile module beside this script
from datafile import source_dir, write_or_check  # noqa: E402

OUT = REPO / "hoststate" / "data" / "vllm_config_fields.json"
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


#: The dict-valued options checked, by dest: the module (under vllm/config/) and the class pydantic builds from them
#: (``--speculative-config`` is a plain dict that EngineArgs.create_speculative_config passes as
#: ``SpeculativeConfig(**...)``; 0.10.2 keeps SpeculativeConfig in vllm/config/__init__.py).
CLASSES = {"compilation_config": (("compilation.py",), "CompilationConfig"),
           "speculative_config": (("speculative.py", "__init__.py"), "SpeculativeConfig")}


def _fields_of(root: Path, modules: tuple[str, ...], name: str) -> dict[str, Any]:
    for module_name in modules:
        path = root / "vllm" / "config" / module_name
        if not path.exists():
            continue
        module = ast.parse(path.read_text())
        classes = {n.name: n for n in module.body if isinstance(n, ast.ClassDef) and _decorated_config(n)}
        if name not in classes:
            continue
        top = _input_fields(classes[name])
        nested = {field: sorted(_input_fields(classes[ann])) for field, ann in top.items() if ann in classes}
        return {"fields": sorted(top), "nested": nested}
    raise LookupError(f"{name} not found under {root}")


def derive_version(root: Path) -> dict[str, Any]:
    utils = (root / "vllm" / "config" / "utils.py").read_text()
    extra = "forbid" if 'ConfigDict(extra="forbid")' in utils else "ignore"
    return {dest: {"extra": extra, **_fields_of(root, modules, name)} for dest, (modules, name) in CLASSES.items()}


def derive(src: Path) -> dict[str, Any]:
    return {
        "about": "input fields of the config classes pydantic builds from dict-valued options, per vLLM version "
                 "(scripts/vllm_config_fields.py, from vllm/config/*.py): a key that is none of them is ignored "
                 "(extra=ignore) or refused (extra=forbid)",
        "versions": {v: derive_version(src / f"vllm-{v}") for v in VERSIONS if (src / f"vllm-{v}").is_dir()},
    }


def render(table: dict[str, Any]) -> str:
    return json.dumps(table, indent=1) + "\n"


def main(argv: list[str]) -> int:
    return write_or_check(OUT, render(derive(source_dir(argv))), argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
