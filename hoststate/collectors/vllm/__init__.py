"""``[vllm]``: one vLLM server's arguments, environment, versions and CUDA graph mode.

Sources (design.md "vLLM source options"): ``--vllm-pid``, ``--vllm-cmd``, ``--vllm-log``,
``--vllm-url``, ``--vllm-version``; with none, running servers are discovered from /proc. The
arguments are read by hoststate.collectors.vllm.args (vLLM's own rules, by version), the log by
hoststate.collectors.vllm.log; secrets are removed by hoststate.redact before anything is stored.
Nothing here raises: what cannot be read is recorded (``unreadable``, ``*_error`` keys).
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from hoststate import procfiles
from hoststate.collectors import Context, Section
from hoststate.collectors import env as env_collector
from hoststate.collectors import packages as packages_collector
from hoststate.collectors.vllm.args import (
    Command,
    ConfigLoader,
    declare,
    locate,
    normalise,
    parse_config_text,
    rules_for,
    split_command,
)
from hoststate.collectors.vllm.discovery import Proc, discover, inspect
from hoststate.collectors.vllm.http import query_url
from hoststate.collectors.vllm.log import LogFacts, parse_log
from hoststate.io import decode, reason_of
from hoststate.redact import redact_argv, redact_command_line, redact_text, redact_url, redact_value

DEFAULT_PORT = 8000

__all__ = ["Proc", "build", "clean", "collect", "discover", "inspect", "query_url"]


# --------------------------------------------------------------------------------------------
# Assembling one server


def read_input_file(path: str, max_bytes: int = procfiles.MAX_FILE_BYTES) -> tuple[bytes | None, str | None]:
    """A file the user named (``--vllm-cmd``'s ``--config``): a regular file only, at most ``max_bytes``,
    read from the real filesystem (never under --root). A FIFO, device or directory is refused at once."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as err:
        return None, reason_of(err)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, "not a regular file"
        data = os.read(fd, max_bytes + 1) if st.st_size <= max_bytes else b"x" * (max_bytes + 1)
        if len(data) > max_bytes:
            return None, f"larger than {max_bytes} bytes"
        return data, None
    except OSError as err:
        return None, reason_of(err)
    finally:
        os.close(fd)


def _config_loader(proc: Proc | None, unreadable: dict[str, str]) -> ConfigLoader:
    """How ``--config FILE`` is read: a discovered or named process's file through its own view (its
    cwd, its root, its user's rights); the user's own ``--vllm-cmd`` file from here, regular files only."""

    def load(path: str) -> Mapping[str, Any]:
        if proc is not None:
            with procfiles.ProcView(proc.pid) as view:
                data, err = view.read(path)
            where = f"proc/{proc.pid} --config {redact_text(path)}"
        else:
            data, err = read_input_file(path)
            where = f"--config {redact_text(path)}"
        if data is None:
            if proc is not None and procfiles.gone(proc.pid):
                err = "ESRCH"  # it exited meanwhile
            unreadable[where] = err or "unreadable"
            raise ValueError(f"not read ({err})")
        return parse_config_text(decode(data), path)

    return load


def _packages(proc: Proc | None, unreadable: dict[str, str]) -> tuple[dict[str, str], str, str | None]:
    """(packages, where from, error): a process's own, read from its files; else this interpreter's."""
    if proc is not None:
        packages, where, err = packages_collector.of_process(proc.pid, proc.argv, proc.env)
        if err is not None:
            err = "ESRCH" if procfiles.gone(proc.pid) else err  # it exited meanwhile
            unreadable[f"proc/{proc.pid} packages"] = err
        return packages, where, err
    return packages_collector.installed(), f"current interpreter {sys.executable}", None


def build(
    ctx: Context,
    *,
    source: str,
    argv: list[str] | None,
    env: dict[str, str] | None,
    env_from: str | None,
    proc: Proc | None,
    log: LogFacts | None,
    url: dict[str, Any] | None,
    unreadable: dict[str, str] | None = None,
) -> tuple[dict[str, Any], bool]:
    """The ``[vllm]`` table of one server and whether anything in it failed to parse."""
    data: dict[str, Any] = {"source": source}
    problem = False
    if proc is not None:
        data["pid"] = proc.pid
    unreadable = {} if unreadable is None else unreadable
    packages, packages_from, packages_error = _packages(proc, unreadable)

    # Version: option, log, /version, server interpreter, current interpreter.
    version, version_from = None, None
    for value, origin in (
        (ctx.vllm_version, "option --vllm-version"),
        (log.version if log else None, "log"),
        (url.get("version") if url else None, "url /version"),
        (packages.get("vllm"), packages_from),
    ):
        if value:
            version, version_from = str(value), origin
            break
    if version:
        data["version"], data["version_from"] = version, version_from

    # Arguments: the command line (pid, cmd, discovered) first, else the log's non-default args.
    args: dict[str, Any] | None = None
    if argv is not None:
        data["argv"] = redact_argv(argv)
        command: Command = locate(argv)
        if command.program is None:
            data["args_error"] = "not a vLLM server command (no 'vllm serve' or vLLM server module)"
            problem = True
        else:
            data["program"] = command.program
            parsed = normalise(command.args, version, program=command.program,
                               config_loader=_config_loader(proc, unreadable))
            args = parsed.args
            if parsed.errors:  # messages may quote argument values
                data["args_error"] = redact_text("; ".join(parsed.errors))
                problem = True
            if parsed.notes:
                data["args_notes"] = [redact_text(note) for note in parsed.notes]
            env = {**(env or {}), **command.env} if source == "cmd" else env
    elif log and log.non_default_args is not None:
        args = {k: v for k, v in log.non_default_args.items() if k != "model_tag"}
        data["args_from"] = "log non-default args"
    if args is not None:
        data["args"] = redact_value(args)
        if isinstance(args.get("model"), str):
            data["model"] = redact_value(args["model"])
        port = args.get("port", DEFAULT_PORT)
        if isinstance(port, int):
            data["port"] = port
    elif log and isinstance(log.config.get("model"), str):
        data["model"] = redact_value(log.config["model"])
    if url and "port" not in data:
        try:
            port = urlsplit(ctx.vllm_url or "").port
            if port:
                data["port"] = port
        except ValueError:
            pass
    if url and "model" not in data and url.get("models"):
        data["model"] = url["models"][0].get("id")

    # CUDA graphs: declared from arguments + environment + version, observed from the log.
    cudagraph: dict[str, Any] = {}
    if args is not None:
        declared = declare(args, env or {}, version)
        cudagraph.update(declared=declared.mode, declared_because=declared.because,
                         rules_version=declared.rules_version)
        if declared.compilation_mode:
            cudagraph["compilation_mode"] = declared.compilation_mode
        if declared.problems:
            cudagraph["declared_problems"] = declared.problems
    elif version:
        cudagraph["rules_version"] = rules_for(version)[0].version
    if log is not None:
        observed, observed_from = log.observed
        if observed:
            cudagraph["observed"], cudagraph["observed_from"] = observed, observed_from
        if log.config_cudagraph_mode:
            cudagraph["config_line"] = log.config_cudagraph_mode
        if log.downgrades:
            cudagraph["downgrades"] = log.downgrades
        if log.captures:
            cudagraph["captures"] = log.captures
        if log.attention_backends:
            cudagraph["attention_backends"] = log.attention_backends
    if cudagraph.get("declared") and cudagraph.get("observed"):
        cudagraph["mismatch"] = cudagraph["declared"] != cudagraph["observed"]
        if cudagraph["mismatch"]:
            cudagraph["mismatch_note"] = (
                f"declared {cudagraph['declared']} but the log shows {cudagraph['observed']} "
                f"({cudagraph['observed_from']})"
            )
    if cudagraph:
        data["cudagraph"] = cudagraph

    if log is not None:
        logdata: dict[str, Any] = {"path": ctx.vllm_log or ""}
        if log.version:
            logdata["version"] = log.version
        if log.config:
            logdata["config"] = redact_value(log.config)
        if log.config_compilation_mode:
            logdata["compilation_mode"] = log.config_compilation_mode
        if log.non_default_args is not None:
            logdata["non_default_args"] = redact_value(log.non_default_args)
        if log.errors:
            logdata["errors"] = [redact_text(e) for e in log.errors]
        data["log"] = logdata
    if url is not None:
        data["url"] = url

    if env is not None:
        data["env"] = env_collector.select(env)
        if env_from:
            data["env_from"] = env_from
    elif proc is not None and proc.env_error:
        data["env_error"] = proc.env_error
    data["packages"] = packages
    data["packages_from"] = packages_from
    if packages_error:
        data["packages_error"] = packages_error
    if proc is not None and proc.decode_notes:
        data["decode_notes"] = proc.decode_notes
    return data, problem


# --------------------------------------------------------------------------------------------
# The collector


def clean(value: Any) -> Any:
    """A value tomli_w can write: no None anywhere, tuples as lists, keys as strings."""
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items() if v is not None}
    if isinstance(value, list | tuple):
        return [clean(v) for v in value if v is not None]
    if isinstance(value, float) and value != value:  # NaN has no TOML form tools agree on
        return "nan"
    return value


