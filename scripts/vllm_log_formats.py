"""Record the server-log message formats of one vLLM source tree as test data.

Every .py file under ``--vllm DIR`` (an installed ``site-packages/vllm``; nothing is imported, so no
venv of that version is needed) is parsed with ``ast``. Every logging call whose message is a string
constant, a concatenation of constants (implicit, ``+``, ``"..." % args``, ``"...".format(...)``) or
an f-string is a format; the ones whose wording holds one of KEYWORDS are kept. Each is recorded as
file (relative to the package's parent, ``vllm/...``), basename, line, level, the call, and the
format: ``style`` ``%`` (vLLM's logger renders it with the call's arguments, recorded as ``args``) or
``{}`` (an f-string or ``.format``: a ``str.format`` template whose fields, ``{}`` or with the
source's conversion and spec such as ``{:.2f}``, are the expressions in ``exprs``; literal braces doubled).

Messages held in a variable or built by a helper are not formats of this kind; ``unresolved`` counts
the logging calls whose message is not a constant expression, per file, so a fact that moved into
one is visible as a count rather than silently absent.

The keyword list is wide on purpose: a fact vLLM words differently is still recorded, so
tests/test_vllm_log_formats.py fails on it instead of never seeing it.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT_DIR = ROOT / "fixtures" / "vllm" / "log-formats"

#: Logger methods and the level they log at (``*_once`` variants log once per process or scope).
METHODS: dict[str, str] = {
    "debug": "DEBUG", "info": "INFO", "warning": "WARNING", "warn": "WARNING", "error": "ERROR",
    "exception": "ERROR", "critical": "CRITICAL", "fatal": "CRITICAL",
    "debug_once": "DEBUG", "info_once": "INFO", "warning_once": "WARNING",
}
#: A format is kept when its wording holds one of these (case-insensitive).
KEYWORDS: tuple[str, ...] = (
    "kv cache", "gpu blocks", "num_gpu_blocks", "concurrency", "nccl", "graph captur", "cuda graph",
    "cudagraph", "moe", "all-reduce", "allreduce", "all_reduce", "backend", "non-default", "llm engine",
    "api server", "vllm server", "server version", "vllm version", "starting vllm", "configuration from",
)
#: Names a module's logger is bound to besides those assigned from init_logger/getLogger.
DEFAULT_LOGGERS = frozenset({"logger"})


def logger_names(tree: ast.Module) -> set[str]:
    """Names bound to a logger anywhere in the module: assigned from ``init_logger(...)`` or
    ``logging.getLogger(...)``, or a parameter annotated ``Logger`` (a helper logging for its caller)."""
    names = set(DEFAULT_LOGGERS)
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = ast.unparse(node.value.func)
            if func.endswith(("init_logger", "getLogger")):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif (isinstance(node, ast.arg) and node.annotation is not None
              and ast.unparse(node.annotation).endswith("Logger")):
            names.add(node.arg)
    return names


def _receiver_is_logger(func: ast.Attribute, names: set[str]) -> bool:
    value = func.value
    if isinstance(value, ast.Name):
        return value.id in names
    if isinstance(value, ast.Attribute):  # self.logger, cls._logger
        return value.attr in names or value.attr.endswith("logger")
    return False


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def _fstring(node: ast.JoinedStr) -> tuple[str, list[str]]:
    """An f-string as a str.format template (a ``{}`` field per expression, keeping a constant
    conversion and format spec: ``{!r}``, ``{:.2f}``), and each field's expression text."""
    parts: list[str] = []
    exprs: list[str] = []
    for value in node.values:
        if isinstance(value, ast.Constant):
            parts.append(_escape(str(value.value)))
        elif isinstance(value, ast.FormattedValue):
            conv = "!" + chr(value.conversion) if value.conversion != -1 else ""
            spec = value.format_spec
            const_spec = spec is not None and all(isinstance(v, ast.Constant) for v in spec.values)
            parts.append("{" + conv + (":" + "".join(str(v.value) for v in spec.values) if const_spec else "") + "}")
            exprs.append(ast.unparse(value.value))
    return "".join(parts), exprs


