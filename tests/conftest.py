"""Shared test helpers: fixture locations and the skip-locally / fail-in-CI rule for real components."""

from __future__ import annotations

import os
import pathlib
import shutil
import tempfile

import pytest
from hypothesis import settings

import hoststate

REPO = pathlib.Path(__file__).resolve().parent.parent
#: The package under test: the checkout's, or (CI, .ci/run) the installed wheel's, run from a copy of the tests
#: that holds no hoststate/ folder, so a module or data file missing from the wheel fails here.
PACKAGE = pathlib.Path(hoststate.__file__).resolve().parent
FIXTURES = REPO / "fixtures"
HOSTS = FIXTURES / "hosts"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# Under CI hypothesis is derandomised (the same examples every run, no example database): a test command on a clean
# clone passes or fails the same way each time. An example hypothesis finds elsewhere is kept as an explicit case.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
if IN_CI:
    settings.load_profile("ci")


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


@pytest.fixture
def shared_dir():
    """A directory every user can search (pytest's tmp_path is root-only): for servers started as another user."""
    path = pathlib.Path(tempfile.mkdtemp(prefix="hoststate-shared-", dir="/tmp"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
