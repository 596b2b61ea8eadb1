"""``[vllm]``: one vLLM server's arguments, environment, versions and CUDA graph mode.

Sources (design.md "vLLM source options"): ``--vllm-pid``, ``--vllm-cmd``, ``--vllm-log``,
``--vllm-url``, ``--vllm-version``; with none, running servers are discovered from /proc. The
arguments are read by argv.py and resolved by cudagraph.py (vLLM's own rules, by version, versions.py),
the log by log.py; secrets are removed by hoststate.redact before anything is stored.
Nothing here raises: what cannot be read is recorded (``unreadable``, ``*_error`` keys).
"""

from __future__ import annotations

import contextlib
import os
import stat
import sys
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from hoststate import procfiles
from hoststate.collectors import Context, Section
from hoststate.collectors import env as env_collector
from hoststate.collectors import packages as packages_collector
from hoststate.collectors.vllm.discovery import (
    Proc,
    discover,
    inspect,
    invoking_uid,
    select,
    server_at,
    user_label,
    user_name,
)
from hoststate.collectors.vllm.placement import SOURCES as PLACEMENT_SOURCES
from hoststate.collectors.vllm.placement import server_facts
from hoststate.coverage import source
from hoststate.filetrust import run_by_invoker
from hoststate.io import Reader, decode, reason_of
from hoststate.redact import Own, redact_argv, redact_command_line, redact_env, redact_text, redact_url, redact_value

if TYPE_CHECKING:  # the parsers are imported where a server is read: a host without vLLM never loads them
    from hoststate.collectors.vllm.argv import Command, ConfigLoader
    from hoststate.collectors.vllm.log import LogFacts
    from hoststate.collectors.vllm.model import ModelFacts, Read

DEFAULT_PORT = 8000

__all__ = ["Proc", "build", "clean", "collect", "discover", "inspect", "query_url"]


def __getattr__(name: str) -> Any:
    """``query_url`` stays importable from here; the HTTP client is loaded only when asked for."""
    if name == "query_url":
        from hoststate.collectors.vllm.http import query_url

        return query_url
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --------------------------------------------------------------------------------------------
# Assembling one server


#: Where a server's packages were not read from: a captured tree has no interpreter of the server's to scan.
SKIPPED_PACKAGES = "packages under --root"


#: What this collector reads (process files, a log, a URL, as failures are recorded) -> where it lands in the
#: ``vllm`` table; first match names it. Anything else, such as /proc itself, hides the whole table.
SOURCES = (
    source(r"proc/\d+/environ", "env.**", "cudagraph.**", absent=("ESRCH",)),  # the process exited meanwhile
    source(r"(?:proc/\d+ )?--config .*", "args.**", "args_error", "args_resolved.**", "cudagraph.**"),
    source(r"proc/\d+ packages", "packages.**", "version*"),
    source(SKIPPED_PACKAGES, "packages.**"),
    source(r"--vllm-log .*", "observed.**", "cudagraph.observed.**", "cudagraph.attention_backends",
           "cudagraph.captures", "cudagraph.config_line", "cudagraph.mismatch*", "cudagraph.observed_from",
           "log.**", "version*"),
    *PLACEMENT_SOURCES,
)


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
        from hoststate.collectors.vllm.configfile import parse_config_text

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
        return parse_config_text(decode(data))

    return load


def _packages(ctx: Context, proc: Proc | None, unreadable: dict[str, str]) -> tuple[dict[str, str], str, str | None]:
    """(packages, where from, error): a process's own, read from its files; else this interpreter's, which is the
    server's when a --vllm-cmd runs from here; never under --root (a fact the tree cannot give is skipped)."""
    if proc is None and not ctx.live:
        unreadable[SKIPPED_PACKAGES] = "NotInTree: a captured tree (--root) holds no interpreter of the server's"
        return {}, "not read: a captured tree (--root) holds no interpreter of the server's", None
    if proc is not None:
        packages, where, err = packages_collector.of_process(proc.pid, proc.argv, proc.env)
        if err is not None:
            err = "ESRCH" if procfiles.gone(proc.pid) else err  # it exited meanwhile
            unreadable[f"proc/{proc.pid} packages"] = err
        return packages, where, err
    return packages_collector.installed(), f"current interpreter {sys.executable}", None


