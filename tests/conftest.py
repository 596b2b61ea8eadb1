"""Shared test helpers: fixture locations and the skip-locally / fail-in-CI rule for real components."""

from __future__ import annotations

import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = REPO / "fixtures"
HOSTS = FIXTURES / "hosts"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")


#: PYTHONPATH for a child ``python -m hoststate``: this checkout first, then what the test run already has (a
#: machine may carry the dependencies on PYTHONPATH instead of installing them).
PYTHONPATH = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))


def require(condition: bool, why: str) -> None:
    """Skip when a real component is missing on a developer's machine; fail in CI, where .ci/run
    installs it and a skip would hide a missing install step."""
    if condition:
        return
    if IN_CI:
        pytest.fail(f"CI=true but a required component is missing: {why}")
    pytest.skip(why)
