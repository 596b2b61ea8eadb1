"""Write hoststate/data/vllm_choices.json: each recorded vLLM version's argparse ``choices`` of ``vllm serve``.

vLLM builds most of its options from its config dataclasses (vllm/engine/arg_utils.py ``get_kwargs`` ->
``_compute_kwargs``): a field whose type holds a ``Literal`` and neither ``str`` nor ``bool`` nor a dataclass gets
``choices=sorted(Literal values)`` (``literal_to_kwargs``; ``list[Literal[...]]`` gets them per item), and where the
type also admits None its ``type`` becomes ``optional_type(...)`` and ``choices`` gets None appended: the *string*
"None" up to 0.12.0, which the None that optional_type returns for "None" and "" never equals (argparse refuses both),
and the object None in 0.33.0 (so there "None" and "" are accepted as the default). 0.10.2's ``get_type_hints`` only
splits ``typing.Union`` (``X | None`` is one opaque type there). EngineArgs.add_cli_args then passes
``**X_kwargs["field"]`` to ``add_argument`` and may edit ``choices`` first (``.remove(NAME)``) or pass explicit
``choices=``.

This script reads that from each version's unpacked source with ``ast`` (nothing of vLLM is imported or run) and
writes, per version, ``{dest: [choices...]}`` with JSON null standing for the appended None object (0.33.0) and the
string "None" for the appended string; a dest whose choices cannot be worked out statically (a name that does not
resolve to a Literal, an edited list it cannot evaluate, an enum member that is not a constant) is left out, so
hoststate keeps it as before. Only dests of the recorded parser (fixtures/vllm/oracle/options/<version>.json) with a
single value-taking action are kept, and the recorded action's type must agree (``_optional_type`` exactly where
None was appended). The sources: ``python scripts/vllm_sources.py /tmp/vllm-src``.

    python scripts/vllm_choices.py --src /tmp/vllm-src            # rewrite the file from /tmp/vllm-src/vllm-<version>/
    python scripts/vllm_choices.py --src /tmp/vllm-src --check    # exit 1 when the file is stale
"""

from __future__ import annotations

import ast
import contextlib
import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RECORDED = REPO / "fixtures" / "vllm" / "oracle" / "options"
sys.path.insert(0, str(REPO / "scripts"))  # the shared datafile module beside this script
from datafile import source_dir, write_or_check  # noqa: E402

OUT = REPO / "hoststate" / "data" / "vllm_choices.json"


class Unknown(Exception):
    """A piece of a type or a choices list that cannot be evaluated from the source alone."""


class Source:
    """One version's unpacked tree: modules parsed on demand, names resolved through imports."""

    def __init__(self, root: Path, version: str) -> None:
        self.root, self.version, self.modules = root, version, {}

    def module(self, dotted: str) -> ast.Module | None:
        if dotted not in self.modules:
            base = self.root / Path(*dotted.split("."))
            path = base.with_suffix(".py") if base.with_suffix(".py").exists() else base / "__init__.py"
            self.modules[dotted] = ast.parse(path.read_text()) if path.exists() else None
        return self.modules[dotted]

    def resolve(self, mod: str, name: str, depth: int = 0) -> tuple[str, ast.AST]:
        """The statement that defines ``name`` as seen from module ``mod``."""
        tree = self.module(mod)
        if tree is None or depth > 12:
            raise Unknown(f"{mod}.{name}")
        for node in reversed(_runtime_statements(tree.body)):  # the last binding at import time wins
            if isinstance(node, ast.ClassDef) and node.name == name:
                return mod, node
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
                return mod, node
            if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
                return mod, node
            if getattr(ast, "TypeAlias", None) and isinstance(node, ast.TypeAlias) \
                    and node.name.id == name:
                return mod, node
        for node in _runtime_statements(tree.body):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if (alias.asname or alias.name) == name:
                        target = node.module or ""
                        if node.level:
                            parts = mod.split(".")
                            is_pkg = (self.root / Path(*parts) / "__init__.py").exists()
                            base = parts if is_pkg else parts[:-1]
                            base = base[:len(base) - (node.level - 1)]
                            target = ".".join(base + ([target] if target else []))
                        return self.resolve(target, alias.name, depth + 1)
        raise Unknown(f"{mod}.{name}")