def _version(ctx: Context, log: LogFacts | None, url: dict[str, Any] | None,
             packages: dict[str, str], packages_from: str) -> tuple[str | None, str | None]:
    """(version, where it came from): option, log, /version, server interpreter, current interpreter."""
    for value, origin in (
        (ctx.vllm_version, "option --vllm-version"),
        (log.version if log else None, "log"),
        (url.get("version") if url else None, "url /version"),
        (packages.get("vllm"), packages_from),
    ):
        if value:
            return str(value), origin
    return None, None


@dataclass
class _Args:
    """The arguments of one server as read, and what vLLM would say about them."""

    args: dict[str, Any] | None = None
    env: dict[str, str] | None = None
    refusals: list[str] = field(default_factory=list)
    problem: bool = False
    #: What resolved the arguments: the parser defaults' source and the dests left out as spelled at default.
    defaults_source: str = ""
    at_default: list[str] = field(default_factory=list)
    #: The model's facts, once read for the declared mode (None: not read).
    facts: ModelFacts | None = None
    #: The same arguments and refusals read from the redacted command line (messages.py): what is said about them.
    shown: dict[str, Any] | None = None
    shown_refusals: list[str] = field(default_factory=list)


def _arguments(data: dict[str, Any], argv: list[str] | None, env: dict[str, str] | None, source: str,
               version: str | None, log: LogFacts | None, loader: ConfigLoader) -> _Args:
    """The command line (pid, cmd, discovered) first, else the log's non-default args. The command line is read
    as given and again redacted; what is said about it comes from the second reading (messages.py)."""
    from hoststate.collectors.vllm.argv import locate, normalise
    from hoststate.collectors.vllm.messages import Replay, own

    if argv is None:
        if log and log.non_default_args is not None:
            data["args_from"] = "log non-default args"
            args = {k: v for k, v in log.non_default_args.items() if k != "model_tag"}
            return _Args(args, env, shown=redact_value(args))
        return _Args(None, env)
    data["argv"] = redact_argv(argv)
    command: Command = locate(argv)
    if command.program is None:
        data["args_error"] = Own("not a vLLM server command (no 'vllm serve' or vLLM server module)")
        return _Args(None, env, problem=True)
    data["program"] = command.program
    cut = next((n for n, tok in enumerate(command.launcher)
                if tok.rsplit("/", 1)[-1] == "vllm" or tok.rsplit("/", 1)[-1].startswith("python")), 0)
    if cut:  # a wrapper before the server (numactl, taskset, nsys): rated on its own, vllm.argv is only the text;
        # nohup, time, stdbuf, timeout and exec are not part of it (argv.TRANSPARENT), and vllm.argv keeps them
        data["launcher"] = redact_argv(command.launcher[:cut])
    replay = Replay(loader)
    parsed = normalise(command.args, version, program=command.program, config_loader=replay.load)
    shown = normalise(redact_argv(command.args), version, program=command.program, config_loader=replay.again)
    problems = parsed.errors + parsed.refusals
    if problems:
        data["args_error"] = Own("; ".join(own(problems, shown.errors + shown.refusals, "problem")))
    if parsed.notes:
        data["args_notes"] = own(parsed.notes, shown.notes, "note")
    env = {**(env or {}), **command.env} if source == "cmd" else env
    return _Args(parsed.args, env, parsed.refusals, bool(problems), parsed.defaults_source, parsed.at_default,
                 shown=shown.args, shown_refusals=own(parsed.refusals, shown.refusals, "refusal"))


