"""``[vllm]``: one vLLM server's arguments, environment, versions and CUDA graph mode.

Sources (design.md "vLLM source options"): ``--vllm-pid``, ``--vllm-cmd``, ``--vllm-log``,
``--vllm-url``, ``--vllm-version``; with none, running servers are discovered with psutil. The
arguments are read by hoststate.collectors.vllm.args (vLLM's own rules, by version), the log by
hoststate.collectors.vllm.log; secrets are removed by hoststate.redact before anything is stored.
Nothing here raises: what cannot be read is recorded (``unreadable``, ``*_error`` keys).
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import sys
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from hoststate.collectors import Context, Section
from hoststate.collectors import env as env_collector
from hoststate.collectors import packages as packages_collector
from hoststate.collectors.vllm.args import Command, declare, locate, normalise, rules_for, split_command
from hoststate.collectors.vllm.log import LogFacts, parse_log
from hoststate.io import reason_of
from hoststate.redact import redact_argv, redact_env, redact_mentions, redact_text, redact_url, redact_value

#: Seconds one HTTP request to ``--vllm-url`` may take.
HTTP_TIMEOUT = 3.0
#: Largest response body read from an endpoint.
HTTP_MAX_BYTES = 4 << 20
DEFAULT_PORT = 8000


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


# --------------------------------------------------------------------------------------------
# HTTP


def _credentials(url: str) -> tuple[str, str | None]:
    """(the URL without ``user:pass@``, the Authorization value for them or None). urllib does not
    read credentials from a URL: it would look up ``user:pass@host`` as a host name."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return url, None
    if "@" not in parts.netloc:
        return url, None
    userinfo, host = parts.netloc.rsplit("@", 1)
    user, _, password = userinfo.partition(":")
    token = base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode("ascii")
    return urlunsplit(parts._replace(netloc=host)), f"Basic {token}"


def _get(base: str, path: str) -> tuple[int | None, str | None, str | None]:
    """(status, body, error) of one GET; never raises. The error never repeats a secret of ``base``."""
    import urllib.error  # lazy: urllib.request costs ~30 ms of import, and only --vllm-url needs it
    import urllib.request

    target, auth = _credentials(base)
    url = target.rstrip("/") + path
    try:
        request = urllib.request.Request(url)
        if auth:
            request.add_unredirected_header("Authorization", auth)  # not sent on to a redirect's host
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT) as resp:  # noqa: S310
            return resp.status, resp.read(HTTP_MAX_BYTES).decode("utf-8", "replace"), None
    except urllib.error.HTTPError as err:
        return err.code, None, f"HTTP {err.code}"
    except Exception as err:  # URLError, OSError, ValueError, http.client.InvalidURL, BadStatusLine, ...
        reason = getattr(err, "reason", err)
        message = str(reason)[:200] or type(err).__name__
        return None, None, redact_mentions(message, base)


_METRIC = re.compile(r"^([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_SPEC_METRICS = ("vllm:spec_decode_num_drafts", "vllm:spec_decode_num_draft_tokens",
                 "vllm:spec_decode_num_accepted_tokens")


def parse_metrics(text: str) -> dict[str, Any]:
    """``vllm:cache_config_info`` labels and spec-decode counter totals from Prometheus text."""
    out: dict[str, Any] = {}
    totals: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        m = _METRIC.match(line)
        if not m:
            continue
        name, labels, value = m.group(1), m.group(2) or "", m.group(3)
        if name == "vllm:cache_config_info":
            info = {k: _number(v) for k, v in _LABEL.findall(labels)}
            out["cache_config"] = {k: v for k, v in info.items() if v not in ("", "None")}
        base = name.removesuffix("_total")
        if base in _SPEC_METRICS:
            short = base.split(":", 1)[1]
            with contextlib.suppress(ValueError):
                totals[short] = totals.get(short, 0.0) + float(value)
    if totals:
        out["spec_decode"] = {k: int(v) if v.is_integer() else v for k, v in totals.items()}
    return out


