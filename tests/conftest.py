"""Shared test helpers: fixture locations and the skip-locally / fail-in-CI rule for real components."""

from __future__ import annotations

import os
import pathlib
import shlex
import shutil
import subprocess
import sys
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


#: Set to 1 to run xdist workers without their own PID namespace (to see the race it prevents).
NO_PIDNS = os.environ.get("HOSTSTATE_TEST_NO_PIDNS") == "1"
NSINIT = pathlib.Path(__file__).resolve().with_name("nsinit.py")
UNSHARE = ["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "--"]
#: In the controller's config: None when the workers get their own PID namespace, else why not.
_PIDNS = pytest.StashKey["str | None"]()


def _pidns_unavailable() -> str | None:
    """Why xdist workers cannot each get a PID namespace here, or None when they can."""
    if NO_PIDNS:
        return "HOSTSTATE_TEST_NO_PIDNS=1"
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("unshare") is None:
        return "no unshare (util-linux)"
    try:
        probe = subprocess.run([*UNSHARE, "true"], capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{shlex.join(UNSHARE)} true: {e}"
    if probe.returncode != 0:
        return f"{shlex.join(UNSHARE)} true: exit {probe.returncode}: {probe.stderr.strip()}"
    return None


def pytest_configure(config: pytest.Config) -> None:
    """Start each xdist worker in its own PID namespace with its own /proc (tests/nsinit.py as its PID 1).

    Tests snap the live host, and others start and end stand-in vLLM servers and daemons: with one namespace for all
    workers, a worker's snapshot would see (and race with) another worker's processes. xdist has turned ``-n N``
    into N ``popen`` specs by now and starts the workers at session start; execnet runs a spec's ``python=`` command
    with the worker's arguments. Without root or unshare only one worker runs, said in the header: slower, never
    racing (HOSTSTATE_TEST_NO_PIDNS=1 runs them all in one namespace, to show the race)."""
    tx = getattr(config.option, "tx", None)
    if hasattr(config, "workerinput") or not tx or config.getoption("dist", "no") == "no":
        return
    why = _pidns_unavailable()
    config.stash[_PIDNS] = why
    specs = _expanded(tx)
    if why is None:
        python = shlex.join([*UNSHARE, sys.executable, "-I", "-S", str(NSINIT)])
        config.option.tx = [f"{spec}//python={python}" if _local(spec) else spec for spec in specs]
    elif not NO_PIDNS:
        config.option.tx = specs[:1]


def _expanded(tx: list[str]) -> list[str]:
    """xdist's ``N*spec`` written out as N specs, one per worker (``--tx 2*popen``)."""
    out: list[str] = []
    for spec in tx:
        count, star, rest = spec.partition("*")
        out.extend([rest] * int(count) if star and count.isdigit() else [spec])
    return out


def _local(spec: str) -> bool:
    """A worker this host starts with its own interpreter (``popen``, with options but no ``python=``)."""
    kind, *options = spec.split("//")
    return kind == "popen" and not any(o.startswith("python=") for o in options)


def pytest_report_header(config: pytest.Config) -> str | None:
    if _PIDNS not in config.stash:
        return None
    why = config.stash[_PIDNS]
    if why is None:
        return "xdist workers: each in its own PID namespace (tests/nsinit.py)"
    if NO_PIDNS:
        return f"xdist workers: one PID namespace for all, a live snapshot sees the others' processes ({why})"
    return f"xdist: one worker, as workers cannot have a PID namespace each here ({why})"


#: PYTHONPATH for a child ``python -m hoststate``: this checkout first, then what the test run already has (a
#: machine may carry the dependencies on PYTHONPATH instead of installing them).
PYTHONPATH = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))


#: The vLLM versions' unpacked sources (scripts/vllm_sources.py DIR; .ci/run fetches them) the data tables come from.
VLLM_SRC = pathlib.Path(os.environ.get("HOSTSTATE_VLLM_SRC", "/tmp/vllm-src"))


def data_script(name: str):
    """scripts/<name>.py as a module, every table it reads or writes in hoststate/data (its ``OUT``, its
    ``CHOICES``) pointed at the package under test's copy: the checkout's, or the installed one's, where CI runs
    the suite without the checkout's hoststate/."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for attr in ("OUT", "CHOICES"):
        if isinstance(getattr(module, attr, None), pathlib.Path):
            setattr(module, attr, PACKAGE / "data" / getattr(module, attr).name)
    return module


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