def _identity(ctx: Context, data: dict[str, Any], args: dict[str, Any] | None, log: LogFacts | None,
              url: dict[str, Any] | None) -> None:
    """model and port, from the arguments, else the log, else the URL."""
    if args is not None:
        if isinstance(args.get("model"), str):
            data["model"] = redact_value(args["model"])
        port = args.get("port", DEFAULT_PORT)
        if isinstance(port, int):
            data["port"] = port
    elif log and isinstance(log.config.get("model"), str):
        data["model"] = redact_value(log.config["model"])
    if url and "port" not in data:
        from urllib.parse import urlsplit  # here: only --vllm-url needs it (with ipaddress, 2.4 ms of each snap)

        with contextlib.suppress(ValueError):
            port = urlsplit(ctx.vllm_url or "").port
            if port:
                data["port"] = port
    if url and "model" not in data and url.get("models"):
        data["model"] = url["models"][0].get("id")


@contextlib.contextmanager
def _model_reader(ctx: Context, proc: Proc | None) -> Iterator[Read]:
    """How the model's config.json is read: a running server's files as that process could read them
    (its root, its cwd, its user's rights); under --root confined to the captured tree; the user's own
    ``--vllm-cmd`` model from here, regular files only."""
    if proc is not None:
        with procfiles.ProcView(proc.pid) as view:
            yield view.read
    elif not ctx.live:
        reader = Reader(ctx.root, {})

        def read_in_root(path: str) -> tuple[bytes | None, str | None]:
            data = reader.read_bytes(path, max_bytes=procfiles.MAX_FILE_BYTES)
            return data, None if data is not None else reader.unreadable.get(path.lstrip("/"), "unreadable")

        yield read_in_root
    else:
        yield read_input_file


def _gpu_data(ctx: Context) -> dict[str, Any]:
    """The gpu section's table, waited for here, where a server's arguments need it (a host without a server is
    described while NVML still answers); empty when it was not collected."""
    gpu = ctx.section("gpu")
    return gpu.data if gpu is not None and gpu.status in ("ok", "partial") else {}


def _host_gpus(ctx: Context) -> int | None:
    """The host's GPU count; None when it was not collected (the resolution then records what it assumed about
    the GPUs)."""
    count = _gpu_data(ctx).get("count")
    return count if isinstance(count, int) and not isinstance(count, bool) else None


def _gpu_models(ctx: Context) -> list[tuple[Any, Any]] | None:
    """The host's GPUs as (name, memory total bytes), for the batch sizes vLLM takes by its device 0
    (sizes.large_gpu); None when not collected, and where a GPU runs MIG (vLLM then sees an instance)."""
    devices = _gpu_data(ctx).get("devices")
    if not isinstance(devices, dict) or not devices:
        return None
    rows = [d for d in devices.values() if isinstance(d, dict)]
    if len(rows) != len(devices) or any(d.get("mig_mode_current") for d in rows):
        return None
    return [(d.get("name"), d.get("memory_total_bytes")) for d in rows]


def _omp(ctx: Context, args: dict[str, Any] | None, env: dict[str, Any], version: str | None) -> dict[str, str]:
    """OMP_NUM_THREADS=1 where vLLM's executor sets it itself (defaults.omp_threads_as_unset), by name."""
    if args is None or env.get("OMP_NUM_THREADS") != "1":
        return {}
    from hoststate.collectors.vllm.defaults import omp_threads_as_unset
    from hoststate.collectors.vllm.versions import rules_for

    gpus = _gpu_models(ctx)
    why = omp_threads_as_unset(args, env, rules_for(version)[0], len(gpus) if gpus is not None else None)
    return {"OMP_NUM_THREADS": why} if why else {}


