"""The capture and verdict sides meet only at the snapshot file (docs/architecture.md): import edges, checked on
the source (every import, at module level or inside a function) and in a fresh process (what loads)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from tests.conftest import PACKAGE, PYTHONPATH, REPO, require

VERDICT = ("policy", "positions", "diff", "digest")
CAPTURE = ("hoststate.capture", "hoststate.collectors")


def imported(module: str) -> set[str]:
    """Every hoststate module ``module`` imports anywhere in its source."""
    tree = ast.parse((PACKAGE / f"{module}.py").read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hoststate"):
            out.add(node.module)
            out.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("hoststate"))
    return out


def test_the_snapshot_module_is_the_file_format_only() -> None:
    edges = imported("snapshot")
    for other in ("policy", "diff", "digest", "capture", "positions", "guard", "report", "redact"):
        assert not any(e == f"hoststate.{other}" or e.startswith(f"hoststate.{other}.") for e in edges), other
    for name in ("collect", "assemble", "digest"):
        assert not hasattr(__import__("hoststate.snapshot", fromlist=["x"]), name), name


@pytest.mark.parametrize("module", VERDICT)
def test_the_verdict_side_never_imports_the_capture_side(module: str) -> None:
    edges = imported(module)
    assert not any(e.startswith(CAPTURE) for e in edges), sorted(edges)


def test_one_place_builds_the_collector_context() -> None:
    """Only hoststate.collectors.plan constructs a Context (the collectors' own tests and replays aside):
    hoststate.capture's context and the GPU child's section both plan through it."""
    builders = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Context":
                builders.append(str(path.relative_to(PACKAGE)))
    assert builders == ["collectors/__init__.py"], builders


def test_loading_the_verdict_side_loads_no_collector() -> None:
    code = ("import sys, hoststate.diff, hoststate.digest\n"
            "print(sorted(m for m in sys.modules if m.startswith(('hoststate.collectors', 'hoststate.capture'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": PYTHONPATH, "PATH": "/usr/bin:/bin"}, check=True).stdout
    assert out.strip() == "[]", out


def _module_graph() -> dict[str, set[str]]:
    """hoststate's import graph, module to module, with every import counted (function-level ones too)."""
    names = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base]).strip(".")
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    edges.add(full if full in names else base)
            elif isinstance(node, ast.Import):
                edges.update(a.name for a in node.names)
        graph[name] = {e for e in edges if e in names and e != name}
    return graph


def test_the_import_graph_has_no_cycle() -> None:
    """Layers import downwards only: a cycle (function-level imports included) is a layering defect."""
    graph, state, cycles = _module_graph(), {}, []

    def visit(node: str, stack: list[str]) -> None:
        state[node] = "open"
        for nxt in sorted(graph[node]):
            if state.get(nxt) == "open":
                cycles.append(stack[stack.index(nxt):] + [nxt] if nxt in stack else [node, nxt])
            elif nxt not in state:
                visit(nxt, stack + [nxt])
        state[node] = "done"

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert not cycles, cycles


def test_ci_tests_the_installed_package() -> None:
    """.ci/run installs the wheel and runs the tests from a copy without hoststate/ (HOSTSTATE_TEST_INSTALLED=1):
    there the package under test must be the installed one, with its data files."""
    require(os.environ.get("HOSTSTATE_TEST_INSTALLED") == "1",
            "the checkout's own package is under test (HOSTSTATE_TEST_INSTALLED unset)")
    assert "site-packages" in PACKAGE.parts, PACKAGE
    for data in ("default_policy.toml", "run/judge_rules.toml", "data/vllm_defaults.json"):
        assert (PACKAGE / data).is_file(), data


def test_every_package_is_shipped_in_the_wheel() -> None:
    """pyproject lists the packages (discovery would walk the fixture trees' symlink cycles): a package folder left
    off the list would import from the checkout in CI and be missing from what users install."""
    from hoststate.snapshot import toml_loads

    setup = toml_loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    listed = set(setup["packages"])
    folders = {".".join(p.parent.relative_to(PACKAGE.parent).parts) for p in PACKAGE.rglob("__init__.py")}
    data = listed - folders  # folders of data alone (hoststate/data), listed so that setuptools installs them
    assert folders <= listed, sorted(folders - listed)
    for name in data:
        folder = PACKAGE.parent.joinpath(*name.split("."))
        assert folder.is_dir() and not list(folder.glob("*.py")) and setup["package-data"].get(name), name