def _runtime_statements(body: list[ast.stmt]) -> list[ast.stmt]:
    """A module's top-level statements as they run: ``if TYPE_CHECKING:`` contributes its ``else`` only (vLLM
    binds e.g. ``QuantizationMethods = Any`` there, so a field annotated with it has no Literal at run time)."""
    out: list[ast.stmt] = []
    for node in body:
        if isinstance(node, ast.If):
            if ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
                out += _runtime_statements(node.orelse)
            else:
                out += _runtime_statements(node.body) + _runtime_statements(node.orelse)
        elif isinstance(node, ast.Try):
            out += _runtime_statements(node.body)
        else:
            out.append(node)
    return out


BUILTINS = {"str": "str", "int": "int", "float": "float", "bool": "bool", "dict": "dict", "list": "list",
            "tuple": "tuple", "set": "set", "bytes": "other", "Any": "other", "Callable": "other"}


def _hints(src: Source, mod: str, node: ast.AST, split_pep604: bool) -> list[Any]:
    """vLLM's get_type_hints of an annotation: a list of "str", "None", "bool", ..., ("lit", values),
    ("list", inner hints), "dataclass", "other"."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _hints(src, mod, ast.parse(node.value, mode="eval").body, split_pep604)
    if isinstance(node, ast.Constant) and node.value is None:
        return ["None"]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
        if not split_pep604:
            return ["other"]  # types.UnionType: 0.10.2's get_type_hints does not split it
        return _hints(src, mod, node.left, True) + _hints(src, mod, node.right, True)
    if isinstance(node, ast.Subscript):
        head = node.value.attr if isinstance(node.value, ast.Attribute) else getattr(node.value, "id", None)
        args = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if head == "Literal":
            values: list[Any] = []
            for arg in args:
                if isinstance(arg, ast.Constant):
                    values.append(arg.value)
                else:  # a nested Literal alias flattens
                    inner = _hints(src, mod, arg, split_pep604)
                    if len(inner) != 1 or not isinstance(inner[0], tuple) or inner[0][0] != "lit":
                        raise Unknown(ast.unparse(arg))
                    values += inner[0][1]
            return [("lit", tuple(values))]
        if head == "Optional":
            return _hints(src, mod, args[0], split_pep604) + ["None"]
        if head == "Union":
            return [h for arg in args for h in _hints(src, mod, arg, split_pep604)]
        if head in ("Annotated", "SkipValidation"):  # pydantic's SkipValidation[X] is Annotated[X, ...]
            return _hints(src, mod, args[0], split_pep604)
        if head in ("list", "List"):
            return [("list", tuple(_hints(src, mod, args[0], split_pep604)))]
        if head in ("dict", "Dict", "Mapping"):
            return ["dict"]
        if head in ("tuple", "Tuple", "set", "Set"):
            return [BUILTINS.get(head.lower(), "other")]
        if head == "ClassVar" or head == "InitVar":
            raise Unknown("not a field")
        return ["other"]
    if isinstance(node, ast.Attribute):
        return ["other"]  # torch.dtype, enum members' classes, ...
    if isinstance(node, ast.Name):
        if node.id in BUILTINS:
            return [BUILTINS[node.id]]
        if node.id == "None":
            return ["None"]
        try:
            where, stmt = src.resolve(mod, node.id)
        except Unknown:
            return ["other"] if node.id[:1].isupper() and node.id not in ("TypeAlias",) else ["other"]
        if isinstance(stmt, ast.ClassDef):
            decorators = {ast.unparse(d).split("(")[0] for d in stmt.decorator_list}
            if decorators & {"config", "dataclass", "pydantic.dataclasses.dataclass", "dataclasses.dataclass"}:
                return ["dataclass"]
            return ["other"]
        value = stmt.value
        if value is None:
            raise Unknown(node.id)
        return _hints(src, where, value, split_pep604)
    raise Unknown(ast.unparse(node))


def _field_choices(hints: list[Any], none_object: bool) -> list[Any] | None:
    """_compute_kwargs's branches in order; the choices, or None where the field gets none."""
    simple = [h for h in hints if isinstance(h, str)]
    if "dataclass" in simple or "bool" in simple:
        return None
    literal = next((h for h in hints if isinstance(h, tuple) and h[0] == "lit"), None)
    if literal is not None:
        if "str" in simple:
            return None  # metavar, not choices
        choices = sorted(literal[1])
    else:
        if any(isinstance(h, tuple) and h[0] != "list" for h in hints) or "tuple" in simple:
            return None
        items = next((h for h in hints if isinstance(h, tuple) and h[0] == "list"), None)
        if items is None or len(items[1]) != 1 or not isinstance(items[1][0], tuple) or items[1][0][0] != "lit":
            return None
        choices = sorted(items[1][0][1])
    if "None" in simple:
        choices.append(None if none_object else "None")
    return choices