def _declared(ctx: Context, parsed: _Args, version: str | None, proc: Proc | None) -> dict[str, Any]:
    """The declared mode from arguments + environment + version + model facts, or vLLM's refusal. The mode comes
    from the arguments as given; the words (why, what was assumed, the refusal) from the redacted ones."""
    from hoststate.collectors.vllm.cudagraph import declare
    from hoststate.collectors.vllm.messages import own, own_text
    from hoststate.collectors.vllm.model import read_facts
    from hoststate.collectors.vllm.versions import rules_for

    assert parsed.args is not None
    rules_version = rules_for(version)[0].version
    if parsed.refusals:
        return {"refused": Own(f"vLLM {rules_version} refuses: " + "; ".join(parsed.shown_refusals)),
                "rules_version": rules_version}
    model = parsed.args.get("model")
    revision = parsed.args.get("revision")
    with _model_reader(ctx, proc) as read:
        facts = read_facts(model if isinstance(model, str) else None, parsed.env or {}, read,
                           revision if isinstance(revision, str) else None)
    parsed.facts = facts
    gpus = _host_gpus(ctx)
    declared = declare(parsed.args, parsed.env or {}, version, facts, gpus=gpus)
    said = declare(parsed.shown or {}, redact_env(parsed.env or {}), version,
                   replace(facts, source=redact_text(facts.source)), gpus=gpus)
    alike = (said.mode, said.refused is None) == (declared.mode, declared.refused is None)
    out: dict[str, Any] = {"rules_version": declared.rules_version,
                           "declared_because": own_text(declared.because, said.because if alike else None, "why")}
    if declared.refused:
        out["refused"] = own_text(declared.refused, said.refused if alike else None, "vLLM's reason")
    else:
        out["declared"] = declared.mode
    if declared.compilation_mode:
        out["compilation_mode"] = declared.compilation_mode
    if declared.problems:
        out["declared_problems"] = own(declared.problems, said.problems if alike else [], "problem")
    if declared.assumes:
        out["declared_assumes"] = own(declared.assumes, said.assumes if alike else [], "assumption")
    return out


#: compilation_config keys whose only effect is the CUDA graph and compilation modes cudagraph.declare resolves.
GRAPH_KEYS = frozenset({"cudagraph_mode", "mode", "level"})


def _same_graphs(ctx: Context, parsed: _Args, version: str | None) -> dict[str, str]:
    """The arguments that only pin what vLLM resolves without them: a compilation_config of GRAPH_KEYS alone
    under which cudagraph.declare gives the same CUDA graph and compilation modes as without it (pinning the mode
    hoststate reports), and ``-O`` at the version's default level. Each with why, for ``same_as_unset``."""
    from hoststate.collectors.vllm.cudagraph import declare
    from hoststate.collectors.vllm.model import UNKNOWN
    from hoststate.collectors.vllm.versions import DEFAULT_OPT_LEVEL

    assert parsed.args is not None
    args, env, facts = parsed.args, parsed.env or {}, parsed.facts or UNKNOWN
    cc, level = args.get("compilation_config"), args.get("optimization_level")
    candidates = [dest for dest, only_graphs in (
        ("compilation_config", isinstance(cc, Mapping) and bool(cc) and set(cc) <= GRAPH_KEYS),
        ("optimization_level", not isinstance(level, bool) and str(level).strip() == str(DEFAULT_OPT_LEVEL)),
    ) if dest in args and only_graphs]
    if not candidates:
        return {}
    gpus = _host_gpus(ctx)
    given = declare(args, env, version, facts, gpus=gpus)
    same = {}
    for dest in candidates:
        unset = declare({k: v for k, v in args.items() if k != dest}, env, version, facts, gpus=gpus)
        if given.refused is None and unset.refused is None and \
                (given.mode, given.compilation_mode) == (unset.mode, unset.compilation_mode):
            same[dest] = (f"the CUDA graph mode ({given.mode}) and compilation mode ({given.compilation_mode}) vLLM "
                          f"resolves without it (cudagraph.declare)")
    return same