def template(node: ast.AST) -> tuple[str, str, list[str]] | None:
    """(style, template, expressions) of a constant message expression, or None when it is not one."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return "%", node.value, []
    if isinstance(node, ast.JoinedStr):
        text, exprs = _fstring(node)
        return "{}", text, exprs
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _concat(template(node.left), template(node.right))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):  # "..." % args: rendered like the logger's
        left = template(node.left)
        return left if left and left[0] == "%" else None
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
            and not node.keywords):
        left = template(node.func.value)
        if left and left[0] == "%":
            return "{}", left[1], [ast.unparse(a) for a in node.args]
    return None


def _concat(left: tuple[str, str, list[str]] | None,
            right: tuple[str, str, list[str]] | None) -> tuple[str, str, list[str]] | None:
    if left is None or right is None:
        return None
    if left[0] == right[0]:
        return left[0], left[1] + right[1], left[2] + right[2]
    as_fmt = [(t if s == "{}" else _escape(t), e) for s, t, e in (left, right)]  # "%"-text inside an f-string
    return "{}", as_fmt[0][0] + as_fmt[1][0], as_fmt[0][1] + as_fmt[1][1]


def _message_arg(call: ast.Call, method: str) -> tuple[ast.AST | None, list[ast.AST], str]:
    """(message node, its %-arguments, level) of a logger call; ``log(level, msg, ...)`` included."""
    args = list(call.args)
    if method == "log":
        if len(args) < 2:
            return None, [], ""
        level = ast.unparse(args[0]).rsplit(".", 1)[-1].upper()
        return args[1], args[2:], level
    if not args:
        return None, [], ""
    return args[0], args[1:], METHODS[method]


def _scopes(tree: ast.Module) -> list[tuple[ast.AST, list[ast.Call]]]:
    """Each function (and the module) with the calls directly inside it, not inside a nested function."""
    out: list[tuple[ast.AST, list[ast.Call]]] = []

    def visit(scope: ast.AST) -> None:
        calls: list[ast.Call] = []
        stack = list(ast.iter_child_nodes(scope))
        while stack:
            node = stack.pop()
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                visit(node)
                continue
            if isinstance(node, ast.Call):
                calls.append(node)
            stack.extend(ast.iter_child_nodes(node))
        out.append((scope, calls))

    visit(tree)
    return out


def variable_messages(scope: ast.AST, name: str, before: int) -> list[tuple[str, str, list[str]]]:
    """The messages a variable can hold at a logging call on line ``before``: each constant
    ``name = ...`` above it, alone and with each ``name += ...`` between it and the call."""
    bases: list[tuple[int, ast.AST]] = []
    appends: list[tuple[int, ast.AST]] = []
    for node in ast.walk(scope):
        if getattr(node, "lineno", before) >= before:
            continue
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            bases.append((node.lineno, node.value))
        elif (isinstance(node, ast.AugAssign) and isinstance(node.op, ast.Add)
              and isinstance(node.target, ast.Name) and node.target.id == name):
            appends.append((node.lineno, node.value))
    out: list[tuple[str, str, list[str]]] = []
    for line, value in bases:
        base = template(value)
        if base is None:
            continue
        out.append(base)
        later = [template(v) for at, v in appends if at > line]
        out.extend(joined for tail in later if (joined := _concat(base, tail)) is not None)
    return out


def _messages(scope: ast.AST, call: ast.Call, message: ast.AST) -> tuple[list[tuple[str, str, list[str]]], str]:
    found = template(message)
    if found is not None:
        return [found], ""
    if isinstance(message, ast.Name):
        return variable_messages(scope, message.id, call.lineno), message.id
    return [], ""


def formats_of(path: Path, rel: str) -> tuple[list[dict[str, Any]], int]:
    """(kept formats, count of logging calls whose message is not a constant expression) of one file."""
    try:
        tree = ast.parse(path.read_bytes(), filename=rel)
    except (SyntaxError, ValueError) as err:
        print(f"{rel}: not parsed ({err})", file=sys.stderr)
        return [], 0
    names = logger_names(tree)
    out: list[dict[str, Any]] = []
    unresolved = 0
    for scope, calls in _scopes(tree):
        for node in calls:
            if not isinstance(node.func, ast.Attribute):
                continue
            method = node.func.attr
            if (method not in METHODS and method != "log") or not _receiver_is_logger(node.func, names):
                continue
            message, rest, level = _message_arg(node, method)
            if message is None:
                continue
            found, variable = _messages(scope, node, message)
            unresolved += not found
            for style, text, exprs in found:
                if not any(k in text.lower() for k in KEYWORDS):
                    continue
                entry = {
                    "file": rel, "basename": rel.rsplit("/", 1)[-1], "line": node.lineno, "level": level,
                    "call": method, "style": style, "format": text,
                    "exprs" if style == "{}" else "args": exprs if style == "{}" else [ast.unparse(a) for a in rest],
                }
                if variable:
                    entry["variable"] = variable
                out.append(entry)
    return out, unresolved


def version_of(tree: Path) -> str:
    """The version string of ``_version.py`` (``__version__ = version = 'X'``), else ``version.py``'s."""
    for name in ("_version.py", "version.py"):
        path = tree / name
        if not path.is_file():
            continue
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
                    and any(isinstance(t, ast.Name) and t.id in ("__version__", "version") for t in node.targets)):
                return str(node.value.value)
    raise SystemExit(f"{tree}: no _version.py with __version__")


def record(tree: Path) -> dict[str, Any]:
    """Every kept format of a vLLM package directory, sorted by file and line."""
    formats: list[dict[str, Any]] = []
    unresolved: dict[str, int] = {}
    for path in sorted(tree.rglob("*.py")):
        rel = "vllm/" + path.relative_to(tree).as_posix()
        found, missed = formats_of(path, rel)
        formats.extend(found)
        if missed:
            unresolved[rel] = missed
    unique = {json.dumps(f, sort_keys=True): f for f in formats}  # a variable's variants can repeat
    formats = sorted(unique.values(), key=lambda f: (f["file"], f["line"], f["format"]))
    return {
        "vllm_version": version_of(tree),
        "keywords": list(KEYWORDS),
        "count": len(formats),
        "formats": formats,
        "unresolved": unresolved,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vllm", required=True, type=Path, help="a vLLM package directory (site-packages/vllm)")
    parser.add_argument("--out", type=Path, help="output file (default fixtures/vllm/log-formats/<version>.json)")
    args = parser.parse_args(argv)
    if not (args.vllm / "__init__.py").is_file():
        parser.error(f"{args.vllm}: not a package directory")
    data = record(args.vllm)
    out = args.out or OUT_DIR / f"{data['vllm_version']}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(out)
    print(f"{out}: {data['count']} formats of vLLM {data['vllm_version']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