def _class_fields(src: Source, mod: str, name: str, split_pep604: bool, none_object: bool) -> dict[str, Any]:
    where, cls = src.resolve(mod, name)
    if not isinstance(cls, ast.ClassDef):
        raise Unknown(name)
    out: dict[str, Any] = {}
    for base in cls.bases:  # fields of a config base class come first
        if isinstance(base, ast.Name) and base.id not in ("object", "Generic"):
            with contextlib.suppress(Unknown):
                out.update(_class_fields(src, where, base.id, split_pep604, none_object))
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            try:
                out[stmt.target.id] = _field_choices(_hints(src, where, stmt.annotation, split_pep604), none_object)
            except Unknown as err:
                out[stmt.target.id] = Unknown(str(err)) if "not a field" not in str(err) else None
    return out


def _explicit(src: Source, mod: str, node: ast.AST) -> list[Any]:
    """An explicit ``choices=`` value: a literal list, get_args(Literal alias), [f.value for f in Enum]."""
    try:
        value = ast.literal_eval(node)
        if isinstance(value, (list, tuple)):
            return list(value)
    except ValueError:
        pass
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "get_args" and len(node.args) == 1:
        hints = _hints(src, mod, node.args[0], True)
        if len(hints) == 1 and isinstance(hints[0], tuple) and hints[0][0] == "lit":
            return list(hints[0][1])
    if isinstance(node, ast.ListComp) and len(node.generators) == 1 and isinstance(node.elt, ast.Attribute) \
            and node.elt.attr == "value" and isinstance(node.generators[0].iter, ast.Name):
        where, cls = src.resolve(mod, node.generators[0].iter.id)
        values = []
        for stmt in getattr(cls, "body", []):
            if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant):
                values.append(stmt.value.value)
            elif isinstance(stmt, ast.Assign):
                raise Unknown(ast.unparse(stmt))
        if values:
            return values
    raise Unknown(ast.unparse(node))


def _kwargs_ref(node: ast.AST) -> tuple[str, str] | None:
    """``X_kwargs["field"]`` -> (X_kwargs, field)."""
    if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Name) and isinstance(node.slice, ast.Constant):
        return node.value.id, node.slice.value
    return None