def _resolved(ctx: Context, parsed: _Args, version: str | None) -> dict[str, Any]:
    """``args`` as the engine resolves them (defaults.py): what was spelled at the version's parser default, or
    resolves against the model or engine to the same setting as no argument, is left out, and
    ``args_resolved`` says what and why, so a spelling-only change leaves ``args`` alone."""
    from hoststate.collectors.vllm.argv import compilation_held
    from hoststate.collectors.vllm.cudagraph import v1_engine_sure
    from hoststate.collectors.vllm.defaults import defaults_for, resolve
    from hoststate.collectors.vllm.model import UNKNOWN
    from hoststate.collectors.vllm.sizes import capture_given
    from hoststate.collectors.vllm.versions import rules_for

    assert parsed.args is not None
    rules = rules_for(version)[0]
    facts = parsed.facts or UNKNOWN
    facts = replace(facts, source=redact_text(facts.source))  # the reasons quote where the facts came from
    args, held = compilation_held(parsed.args, rules)
    env = parsed.env or {}
    on_gpus = {"max_num_seqs", "max_num_batched_tokens", "distributed_executor_backend"}  # settled by the host's GPUs
    resolved = resolve(args, facts, env, rules, defaults_for(version).defaults,
                       gpus=_gpu_models(ctx) if on_gpus & set(args) or capture_given(args) else None,
                       v1_engine=rules.defaults_v1_only and v1_engine_sure(args, env, rules, facts))
    graphs = _same_graphs(ctx, parsed, version)
    for dest in graphs:
        resolved.args.pop(dest, None)
    if held and "compilation_config" in resolved.args:
        resolved.spelled["compilation_config"] = held
    same = {dest: "its parser default" for dest in parsed.at_default}
    if held and "compilation_config" not in args and "compilation_config" not in graphs:
        same["compilation_config"] = f"nothing this version's CompilationConfig holds: {held}"
    same.update(resolved.same_as_unset)
    same.update(graphs)
    how: dict[str, Any] = {"defaults": parsed.defaults_source or "vLLM's own non-default args, from the log"}
    if same:
        how["same_as_unset"] = {dest: Own(why) for dest, why in same.items()}
    if resolved.spelled:
        how["spelled"] = {dest: Own(why) for dest, why in resolved.spelled.items()}
    return {"args": redact_value(resolved.args), "args_resolved": how}


def _observed(cudagraph: dict[str, Any], log: LogFacts) -> None:
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


def _cudagraph(ctx: Context, parsed: _Args, version: str | None, log: LogFacts | None,
               proc: Proc | None) -> dict[str, Any]:
    """declared (from the arguments), observed (from the log), and whether they differ."""
    cudagraph: dict[str, Any] = {}
    if parsed.args is not None:
        cudagraph.update(_declared(ctx, parsed, version, proc))
    elif version:
        from hoststate.collectors.vllm.versions import rules_for

        cudagraph["rules_version"] = rules_for(version)[0].version
    if log is not None:
        _observed(cudagraph, log)
    if cudagraph.get("declared") and cudagraph.get("observed"):
        cudagraph["mismatch"] = cudagraph["declared"] != cudagraph["observed"]
        if cudagraph["mismatch"]:
            cudagraph["mismatch_note"] = (
                f"declared {cudagraph['declared']} but the log shows {cudagraph['observed']} "
                f"({cudagraph['observed_from']})"
            )
    return cudagraph


def _log_table(ctx: Context, log: LogFacts) -> dict[str, Any]:
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
    return logdata


def _who(proc: Proc) -> dict[str, Any]:
    """Which process this is and why it was taken (discovery.select, discovery.server_at): pid, the user it runs
    as, its program, and the reason, so a reader sees whose server decided the verdict."""
    out: dict[str, Any] = {"pid": proc.pid, "program": proc.program}
    if proc.euid is not None:
        out["uid"] = proc.euid
        out["user"] = user_name(proc.euid)
    if proc.selected_because:
        out["selected_because"] = proc.selected_because
    return out


def _described(proc: Proc) -> dict[str, Any]:
    """The described server's :func:`_who`. Another user's look-alike on the benchmark's port is described as any
    server is; that it does not run as the user hoststate runs for (or root) is recorded, and refuses
    (default_policy.toml). Written only then: a baseline of the invoker's server, taken before it was recorded,
    reads the same as one taken now."""
    out = _who(proc)
    if proc.euid is not None and not run_by_invoker((proc.uid, proc.euid)):
        out["run_by_invoker"] = False
    return out


def _others(procs: list[Proc]) -> dict[str, Any]:
    """Other users' servers as ``vllm.other_users.<pid>``: who and what, never their arguments."""
    return {str(p.pid): {k: v for k, v in _who(p).items() if k != "selected_because"} for p in procs}


