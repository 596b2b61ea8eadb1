"""Running vLLM servers, found and read with psutil: command line, environment, interpreter.

Parents only: forked workers repeat their parent's command line. Nothing here raises; what cannot be
read is recorded in the caller's ``unreadable`` map with its reason.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from hoststate.collectors.vllm.args import locate
from hoststate.io import reason_of


@dataclass
class Proc:
    """A running server process as psutil showed it."""

    pid: int
    argv: list[str]
    env: dict[str, str] | None = None
    env_error: str | None = None
    interpreter: str | None = None
    interpreter_env: dict[str, str] = field(default_factory=dict)


# --------------------------------------------------------------------------------------------
# Processes


def _psutil_reason(err: Exception) -> str:
    import psutil

    if isinstance(err, psutil.AccessDenied):
        return "EACCES"
    if isinstance(err, psutil.NoSuchProcess):
        return "ESRCH"
    if isinstance(err, OSError):
        return reason_of(err)
    return type(err).__name__


def _interpreter(proc: Any, argv: list[str], env: dict[str, str] | None) -> str | None:
    """The server's sys.executable: argv[0] when it is a python (a venv's bin/python keeps its venv;
    /proc/PID/exe would name the base interpreter), else /proc/PID/exe."""
    first = argv[0] if argv else ""
    if os.path.basename(first).startswith("python"):
        if os.path.isabs(first) and os.path.exists(first):
            return first
        if "/" in first:
            try:
                path = os.path.join(proc.cwd(), first)
                if os.path.exists(path):
                    return path
            except Exception:
                pass
        for d in ((env or {}).get("PATH") or "").split(os.pathsep):
            if d and os.path.exists(os.path.join(d, first)):
                return os.path.join(d, first)
    try:
        return proc.exe() or None
    except Exception:
        return None


def inspect(pid: int, unreadable: dict[str, str]) -> Proc | None:
    """One process's argv, environment and interpreter; None (reason recorded) when it cannot be read."""
    import psutil

    try:
        proc = psutil.Process(pid)
        argv = proc.cmdline()
    except Exception as err:
        unreadable[f"proc/{pid}/cmdline"] = _psutil_reason(err)
        return None
    return _describe_proc(proc, argv, unreadable)


def _describe_proc(proc: Any, argv: list[str], unreadable: dict[str, str]) -> Proc:
    found = Proc(pid=proc.pid, argv=list(argv))
    try:
        found.env = dict(proc.environ())
    except Exception as err:
        found.env_error = _psutil_reason(err)
        unreadable[f"proc/{proc.pid}/environ"] = found.env_error
    found.interpreter = _interpreter(proc, found.argv, found.env)
    env = found.env or {}
    found.interpreter_env = {k: env[k] for k in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV") if k in env}
    return found


def _no_vllm_in_proc() -> bool:
    """True when no command line under /proc mentions vllm: then psutil (about 20 ms of import and a
    full process walk) is not needed. False whenever /proc cannot answer, so psutil decides."""
    try:
        pids = [name for name in os.listdir("/proc") if name.isdigit()]
    except OSError:
        return False
    for pid in pids:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as fh:
                if b"vllm" in fh.read():
                    return False
        except OSError:
            continue  # exited, or not ours to read: psutil would skip it too
    return True


def discover(unreadable: dict[str, str]) -> list[Proc]:
    """Running vLLM servers (``vllm serve``, ``python -m vllm.entrypoints.openai.api_server``, the
    CLI module), parents only: forked workers repeat their parent's command line."""
    if _no_vllm_in_proc():
        return []
    import psutil

    matches: dict[int, tuple[Any, list[str], int]] = {}
    me = os.getpid()
    for proc in psutil.process_iter(["pid", "ppid", "cmdline"]):
        info = proc.info
        argv = info.get("cmdline") or []
        if info["pid"] == me or not argv:
            continue
        if locate(argv).program is not None:
            matches[info["pid"]] = (proc, argv, info.get("ppid") or 0)
    found = []
    for _pid, (proc, argv, ppid) in sorted(matches.items()):
        if ppid in matches and matches[ppid][1] == argv:
            continue
        found.append(_describe_proc(proc, argv, unreadable))
    return found