def _number(text: str) -> Any:
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def query_url(url: str) -> dict[str, Any]:
    """What the server's endpoints say; an unreachable server is recorded, not raised."""
    data: dict[str, Any] = {"url": redact_url(url)}
    status, body, err = _get(url, "/version")
    if err:
        data["reachable"] = status is not None
        data["error"] = f"/version: {err}"
        if status is None:
            return data
    else:
        data["reachable"] = True
        try:
            data["version"] = str(json.loads(body or "")["version"])
        except (ValueError, KeyError, TypeError):
            data["version_error"] = "/version: not a JSON object with 'version'"
    status, body, err = _get(url, "/v1/models")
    if err:
        data["models_error"] = f"/v1/models: {err}"
    else:
        try:
            models = json.loads(body or "").get("data", [])
            data["models"] = [
                redact_value({k: m[k] for k in ("id", "max_model_len", "root") if k in m and m[k] is not None})
                for m in models if isinstance(m, dict)
            ]
        except (ValueError, AttributeError):
            data["models_error"] = "/v1/models: not JSON"
    status, body, err = _get(url, "/metrics")
    if err:
        data["metrics_error"] = f"/metrics: {err}"
    else:
        data.update(parse_metrics(body or ""))
    status, body, err = _get(url, "/server_info?config_format=json")
    if not err:
        try:
            info = json.loads(body or "")
        except ValueError:
            info = None
        if isinstance(info, dict):
            data["server_info"] = _server_info(info)
    else:
        data["server_info_available"] = False  # needs VLLM_SERVER_DEV_MODE=1
    return data


def _server_info(info: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in info.items():
        if key in ("vllm_env", "system_env") and isinstance(value, dict):
            out[key] = redact_env({k: str(v) for k, v in value.items() if env_collector.allowed(k)})
        elif key == "vllm_config":
            if isinstance(value, str):
                with contextlib.suppress(ValueError):
                    value = json.loads(value)
            out[key] = redact_value(value)
        else:
            out[key] = redact_value(value)
    return out


# --------------------------------------------------------------------------------------------
# Assembling one server


def _read_user_file(path: str) -> tuple[str | None, str | None]:
    """A user-given input file (log): read from the real filesystem, never under --root."""
    try:
        with open(path, "rb") as fh:
            return fh.read().decode("utf-8", "replace"), None
    except OSError as err:
        return None, reason_of(err)


def _packages(proc: Proc | None, timeout: float) -> tuple[dict[str, str], str]:
    if proc is not None and proc.interpreter:
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **proc.interpreter_env}
        report, err = packages_collector.of_interpreter(proc.interpreter, env=env, timeout=timeout)
        if err is None:
            return dict(sorted(report["packages"].items())), f"server interpreter {proc.interpreter} (pid {proc.pid})"
        current = packages_collector.installed()
        return current, f"current interpreter {sys.executable} (server interpreter {proc.interpreter}: {err})"
    return packages_collector.installed(), f"current interpreter {sys.executable}"


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
) -> tuple[dict[str, Any], bool]:
    """The ``[vllm]`` table of one server and whether anything in it failed to parse."""
    data: dict[str, Any] = {"source": source}
    problem = False
    if proc is not None:
        data["pid"] = proc.pid
    packages, packages_from = _packages(proc, ctx.command_timeout)

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
            parsed = normalise(command.args, version, program=command.program)
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
        text, err = _read_user_file(ctx.vllm_log)
        if text is None:
            sec.unreadable[ctx.vllm_log] = err or "unreadable"
        else:
            log = parse_log(text)
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
            data = {"source": "cmd", "argv_raw": redact_argv([ctx.vllm_cmd])[0], "args_error": redact_text(str(err))}
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
    data, problem = build(ctx, source=source, argv=argv, env=env, env_from=env_from, proc=proc, log=log, url=url)
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
                          log=None, url=None)
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
