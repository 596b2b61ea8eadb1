"""hoststate/data/vllm_env_names.json from the vllm/envs.py of released vLLM wheels.

    python scripts/vllm_envs.py vllm-0.10.2-*.whl vllm-0.11.0-*.whl ... (> the file)

For each version: every name in ``environment_variables``, and for each the string it reads as when unset, where
that is certain from the code alone: the variable's entry reads exactly one variable, itself, with ``os.getenv``,
``os.environ.get`` or ``env_with_choices`` and a constant default; nothing else in envs.py reads it (another entry
reading it as a fallback, an ``is_set`` test); and no other file of the wheel names it (a direct ``os.environ``
read or a write could tell a set default from an unset one). Otherwise the default is null. A server given exactly
that string runs as without the variable (hoststate/collectors/vllm/envs.py). The wheels are read as zip files;
nothing of vLLM is imported.
"""

from __future__ import annotations

import ast
import json
import operator
import re
import sys
import zipfile
from collections import Counter
from typing import Any

#: A quoted name as another file of the wheel would spell a variable it reads, tests or writes itself.
QUOTED = re.compile(r"[\"']([A-Z][A-Z0-9_]*)[\"']")
READERS = {"getenv", "get", "is_set", "env_with_choices", "env_list_with_choices", "env_set_with_choices"}
_OPS = {ast.Mult: operator.mul, ast.Add: operator.add, ast.Sub: operator.sub, ast.Pow: operator.pow}


def _constant(node: ast.AST) -> Any:
    """A constant the default is spelled as: a literal, str() of one, or arithmetic on integers; else None."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str | int):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _constant(node.left), _constant(node.right)
        if isinstance(left, int) and isinstance(right, int):
            return _OPS[type(node.op)](left, right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "str" and len(node.args) == 1:
        inner = _constant(node.args[0])
        return str(inner) if isinstance(inner, str | int) else None
    return None


def _reads(node: ast.AST) -> list[tuple[Any, Any]]:
    """(name, default) of every environment read under ``node``: calls of the readers, ``os.environ[...]``, and
    ``... in os.environ``."""
    found = []
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            func = sub.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if name in READERS and sub.args:
                first = sub.args[0]
                if name == "get" and not (isinstance(func, ast.Attribute) and ast.unparse(func.value) == "os.environ"):
                    continue
                default = _constant(sub.args[1]) if len(sub.args) > 1 else None
                found.append((_constant(first), default))
        elif isinstance(sub, ast.Subscript) and ast.unparse(sub.value) == "os.environ":
            found.append((_constant(sub.slice), None))
        elif isinstance(sub, ast.Compare) and any(ast.unparse(c) == "os.environ" for c in sub.comparators):
            found.append((_constant(sub.left), None))
    return found


def _table(source: str) -> dict[str, ast.AST]:
    for node in ast.walk(ast.parse(source)):
        target = node.target if isinstance(node, ast.AnnAssign) else (
            node.targets[0] if isinstance(node, ast.Assign) else None)
        if isinstance(target, ast.Name) and target.id == "environment_variables" and isinstance(node.value, ast.Dict):
            return {k.value: v for k, v in zip(node.value.keys, node.value.values, strict=True)
                    if isinstance(k, ast.Constant)}
    raise SystemExit("no environment_variables table")


def read_wheel(path: str) -> tuple[str, dict[str, str | None]]:
    """The wheel's version and its names with the string each reads as when unset (or None)."""
    version = re.match(r"vllm-([^-]+)-", path.rsplit("/", 1)[-1])
    if version is None:
        raise SystemExit(f"{path}: not a vllm wheel name")
    with zipfile.ZipFile(path) as wheel:
        envs = wheel.read("vllm/envs.py").decode()
        named = {m for n in wheel.namelist() if n.startswith("vllm/") and n.endswith(".py") and n != "vllm/envs.py"
                 for m in QUOTED.findall(wheel.read(n).decode(errors="replace"))}
    read = Counter(name for name, _default in _reads(ast.parse(envs)))
    names: dict[str, str | None] = {}
    for name, value in _table(envs).items():
        reads = _reads(value)
        default = reads[0][1] if len(reads) == 1 and reads[0][0] == name else None
        # its own read and no other: another entry may read it as a fallback, a function may test is_set
        if not isinstance(default, str) or name in named or read[name] != 1:
            default = None
        names[name] = default
    return version.group(1), dict(sorted(names.items()))


def form(name: str, node: ast.AST) -> str | None:
    """How an entry turns its value into a switch, with the read written ``v``: ``bool(int(v))``,
    ``v.lower() in ('1', 'true')``, ``v.strip().lower() in ('1', 'true')``, ``v == '1'``; None for any other entry
    (a number, a name, a path: compared as given)."""
    body = node.body if isinstance(node, ast.Lambda) else node
    reads = _reads(body)
    if len(reads) != 1 or reads[0][0] != name:
        return None
    text = ast.unparse(body)
    for sub in ast.walk(body):
        if isinstance(sub, ast.Call) and _reads(sub) == reads and not any(
                isinstance(c, ast.Call) and _reads(c) == reads for c in ast.iter_child_nodes(sub)
                if c is not sub.func) and not (isinstance(sub.func, ast.Attribute) and _reads(sub.func.value)):
            text = text.replace(ast.unparse(sub), "v", 1)
            break
    return text if FORMS.fullmatch(text) else None


#: The forms recorded: what hoststate/collectors/vllm_release.py knows how to read.
FORMS = re.compile(r"bool\(int\(v\)\)"
                   r"|v(?:\.strip\(\))?(?:\.lower\(\))? (?:in \((?:'[a-z0-9]*'(?:, )?)+\)|[=!]= '[a-z0-9]*')")


def read_forms(path: str) -> tuple[str, dict[str, str]]:
    """The forms of a wheel's (or an unpacked source tree's, ``vllm-VERSION/``) vllm/envs.py entries."""
    name = path.rstrip("/").rsplit("/", 1)[-1]
    version = re.match(r"vllm-(\d[^-]*?)(?:-|$)", name)
    if version is None:
        raise SystemExit(f"{path}: not a vllm wheel or vllm-VERSION directory")
    if path.endswith(".whl"):
        with zipfile.ZipFile(path) as wheel:
            envs = wheel.read("vllm/envs.py").decode()
    else:
        with open(f"{path}/vllm/envs.py", encoding="utf-8") as f:
            envs = f.read()
    found = {n: form(n, v) for n, v in _table(envs).items()}
    return version.group(1), {n: f for n, f in sorted(found.items()) if f is not None}


def main(paths: list[str]) -> None:
    forms = paths[:1] == ["--forms"]
    table = dict((read_forms if forms else read_wheel)(p) for p in paths[forms:])
    key = lambda v: tuple(int(x) for x in re.findall(r"\d+", v)[:3])  # noqa: E731
    json.dump({v: table[v] for v in sorted(table, key=key)}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main(sys.argv[1:])