def _process_facts(proc: Proc, unreadable: dict[str, str], packages: dict[str, str]) -> dict[str, Any]:
    """What a running server adds: undecodable argv/environ notes, its CPU placement, the GPU libraries it
    mapped, which of its packages it loaded and its NCCL config files (placement.py)."""
    out: dict[str, Any] = {"decode_notes": proc.decode_notes} if proc.decode_notes else {}
    out.update(server_facts(proc.pid, proc.env, unreadable, packages=packages))
    return out


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
    if proc is not None:
        data.update(_described(proc))
    unreadable = {} if unreadable is None else unreadable
    packages, packages_from, packages_error = _packages(ctx, proc, unreadable)
    version, version_from = _version(ctx, log, url, packages, packages_from)
    if version:
        data["version"], data["version_from"] = version, version_from
    parsed = _arguments(data, argv, env, source, version, log, _config_loader(proc, unreadable))
    _identity(ctx, data, parsed.args, log, url)
    cudagraph = _cudagraph(ctx, parsed, version, log, proc)
    if parsed.args is not None:
        data.update(_resolved(ctx, parsed, version))
    if log is not None and (log.ran or log.attention_backends):
        ran = dict(log.ran)
        if log.attention_backends:
            ran["attention_backend"] = log.attention_backends[-1]  # the one selected last
        data["observed"] = redact_value(ran)
    if cudagraph:
        data["cudagraph"] = cudagraph
    if log is not None:
        data["log"] = _log_table(ctx, log)
    if url is not None:
        data["url"] = url
    if parsed.env is not None:
        from hoststate.collectors.vllm_release import same_as_unset, spelled  # with a server: reads the version table

        data["env"] = env_collector.select(parsed.env)
        alike = {**same_as_unset(data["env"], version), **_omp(ctx, parsed.args, data["env"], version)}
        if alike:
            data["env_same_as_unset"] = {name: {"value": data["env"].pop(name), "because": Own(why)}
                                         for name, why in alike.items()}
        env_collector.respell(data["env"], spelled(data["env"], version))
        if env_from:
            data["env_from"] = env_from
    elif proc is not None and proc.env_error:
        data["env_error"] = proc.env_error
    data["packages"] = packages
    data["packages_from"] = packages_from
    if packages_error:
        data["packages_error"] = packages_error
    if proc is not None:
        data.update(_process_facts(proc, unreadable, packages))
    return data, parsed.problem


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


@dataclass
class _Server:
    """Where one server's command line and environment come from."""

    source: str
    proc: Proc | None = None
    argv: list[str] | None = None
    env: dict[str, str] | None = None
    env_from: str | None = None
    #: Other users' servers seen by discovery (``vllm.other_users``).
    others: list[Proc] = field(default_factory=list)


def _from_cmd(ctx: Context, sec: Section) -> _Server | Section:
    from hoststate.collectors.vllm.argv import split_command

    assert ctx.vllm_cmd is not None
    try:
        argv = split_command(ctx.vllm_cmd)
    except ValueError as err:
        data = {"source": "cmd", "argv_raw": redact_command_line(ctx.vllm_cmd), "args_error": Own(str(err))}
        if ctx.vllm_version:
            data.update(version=ctx.vllm_version, version_from="option --vllm-version")
        sec.data = clean(data)
        sec.status, sec.reason = "partial", "the --vllm-cmd command could not be split"
        return sec
    return _Server("cmd", argv=argv, env=dict(os.environ),
                   env_from="this process plus the command's VAR=value prefixes")


def _from_pid(ctx: Context, sec: Section) -> _Server | Section:
    assert ctx.vllm_pid is not None
    if not ctx.live:
        return Section(status="skipped", reason="--vllm-pid reads a live process; not possible under --root")
    proc = inspect(ctx.vllm_pid, sec.unreadable)
    if proc is None:
        sec.status, sec.reason = "error", f"process {ctx.vllm_pid} could not be read"
        return sec
    return _Server("pid", proc=proc)


