"""The capture and verdict sides meet only at the snapshot file (docs/architecture.md): import edges, checked on
the source (every import, at module level or inside a function) and in a fresh process (what loads)."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.conftest import PYTHONPATH, REPO

PACKAGE = REPO / "hoststate"
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
    """Only hoststate.capture constructs a Context (the collectors' own tests and replays aside)."""
    builders = []
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Context":
                builders.append(str(path.relative_to(PACKAGE)))
    assert set(builders) == {"capture.py"}, builders


def test_loading_the_verdict_side_loads_no_collector() -> None:
    code = ("import sys, hoststate.diff, hoststate.digest\n"
            "print(sorted(m for m in sys.modules if m.startswith(('hoststate.collectors', 'hoststate.capture'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": PYTHONPATH, "PATH": "/usr/bin:/bin"}, check=True).stdout
    assert out.strip() in ("[]", "['hoststate.collectors']"), out
