"""``hoststate ARGS`` run in the test process: the real entry point (``hoststate.cli.main``, with its one-line
errors and documented exit codes), stdin, stdout, stderr and the environment isolated by click's CliRunner.

For tests that check what a command prints, writes and exits with, not the process itself: an interpreter start per
call is most of what a subprocess costs. Signals, a terminal, a child process, start-up and PYTHONPATH stay with
subprocesses.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping

from click.testing import CliRunner

from hoststate.cli import main


def hoststate(args: list[str], env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``hoststate *args`` with exactly ``env`` as its environment (the test's own when None); the result has
    a subprocess's fields, so a test reads it the same way."""
    overrides: dict[str, str | None] = {}
    if env is not None:
        overrides = {k: None for k in os.environ if k not in env}
        overrides.update(env)
    runner = CliRunner()
    with runner.isolation(env=overrides) as (out, err, _mixed):
        try:
            main(list(args))
            rc = 0
        except SystemExit as exc:
            rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        sys.stdout.flush()
        sys.stderr.flush()
        stdout = out.getvalue().decode(runner.charset, "replace")
        stderr = err.getvalue().decode(runner.charset, "backslashreplace")
    return subprocess.CompletedProcess(["hoststate", *args], rc, stdout, stderr)