def collect(ctx: Context) -> Section:
    sec = Section()
    named = any(v is not None for v in (ctx.vllm_pid, ctx.vllm_cmd, ctx.vllm_log, ctx.vllm_url))

    log: LogFacts | None = None
    if ctx.vllm_log is not None:
        raw, err = read_input_file(ctx.vllm_log, 64 << 20)
        if raw is None:
            sec.unreadable[ctx.vllm_log] = err or "unreadable"
        else:
            log = parse_log(decode(raw))
    url = query_url(ctx.vllm_url) if ctx.vllm_url else None

    proc: Proc | None = None
    argv: list[str] | None = None
    env: dict[str, str] | None = None
    env_from: str | None = None
    source = "log" if ctx.vllm_log is not None else "url"

    if ctx.vllm_pid is not None:
        source = "pid"
        if not ctx.live:
            return Section(status="skipped", reason="--vllm-pid reads a live process; not possible under --root")
        proc = inspect(ctx.vllm_pid, sec.unreadable)
        if proc is None:
            sec.status, sec.reason = "error", f"process {ctx.vllm_pid} could not be read"
            return sec
    elif ctx.vllm_cmd is not None:
        source = "cmd"
        try:
            argv = split_command(ctx.vllm_cmd)
        except ValueError as err:
            data = {"source": "cmd", "argv_raw": redact_command_line(ctx.vllm_cmd), "args_error": redact_text(str(err))}
            if ctx.vllm_version:
                data.update(version=ctx.vllm_version, version_from="option --vllm-version")
            sec.data = clean(data)
            sec.status, sec.reason = "partial", "the --vllm-cmd command could not be split"
            return sec
        env, env_from = dict(os.environ), "this process plus the command's VAR=value prefixes"
    elif not named:
        if not ctx.live:
            return Section(status="skipped", reason="process discovery cannot honour --root")
        found = discover(sec.unreadable)
        if len(found) > 1:
            return _several(ctx, found, sec)
        if not found:
            sec.status, sec.reason = "absent", "no vLLM server running"
            return sec
        proc, source = found[0], "discovered"
    elif ctx.vllm_url and ctx.live:
        # A URL names a server; when it runs here, its process gives arguments and environment.
        port = _url_port(ctx.vllm_url)
        for candidate in discover({}) if port else []:
            cand_args = normalise(locate(candidate.argv).args, None, program=locate(candidate.argv).program or "")
            if cand_args.args.get("port", DEFAULT_PORT) == port:
                proc = candidate
                break

    if proc is not None:
        argv, env, env_from = proc.argv, proc.env, None
    data, problem = build(ctx, source=source, argv=argv, env=env, env_from=env_from, proc=proc, log=log, url=url,
                          unreadable=sec.unreadable)
    sec.data = clean(data)
    if url is not None and not url.get("reachable"):
        sec.unreadable[redact_url(ctx.vllm_url or "")] = url.get("error", "unreachable")
    if problem and sec.status == "ok":
        sec.status, sec.reason = "partial", "some vLLM arguments could not be read (see vllm.args_error)"
    return sec.settle()


def _url_port(url: str) -> int | None:
    try:
        parts = urlsplit(url)
        return parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None


def _several(ctx: Context, found: list[Proc], sec: Section) -> Section:
    servers: dict[str, Any] = {}
    problem = False
    for proc in found:
        data, bad = build(ctx, source="discovered", argv=proc.argv, env=proc.env, env_from=None, proc=proc,
                          log=None, url=None, unreadable=sec.unreadable)
        problem = problem or bad
        key = str(data.get("port", proc.pid))
        if key in servers:
            key = f"{key}-pid{proc.pid}"
        servers[key] = data
    sec.data = clean({"servers": servers})
    sec.notes.append(
        f"{len(found)} vLLM servers running and none named: each is under [vllm.servers.\"<port>\"]; "
        "name one with --vllm-pid or --vllm-url"
    )
    if problem:
        sec.status, sec.reason = "partial", "some vLLM arguments could not be read"
    return sec.settle()