def version_choices(root: Path, version: str) -> dict[str, list[Any]]:
    """{dest: choices} of EngineArgs.add_cli_args of one version's source tree."""
    src = Source(root, version)
    split_pep604 = version != "0.10.2"
    none_object = tuple(int(p) for p in version.split(".")[:2]) >= (0, 13)
    mod = "vllm.engine.arg_utils"
    tree = src.module(mod)
    assert tree is not None
    engine = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "EngineArgs")
    func = next(n for n in engine.body if isinstance(n, ast.FunctionDef) and n.name == "add_cli_args")
    tables: dict[str, dict[str, Any]] = {}
    out: dict[str, Any] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name) \
                and isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) == "get_kwargs":
            cls = node.value.args[0]
            if isinstance(cls, ast.Name):
                try:
                    tables[node.targets[0].id] = _class_fields(src, mod, cls.id, split_pep604, none_object)
                except Unknown:
                    tables[node.targets[0].id] = {}
    edited: set[tuple[str, str]] = set()
    for node in ast.walk(func):  # X_kwargs["f"]["choices"] edited in place: .remove(NAME) is read, else unknown
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value == "choices":
            ref = _kwargs_ref(node.value)
            if ref:
                edited.add(ref)
    removed: dict[tuple[str, str], list[Any]] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "remove" \
                and isinstance(node.func.value, ast.Subscript):
            ref = _kwargs_ref(node.func.value.value)
            if ref and len(node.args) == 1:
                try:
                    _, stmt = src.resolve(mod, node.args[0].id) if isinstance(node.args[0], ast.Name) else (0, None)
                    value = ast.literal_eval(stmt.value) if stmt is not None else ast.literal_eval(node.args[0])
                    removed.setdefault(ref, []).append(value)
                except (Unknown, ValueError, AttributeError):
                    pass
    for node in ast.walk(func):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument" and node.args and isinstance(node.args[0], ast.Constant)):
            continue
        options = [a.value for a in node.args if isinstance(a, ast.Constant)]
        long = next((o for o in options if o.startswith("--")), None)
        keywords = {k.arg: k.value for k in node.keywords}
        dest = keywords["dest"].value if "dest" in keywords and isinstance(keywords["dest"], ast.Constant) \
            else (long[2:].replace("-", "_") if long else None)
        if dest is None:
            continue
        spread = next((_kwargs_ref(k.value) for k in node.keywords if k.arg is None), None)
        try:
            if "choices" in keywords:
                choices = _explicit(src, mod, keywords["choices"])
            elif spread is not None and spread[0] in tables:
                choices = tables[spread[0]].get(spread[1])
                if isinstance(choices, Unknown):
                    raise choices
                if choices is not None and spread in edited:
                    if spread not in removed:
                        raise Unknown(f"{spread} choices edited")
                    choices = [c for c in choices if c not in removed[spread]]
            else:
                continue
        except Unknown:
            out[dest] = Unknown(dest)
            continue
        if choices is not None:
            out[dest] = list(choices)
    return {dest: choices for dest, choices in out.items() if not isinstance(choices, Unknown)}


def _agrees(dest: str, choices: list[Any], recorded: dict[str, Any]) -> bool:
    info = recorded["dests"].get(dest)
    if info is None or len(info["actions"]) != 1 or not info["takes_value"]:
        return False
    optional = info["actions"][0]["type"] == "_optional_type"
    return optional == (choices[-1] in (None, "None"))


def derive(src_root: Path, recorded: Path = RECORDED) -> dict[str, Any]:
    versions: dict[str, Any] = {}
    for path in sorted(recorded.glob("*.json")):
        data = json.loads(path.read_text())
        version = data["vllm_version"]
        found = version_choices(src_root / f"vllm-{version}", version)
        versions[version] = {dest: choices for dest, choices in sorted(found.items())
                             if _agrees(dest, choices, data)}
    return {
        "about": "Each recorded vLLM version's argparse choices of `vllm serve` by dest, derived by "
                 "scripts/vllm_choices.py from the version's source (vllm/engine/arg_utils.py _compute_kwargs / "
                 "literal_to_kwargs on the config dataclasses' Literal types, and explicit choices); null is the "
                 "None object 0.33 appends for an optional Literal, \"None\" the string earlier versions append "
                 "(which optional_type's None never equals).",
        "versions": versions,
    }


def render(table: dict[str, Any]) -> str:
    versions = table["versions"]
    lines = ['{', f' "about": {json.dumps(table["about"])},', ' "versions": {']
    for vi, version in enumerate(versions):
        lines.append(f'  "{version}": {{')
        rows = list(versions[version].items())
        for ri, (dest, choices) in enumerate(rows):
            lines.append(f'   "{dest}": {json.dumps(choices)}' + ("," if ri < len(rows) - 1 else ""))
        lines.append("  }" + ("," if vi < len(versions) - 1 else ""))
    lines += [" }", "}"]
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> int:
    return write_or_check(OUT, render(derive(source_dir(argv))), argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