def _from_discovery(ctx: Context, sec: Section) -> _Server | Section:
    if not ctx.live:
        return Section(status="skipped", reason="process discovery cannot honour --root")
    every = discover(sec.unreadable)
    found, notes = select(every)  # the invoking user's first, then listening ones: another's never decides
    others = [p for p in every if p.foreign]
    if found and all(p.foreign for p in found):
        sec.notes.extend(notes)
        who = "; ".join(p.who() for p in found)
        sec.data = clean({"other_users": _others(others)})
        sec.status, sec.reason = "absent", (f"no vLLM server of the invoking user runs; another user's is recorded "
                                            f"under vllm.other_users, not compared (name it with --vllm-pid or "
                                            f"--vllm-url to describe it): {who}")
        return sec
    if len(found) > 1:
        _several(ctx, found, sec)
        sec.notes.extend(notes)
        if others:
            sec.data["other_users"] = clean(_others(others))
        return sec
    sec.notes.extend(notes)
    if not found:
        sec.status, sec.reason = "absent", "no vLLM server running"
        return sec
    return _Server("discovered", proc=found[0], others=others)


def _from_url(ctx: Context, sec: Section) -> _Server:
    """A URL names a server; when it runs here, the process that owns its listening socket gives arguments
    and environment (discovery.server_at)."""
    server = _Server("log" if ctx.vllm_log is not None else "url")
    if ctx.vllm_url and ctx.live:
        server.proc, note = server_at(ctx.vllm_url, {})
        if note:
            sec.notes.append(note)
        me, source = invoking_uid()
        if server.proc is not None and server.proc.euid != me:
            sec.notes.append(f"the socket behind --vllm-url is held by another user's process: {server.proc.who()} "
                             f"(the invoking user is {user_label(me)}, from {source})")
    return server


def _server(ctx: Context, sec: Section) -> _Server | Section:
    if ctx.vllm_pid is not None:
        return _from_pid(ctx, sec)
    if ctx.vllm_cmd is not None:
        return _from_cmd(ctx, sec)
    if all(v is None for v in (ctx.vllm_log, ctx.vllm_url)):
        return _from_discovery(ctx, sec)
    return _from_url(ctx, sec)


def collect(ctx: Context) -> Section:
    sec = Section()
    log: LogFacts | None = None
    if ctx.vllm_log is not None:
        from hoststate.collectors.vllm.log import parse_log, read_log

        deadline = time.monotonic() + ctx.timeout * 0.8  # leave time to assemble the section
        text, err, notes = read_log(ctx.vllm_log, deadline)
        if text is None:  # what the log would have said is unknown, not gone (SOURCES)
            sec.unreadable[f"--vllm-log {ctx.vllm_log}"] = err or "unreadable"
        else:
            log = parse_log(text, deadline)
            log.errors[:0] = notes
    server = _server(ctx, sec)
    if isinstance(server, Section):
        return server
    url = None
    if ctx.vllm_url:
        from hoststate.collectors.vllm.http import query_url

        # the process server_at found behind the URL is the one whose endpoints are read (the same socket's owner)
        owner = server.proc if server.source in ("url", "log") else None
        url = query_url(ctx.vllm_url, owner=(owner.pid, owner.start) if owner is not None else None)
    if server.proc is not None:
        server.argv, server.env, server.env_from = server.proc.argv, server.proc.env, None
    data, problem = build(ctx, source=server.source, argv=server.argv, env=server.env, env_from=server.env_from,
                          proc=server.proc, log=log, url=url, unreadable=sec.unreadable)
    if server.others:
        data["other_users"] = _others(server.others)
    sec.data = clean(data)
    if url is not None and not url.get("reachable"):
        sec.unreadable[f"--vllm-url {redact_url(ctx.vllm_url or '')}"] = url.get("error", "unreachable")
    if problem and sec.status == "ok":
        sec.status, sec.reason = "partial", "some vLLM arguments could not be read (see vllm.args_error)"
    return sec.settle()


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
