"""The command line: parse, call one library function, render, exit with the documented codes (README.md).

Every error is one line on stderr (``hoststate: ...``); ``--debug`` shows the traceback instead.
Imports of heavy modules (deepdiff, pynvml) happen inside the commands that need them.
A file argument ``-`` is stdin (an input) or stdout (an output); colour only on a terminal and never with NO_COLOR.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import click

from hoststate import __version__
from hoststate.errors import GuardRefused, HoststateError, InputError, PolicyError, WriteError

#: Exception class -> exit code; the first matching class wins (subclasses first).
EXIT_CODES: tuple[tuple[type[BaseException], int], ...] = (
    (GuardRefused, 3),
    (PolicyError, 2),
    (InputError, 2),
    (WriteError, 2),
    (HoststateError, 2),
)


#: The module that renders guard's verdict.
REPORT = "hoststate.render.guard"
#: The file name that means stdin (an input) or stdout (an output).
STDIO = "-"
#: Largest snapshot read from stdin, as for a file (a host's snapshot is tens of KiB).
STDIN_MAX_BYTES = 8 << 20

#: The path types of every option, made once: each ``click.Path`` asks gettext for its name when made, about
#: 0.1 ms a time, and the commands' options would make 34 of them at every start.
FILE = click.Path(dir_okay=False)
FILE_OR_STDIO = click.Path(dir_okay=False, allow_dash=True)
DIRECTORY = click.Path(file_okay=False)
ANY_PATH = click.Path()


def use_color(fmt: str = "text", when: str = "auto", stream: Any = None) -> bool:
    """Colour for a text report: ``--color=always``/``never``, or with ``auto`` on a terminal unless NO_COLOR is
    set to anything non-empty (no-color.org)."""
    if fmt != "text" or when == "never":
        return False
    return when == "always" or ((stream or sys.stdout).isatty() and not os.environ.get("NO_COLOR"))


def read_stdin(what: str = "snapshot") -> bytes:
    """Stdin's bytes for ``-``, under the same size cap as a snapshot file."""
    data = sys.stdin.buffer.read(STDIN_MAX_BYTES + 1)
    if len(data) > STDIN_MAX_BYTES:
        raise InputError(f"{what} on stdin is larger than {STDIN_MAX_BYTES} bytes", "-")
    return data


def load_snapshot(name: str, like: dict[str, Any] | None = None) -> dict[str, Any]:
    """A snapshot from the file ``name``, or from stdin when it is ``-``; ``like``: a snapshot loaded before it,
    whose keys it shares (hoststate.snapshot.share_keys)."""
    from hoststate.snapshot import load, loads

    if name == STDIO:
        return loads(read_stdin(), "<stdin>", like)
    return load(name, like)


def prepare_output(path: str | None, force: bool, option: str = "-o", *, protect: tuple[str, ...] = (),
                   what: str = "an input") -> None:
    """Before any collecting: create a missing parent directory and refuse what the writer would refuse (an
    existing file without --force, a symlink, a directory, a directory reached through another user's symlink,
    one of the command's inputs in ``protect``), so a write never fails after minutes of work. ``-`` and no path
    mean stdout."""
    if not path or path == STDIO:
        return
    from hoststate.output import check_output, check_parent

    check_parent(path)  # before a directory is created through another user's link
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)
    except OSError as err:
        raise WriteError(f"{option} {path}: cannot write: cannot create directory {parent}: {err.strerror}") from err
    if not os.path.isdir(parent):
        raise WriteError(f"{option} {path}: cannot write: {parent} is not a directory")
    if not os.access(parent, os.W_OK):
        raise WriteError(f"{option} {path}: cannot write in {parent}: not writable")
    check_output(path, force=force, protect=protect, what=what)


def _csv(_ctx: click.Context, _param: click.Parameter, value: str | None) -> list[str] | None:
    if value is None:
        return None
    return [v.strip() for v in value.split(",") if v.strip()]


def _timeout(_ctx: click.Context, _param: click.Parameter, value: float) -> float:
    from hoststate.io import check_timeout

    try:
        return check_timeout(value)
    except InputError as err:
        raise click.BadParameter(f"{value!r} is not a finite number of seconds greater than 0") from err


def collector_options(func: Callable[..., Any]) -> Callable[..., Any]:
    """Options shared by every command that snaps a host (snap, guard, check, export)."""
    opts = [
        click.option("--root", default="/", show_default=True, type=DIRECTORY,
                     help="Read the host through this prefix (a captured tree); NVML and process discovery are "
                     "skipped under a prefix."),
        click.option("--only", callback=_csv, metavar="C,..", help="Run only these collectors."),
        click.option("--skip", callback=_csv, metavar="C,..", help="Skip these collectors."),
        click.option("--timeout", default=20.0, show_default=True, type=float, callback=_timeout,
                     help="Seconds one collector may take before it is recorded as 'timeout' (finite, above 0)."),
        click.option("--vllm-pid", type=int, metavar="PID", help="Describe the vLLM server with this pid."),
        click.option("--vllm-cmd", metavar="CMD",
                     help="The exact command a benchmark will start, e.g. \"vllm serve MODEL -tp 8\"."),
        click.option("--vllm-log", type=FILE, metavar="FILE",
                     help="A vLLM server log: non-default args, engine config line, graph-capture lines."),
        click.option("--vllm-url", metavar="URL", help="A running server's base URL (/version, /v1/models, /metrics)."),
        click.option("--vllm-version", metavar="V", help="The vLLM version, when it cannot be detected."),
    ]
    for opt in reversed(opts):
        func = opt(func)
    return func


def check_root(root: str | None) -> str:
    """``--root`` must be a host tree (hoststate.capture.check_root); a usage error otherwise."""
    from hoststate.capture import check_root as checked

    try:
        return checked(root)
    except InputError as err:
        raise click.UsageError(str(err)) from err


def make_context(opts: dict[str, Any]) -> tuple[Any, tuple[str, ...]]:
    """A collector Context and the selected collector names from the shared options (hoststate.capture)."""
    from hoststate.capture import SnapOptions, context_of

    check_root(opts.get("root"))
    return context_of(SnapOptions.of(opts))


def take_snapshot(opts: dict[str, Any], label: str | None = None, *, quiet: bool = False) -> dict[str, Any]:
    """Collect a snapshot from the shared options; prints the per-collector summary on stderr."""
    from hoststate.capture import collect

    ctx, names = make_context(opts)
    snap = collect(ctx, names, label=label)
    if not quiet:
        for line in summary_lines(snap, ctx):
            click.echo(line, err=True)
    return snap


def summary_lines(snap: dict[str, Any], ctx: Any = None) -> list[str]:
    """The digest, then one line per collector: name, status, time, and why when not ok."""
    lines = [f"digest {snap['hoststate']['digest']}"]
    for name, entry in snap.get("collectors", {}).items():
        status = entry.get("status", "?")
        extra = ""
        from hoststate.coverage import described

        extra += described(entry.get("unreadable"))
        if entry.get("reason") and status != "skipped":
            extra += f"  ({entry['reason']})"
        if name == "vllm" and status in ("ok", "partial"):
            from hoststate.check import check_vllm_version

            if any(check_vllm_version(snap)):
                rules = snap.get("vllm", {}).get("cudagraph", {}).get("rules_version", "the newest")
                extra += f"  (version unknown: rules of {rules} assumed; give --vllm-version)"
        lines.append(f"  {name:<13} {status:<8} {entry.get('took_ms', 0):>7.1f} ms{extra}")
    if ctx is not None:
        for name, section in ctx.sections.items():
            lines.extend(f"  {name}: {note}" for note in section.notes)
    return lines


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="hoststate")
@click.option("--debug", is_flag=True, help="Show tracebacks instead of one-line errors.")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """Snapshot, diff and guard the host state that LLM inference benchmarks depend on.

    A baseline may only be reused when the host configuration matches, not just the vLLM arguments:
    snap the host before each measurement, diff against the baseline, and let `guard` refuse a mismatch.
    """
    ctx.obj = {"debug": debug}


@cli.command()
@click.option("-o", "--output", type=FILE_OR_STDIO, metavar="FILE",
              help="Write the snapshot here (atomically; missing directories are created) instead of stdout; "
              "'-' is stdout.")
@click.option("--force", is_flag=True, help="Replace FILE if it exists (never done silently).")
@click.option("--label", metavar="TEXT", help="A free-form label stored in [hoststate].label.")
@click.option("-q", "--quiet", is_flag=True, help="No digest and per-collector lines on stderr.")
@click.option("-v", "--verbose", is_flag=True, help="Also where the time went: start-up, collecting, writing.")
@collector_options
def snap(output: str | None, force: bool, label: str | None, quiet: bool, verbose: bool, **opts: Any) -> None:
    """Snapshot this host into a TOML fingerprint (stdout, or -o FILE).

    Prints the digest and one summary line per collector, with the milliseconds it took, on stderr (not with
    --quiet); -v adds the command's start-up, collecting and writing. Exit 0 when written (also when some
    collectors are absent or partial), 2 on a usage error or when the file could not be written.
    """
    import time

    from hoststate.snapshot import to_toml, write

    started = _since_start()
    begin = time.perf_counter()
    inputs = tuple(p for p in (opts.get("vllm_log"),) if p)  # inputs are never written
    prepare_output(output, force, protect=inputs)
    snapshot = take_snapshot(opts, label, quiet=quiet)
    collected = time.perf_counter()
    text = to_toml(snapshot)
    if output and output != STDIO:
        write(output, text, force=force, protect=inputs)
        if not quiet:
            click.echo(f"wrote {output}", err=True)
    else:
        click.echo(text, nl=False)
    if verbose and not quiet:
        costs = [("collect", collected - begin, "collectors at once, redaction, digest"),
                 ("write", time.perf_counter() - collected, "TOML and output")]
        if started is not None:
            costs.insert(0, ("start-up", started, "interpreter and imports, before collecting"))
        for name, seconds, what in costs:
            click.echo(f"  {name:<22} {seconds * 1000:>7.1f} ms  ({what})", err=True)


def _since_start() -> float | None:
    """Seconds since this process started, from /proc/self/stat (clock ticks: 10 ms steps); None elsewhere."""
    import time

    try:
        with open("/proc/self/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
        return time.clock_gettime(time.CLOCK_BOOTTIME) - int(fields[19]) / os.sysconf("SC_CLK_TCK")  # starttime
    except (OSError, ValueError, IndexError, AttributeError):
        return None


@cli.command()
@click.argument("file", type=FILE_OR_STDIO)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def show(file: str, fmt: str) -> None:
    """Summarise a snapshot FILE ('-': stdin) for a person (or dump it as JSON). Exit 0; 2 on bad input."""
    from hoststate.render.show import render

    snapshot = load_snapshot(file)
    click.echo(render(snapshot, fmt, "<stdin>" if file == STDIO else file))


@cli.command()
@click.argument("baseline", type=FILE_OR_STDIO)
@click.argument("current", type=FILE_OR_STDIO)
@click.option("--policy", "policies", multiple=True, type=FILE, metavar="P",
              help="A policy file whose rules win over the shipped ones (repeatable; most specific wins).")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
@click.option("-v", "--verbose", is_flag=True, help="List every finding, not only one line per rule.")
@click.option("--all", "include_ignored", is_flag=True,
              help="List every finding, also those the policy rates 'ignore' (implies -v).")
@click.option("--name-only", is_flag=True, help="Print only the paths of the findings, one per line.")
@click.option("--color", "color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
              help="Colour the text report: on a terminal (auto, unless NO_COLOR), always or never.")
@click.argument("paths", nargs=-1, metavar="[-- PATH...]")
@click.pass_context
def diff(ctx: click.Context, baseline: str, current: str, policies: tuple[str, ...], fmt: str,
         verbose: bool, include_ignored: bool, name_only: bool, color: str, paths: tuple[str, ...]) -> None:
    """Compare two snapshots under a policy: a summary line per subsystem, then the findings by rule.

    Either snapshot may be '-' (stdin), not both. PATHs (after '--') keep the findings under them, in the
    policy's pattern syntax ('dsa', 'gpu.devices.*.power_*', 'vllm.**'); the verdict and exit status follow them.

    Exit 0 when nothing is invalidating, 1 when something is, 2 on bad input (snapshot or policy).
    """
    from hoststate.gcpause import paused

    if baseline == current == STDIO:
        raise click.UsageError("only one of BASELINE and CURRENT can be '-' (stdin)")
    with paused():  # two trees and a finding per leaf that differs: no cycles to collect (hoststate.gcpause)
        _diff(ctx, baseline, current, policies, fmt, verbose, include_ignored, name_only, color, paths)


def _diff(ctx: click.Context, baseline: str, current: str, policies: tuple[str, ...], fmt: str,
          verbose: bool, include_ignored: bool, name_only: bool, color: str, paths: tuple[str, ...]) -> None:
    from hoststate.diff import compare, only
    from hoststate.policy import load_policy
    from hoststate.render.diff import iter_json, render_diff
    from hoststate.render.sources import vllm_source_note
    from hoststate.render.text import safe

    policy = load_policy(list(policies))
    base = load_snapshot(baseline)
    cur = load_snapshot(current, like=base)  # the pair holds each key once: a diff at the cap stays under 200 MB
    result = compare(base, cur, policy, include_ignored=include_ignored)
    if paths:
        try:
            result = only(result, paths)
        except ValueError as err:
            raise InputError(f"bad PATH pattern: {err}") from err
    if name_only:
        click.echo("".join(f"{safe(f.path)}\n" for f in result.findings), nl=False)
        ctx.exit(1 if result.verdict == "invalidating" else 0)
    note = vllm_source_note(base, cur) if fmt == "text" and not paths else []
    del base, cur  # the findings hold the values they show; the two trees are not needed to render them
    if fmt == "json":  # written as it is made: the report of a huge diff is never held whole
        for piece in iter_json(result, baseline=baseline, current=current):
            click.echo(piece, nl=False)
        ctx.exit(1 if result.verdict == "invalidating" else 0)
    click.echo(render_diff(result, fmt, baseline=baseline, current=current, color=use_color(fmt, color),
                           verbose=verbose or include_ignored, note=note), nl=False, color=True)
    ctx.exit(1 if result.verdict == "invalidating" else 0)


@cli.command()
@click.argument("file", type=FILE_OR_STDIO)
def digest(file: str) -> None:
    """Print the snapshot's digest (sha256 over the values the default policy rates invalidating). Exit 0; 2.

    FILE '-' is stdin."""
    from hoststate.digest import digest as compute
    from hoststate.render.text import safe

    snapshot = load_snapshot(file)
    stored = snapshot["hoststate"]["digest"]
    fresh = compute(snapshot)
    if stored != fresh:
        click.echo(f"hoststate: {file}: stored digest differs from the one this version computes ({fresh}): the "
                   "file was edited or taken under another default policy", err=True)
    click.echo(safe(stored))  # the file's text, shown escaped like any report's


@cli.command()
@click.argument("file", required=False, type=FILE_OR_STDIO)
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
@click.option("--color", "color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
              help="Colour the text report: on a terminal (auto, unless NO_COLOR), always or never.")
@collector_options
@click.pass_context
def check(ctx: click.Context, file: str | None, fmt: str, color: str, **opts: Any) -> None:
    """Advisories from a snapshot FILE (or the live host), each with a stable code (docs/codes.md).

    Exit 0 when none is at warning level, 1 when some are, 2 on bad input.
    """
    from hoststate.check import run_checks
    from hoststate.render.check import render_checks

    snapshot = load_snapshot(file) if file else take_snapshot(opts, quiet=True)
    advisories = run_checks(snapshot)
    click.echo(render_checks(advisories, fmt, color=use_color(fmt, color)), nl=False, color=True)
    ctx.exit(1 if any(a.severity == "warning" for a in advisories) else 0)


@cli.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.option("--baseline", "baseline", required=True, metavar="FILE",
              help="The baseline snapshot (only ever read).")
@click.option("--policy", "policy_files", multiple=True, metavar="P",
              help="A policy file whose rules win over the default policy (repeatable).")
@click.option("--accept", "accept", multiple=True, metavar="PATTERN",
              help="Proceed past invalidating findings whose path matches (policy syntax: * one key, ** any); "
              "the run is then labelled non-comparable (repeatable).")
@click.option("--allow-unreadable", "allow_unreadable", is_flag=True,
              help="Proceed past invalidating values that could not be read now (or in the baseline): collector "
              "error, timeout, skipped, denied, an unreadable file; the run is then labelled non-comparable.")
@click.option("--save-current", "save_current", type=FILE, metavar="FILE",
              help="Write the current snapshot here with a [guard] table (baseline, verdict, accepted findings).")
@click.option("--force", is_flag=True, help="Let --save-current replace an existing FILE.")
@click.option("--label", metavar="TEXT", help="A label stored in the current snapshot's [hoststate].label.")
@click.option("-v", "--verbose", is_flag=True,
              help="Also list every finding (warning and info ones too) and the per-collector summary.")
@click.option("--watch", is_flag=True, help="Watch CMD while it runs, snap again after it and judge the run clean, "
              "degraded or invalid (docs/watch.md).")
@click.option("--watch-interval", type=float, default=1.0, show_default=True, metavar="S",
              help="Seconds between two samples of the cheap GPU readings.")
@click.option("--watch-checkpoint", type=float, default=60.0, show_default=True, metavar="S",
              help="Seconds between two reads of the expensive GPU counters (also read at the start and end).")
@click.option("--watch-rules", type=FILE, metavar="FILE",
              help="A TOML file of [[rule]] tables replacing the run verdict's thresholds by metric.")
@click.option("--watch-trace", type=FILE, metavar="FILE",
              help="Also write every sample of the run here (a replayable trace).")
@click.option("--attach", "attach", type=FILE, metavar="RESULT",
              help="After CMD: merge the run verdict into this JSON result under 'hoststate' and write "
              "RESULT.hoststate.json beside it.")
@click.option("--attach-from-argv", "attach_from_argv", is_flag=True,
              help="Attach to the result file CMD names (--result-dir, --result-filename: what vllm bench sweep serve "
              "appends to its --bench-cmd), and refuse the cell when the sweep's earlier cells ran on another host "
              "state (docs/watch.md).")
@click.option("--fail-on", "fail_on", type=click.Choice(["degraded", "invalid"]),
              help="Exit 4 when CMD exited 0 but the run was judged this or worse (CMD is never stopped for it).")
@collector_options
@click.argument("command", nargs=-1, type=click.UNPROCESSED, metavar="[-- CMD ARGS...]")
@click.pass_context
def guard(ctx: click.Context, baseline: str, policy_files: tuple[str, ...], accept: tuple[str, ...],
          allow_unreadable: bool, save_current: str | None, force: bool, label: str | None, verbose: bool,
          command: tuple[str, ...], **opts: Any) -> None:
    """Snap this host, diff it against a baseline, and run CMD only when they are comparable.

    Refuses (exit 3, the findings on stderr, CMD not started) when any finding is invalidating and not
    accepted with --accept. Otherwise runs CMD with the terminal, stdin and signals, and exits with its
    status (128+N when a signal N killed it); 0 when no CMD is given. Exit 2 on bad input (a missing or bad
    baseline, policy or pattern), CMD not started. The baseline file is never written. Neither --baseline nor
    --save-current may be '-': stdin and stdout belong to CMD.
    """
    from hoststate.capture import SnapOptions
    from hoststate.run.flow import guarded_run
    from hoststate.run.guard import GuardResult

    check_root(opts.get("root"))
    watch, fail_on = _watch_options(opts, command)
    for option, value in (("--baseline", baseline), ("--save-current", save_current)):
        if value == STDIO:
            raise click.UsageError(f"{option} -: stdin and stdout belong to the guarded command; name a file")
    # The baseline, the policies and the log are only ever read: compared by device and inode, not by name.
    inputs = (baseline, *policy_files, *((opts["vllm_log"],) if opts.get("vllm_log") else ()))
    if save_current:
        prepare_output(save_current, force, "--save-current", protect=inputs, what="the baseline or another input")
    if watch is not None and watch.trace:
        prepare_output(watch.trace, force, "--watch-trace", protect=inputs)

    def announce(result: GuardResult) -> None:
        from hoststate.render.guard import render_guard

        if verbose:
            for line in summary_lines(result.current):
                click.echo(line, err=True)
        click.echo(render_guard(result, baseline_snap=result.baseline_snapshot, color=use_color(stream=sys.stderr),
                                verbose=verbose, saved=save_current), err=True, nl=False)
        for pattern in result.unused_accept:
            _error(f"hoststate guard: note: --accept {pattern!r} matched no invalidating finding")
        if command and result.accepted and not result.refused:
            from hoststate.render.guard import running_lines

            click.echo("\n".join(running_lines(result, command)), err=True)

    # the report's modules are imported while the collectors run (SnapOptions.prepare), not before them
    outcome = guarded_run(baseline, command, SnapOptions.of(opts, label=label, prepare=(REPORT,)),
                          policy_files=policy_files, accept=accept, allow_unreadable=allow_unreadable, watch=watch,
                          save_current=save_current, force=force, protect=inputs, announce=announce)
    _said(outcome, command)
    ctx.exit(outcome.exit_status(fail_on))


def _said(outcome: Any, command: tuple[str, ...]) -> None:
    """What guard prints after its verdict: a sweep cell's refusal, the watched run's verdict and reasons, the
    files written; raises GuardRefused when the run was refused."""
    from hoststate.render.text import clip, safe

    result = outcome.guard
    if outcome.sweep_conflicts:
        for line in outcome.sweep_conflicts:  # names files in the sweep's folders: escaped, never a line of its own
            _error(clip(f"  MISMATCH  {safe(line)}", 120))
        from hoststate.run.flow import sweep_refusal

        raise GuardRefused(sweep_refusal(outcome.sweep_conflicts), result)
    if outcome.watched is not None:
        run = outcome.watched
        click.echo(f"hoststate guard: run {run.verdict} ({len(run.reasons)} reason(s); command exit {run.returncode}; "
                   f"{run.summary['samples']} samples of {len(run.summary['gpus'])} GPU(s), "
                   f"gpu {run.summary['gpu_status']})", err=True)
        for reason in run.reasons:
            _error(f"  {reason['verdict'].upper():<9} {reason['text']}")
    for line in outcome.written:  # paths and errors: a name's newline or escape never makes a line of its own
        click.echo(f"hoststate guard: {safe(line)}", err=True)
    if result.refused:
        raise GuardRefused(f"refused ({len(result.refused)} invalidating not accepted)"
                           + ("; the command was not started" if command else ""), result)


#: guard's --watch options, taken out of its collector options.
WATCH_OPTIONS = ("watch", "watch_interval", "watch_checkpoint", "watch_rules", "watch_trace", "attach",
                 "attach_from_argv", "fail_on")


def _watch_options(opts: dict[str, Any], command: tuple[str, ...]) -> tuple[Any, str | None]:
    """Pop guard's --watch options out of ``opts``: a WatchOptions (None without --watch) and --fail-on; the
    others need --watch, and --watch needs a command."""
    from hoststate.run.flow import WatchOptions
    from hoststate.run.judge import load_rules

    watch = {k: opts.pop(k) for k in WATCH_OPTIONS}
    if not watch["watch"]:
        given = [k for k in WATCH_OPTIONS[3:] if watch[k]]
        if given:
            raise click.UsageError(f"--{given[0].replace('_', '-')} needs --watch")
        return None, None
    if not command:
        raise click.UsageError("--watch needs a command to watch (-- CMD ARGS...)")
    for key in ("watch_interval", "watch_checkpoint"):
        try:
            _timeout(None, None, watch[key])  # type: ignore[arg-type]
        except click.BadParameter as err:
            raise click.UsageError(f"--{key.replace('_', '-')} {watch[key]!r}: must be a finite number of seconds "
                                   "greater than 0") from err
    return WatchOptions(interval=watch["watch_interval"], checkpoint=watch["watch_checkpoint"],
                        rules=load_rules(watch["watch_rules"]), attach=watch["attach"],
                        trace=watch["watch_trace"], attach_from_argv=watch["attach_from_argv"]), watch["fail_on"]


@cli.command()
@click.argument("baseline", type=FILE)
@click.argument("current", type=FILE)
@click.option("-o", "--output", required=True, type=FILE, metavar="NEW",
              help="Write the new baseline here (atomically; never over an existing file without --force, never "
              "over BASELINE or CURRENT).")
@click.option("--accept", "accept", multiple=True, metavar="PATTERN",
              help="Accept the invalidating findings whose path matches (guard's --accept syntax; repeatable). "
              "Every invalidating finding must be accepted, or nothing is written.")
@click.option("--policy", "policy_files", multiple=True, type=FILE, metavar="P",
              help="A policy file whose rules win over the shipped ones (repeatable).")
@click.option("--by", metavar="NAME", help="Who accepts (default: the sudo caller, else this user's login name).")
@click.option("--force", is_flag=True, help="Replace NEW if it exists.")
def rebaseline(baseline: str, current: str, output: str, accept: tuple[str, ...], policy_files: tuple[str, ...],
               by: str | None, force: bool) -> None:
    """Make CURRENT (a snapshot, e.g. guard's --save-current file) the new baseline, recording its provenance.

    Every invalidating finding of BASELINE vs CURRENT must match an --accept PATTERN; the new file says which
    baseline it replaces, which findings were accepted, by whom and when ([hoststate.rebaseline]; `show`
    displays it). Exit 0 written; 2 bad input or NEW not writable; 3 findings not accepted (nothing written).
    """
    from hoststate.rebaseline import rebaseline as make
    from hoststate.render.guard import render_guard
    from hoststate.snapshot import to_toml, write

    inputs = (baseline, current, *policy_files)
    prepare_output(output, force, protect=inputs, what="the baseline or another input")
    try:
        new, result = make(baseline, current, accept=accept, policy_files=policy_files, by=by)
    except GuardRefused as refused:
        click.echo(render_guard(refused.result, color=use_color(stream=sys.stderr), title="hoststate rebaseline"),
                   err=True, nl=False)
        raise
    write(output, to_toml(new), force=force, protect=inputs)
    table = new["hoststate"]["rebaseline"]
    click.echo(f"hoststate rebaseline: wrote {output}: replaces {baseline} ({table['replaces_digest']}), "
               f"{len(table['accepted'])} invalidating finding(s) accepted by {table['by']}", err=True)


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=ANY_PATH, metavar="FILES-or-DIRS...")
@click.option("--reference", type=FILE, metavar="FILE",
              help="Compare against this snapshot's digest instead of the majority group.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text", show_default=True)
@click.option("-j", "--jobs", type=click.IntRange(min=0), default=0, show_default=True,
              help="Processes reading the files; 0: one per usable CPU.")
@click.option("-v", "--verbose", is_flag=True, help="List every finding of each outlier group.")
@click.option("--color", "color", type=click.Choice(["auto", "always", "never"]), default="auto", show_default=True,
              help="Colour the text report: on a terminal (auto, unless NO_COLOR), always or never.")
@click.pass_context
def fleet(ctx: click.Context, paths: tuple[str, ...], reference: str | None, fmt: str, jobs: int, verbose: bool,
          color: str) -> None:
    """Group many snapshots by digest and list each outlier's invalidating drift.

    Directories are walked for *.toml files. The largest group is the reference unless --reference is
    given. Outliers come first. Unreadable, empty or invalid files are listed as skipped. Exit 0 when all
    snapshots are in one group (the reference's) and none was skipped, 1 when there are outliers or skipped files,
    2 when no snapshot could be read.
    """
    from hoststate.fleet import run_fleet
    from hoststate.render.fleet import render

    report = run_fleet(paths, reference=reference, jobs=jobs or None)
    click.echo(render(report, fmt, color=use_color(fmt, color), verbose=verbose), nl=False, color=True)
    ctx.exit(report.exit_code)


@cli.command()
@click.argument("kind", type=click.Choice(["prometheus", "nfd"]))
@click.argument("file", required=False, type=FILE_OR_STDIO)
@click.option("--baseline", type=FILE_OR_STDIO, metavar="B",
              help="Add drift against this baseline snapshot (default policy); '-' is stdin.")
@click.option("-o", "--output", type=FILE_OR_STDIO, metavar="FILE",
              help="Write here atomically instead of stdout: a node_exporter textfile *.prom, "
              "or a file in /etc/kubernetes/node-feature-discovery/features.d/.")
@click.option("--force", is_flag=True, help="Replace FILE if it exists (a refresh; never done silently).")
@click.option("--expires-in", type=click.IntRange(min=1), metavar="SECONDS",
              help="nfd: add '# +expiry-time=' this many seconds from now, so stale labels drop off.")
@click.option("--label", metavar="TEXT", help="Label of the live snapshot (without FILE).")
@collector_options
def export(kind: str, file: str | None, baseline: str | None, output: str | None, force: bool,
           expires_in: int | None, label: str | None, **opts: Any) -> None:
    """Export a snapshot FILE (the live host when no FILE) as Prometheus textfile metrics or an NFD feature file.

    An existing OUT is replaced only with --force (a periodic refresh passes it). Exit 0; 2 on bad input or when
    the output could not be written.
    """
    import datetime as dt

    from hoststate.export import to_nfd, to_prometheus
    from hoststate.output import write_output

    if file == STDIO and baseline == STDIO:
        raise click.UsageError("only one of FILE and --baseline can be '-' (stdin)")
    # The snapshot, the baseline and the log are only ever read: compared by device and inode, not by name.
    inputs = tuple(p for p in (file, baseline, opts.get("vllm_log")) if p and p != STDIO)

    if file is not None:
        used = [name for name in ("only", "skip", "vllm_pid", "vllm_cmd", "vllm_log", "vllm_url", "vllm_version")
                if opts.get(name)] + (["root"] if opts.get("root") not in (None, "/") else [])
        if used or label:
            names = ", ".join("--" + n.replace("_", "-") for n in used + (["label"] if label else []))
            raise click.UsageError(f"{names}: only for a live snapshot (without FILE)")
    prepare_output(output, force, protect=inputs)  # before any work: an existing OUT needs --force, as for snap
    snapshot = load_snapshot(file) if file is not None else take_snapshot(opts, label, quiet=True)
    base = load_snapshot(baseline) if baseline else None
    if kind == "prometheus":
        text = to_prometheus(snapshot, base)
    else:
        expires = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=expires_in) if expires_in else None
        text = to_nfd(snapshot, base, expires=expires)
    if output and output != STDIO:
        prepare_output(output, force, protect=inputs)
        write_output(output, text, force=force, protect=inputs)
    else:
        click.echo(text, nl=False)


@cli.command()
@click.argument("paths", nargs=-1, required=True, type=ANY_PATH, metavar="DIRS-or-FILES...")
@click.option("--current", type=FILE, metavar="SNAPSHOT",
              help="Check the results against this host's snapshot (before resuming a sweep) instead of the "
              "baseline the cells were guarded against.")
@click.option("--metric", "metrics", multiple=True, metavar="NAME",
              help="A result key (output_throughput, ...): its median per host state, its shift against the "
              "reference, and which host change moved it. Repeatable.")
@click.option("--ignore", multiple=True, metavar="GLOB",
              help="Leave out files whose name or path below DIR matches GLOB (listed as ignored). Repeatable.")
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text",
              show_default=True)
@click.pass_context
def results(ctx: click.Context, paths: tuple[str, ...], current: str | None, metrics: tuple[str, ...],
            ignore: tuple[str, ...], fmt: str) -> None:
    """Refuse to compare or resume a sweep unless every cell carries a verified record from one host state.

    Reads the JSON results under PATHS with the record `guard --watch --attach` merged into them and their
    RESULT.hoststate.json, verifies each record against its result and sidecar, groups the cells by host state
    and compares them with the baseline they were guarded against (or --current). Exit 0 when every cell is
    verified and ran on that host state and none was judged invalid, 1 when refused (a file without a verified
    record, another host state, an invalid run), 2 when no result file was found.
    """
    from hoststate.render.results import render
    from hoststate.results import check_results

    snap = load_snapshot(current) if current else None
    report = check_results(paths, current=snap, current_name=current or "", ignore=ignore, metrics=metrics)
    base = paths[0] if len(paths) == 1 and os.path.isdir(paths[0]) else ""
    click.echo(render(report, fmt, base), nl=False)
    ctx.exit(report.exit_code)


# -- timeline: a watched run drawn (hoststate.render.timeline) ----------------------------------------------------


@cli.command()
@click.argument("trace", type=FILE)
@click.option("-o", "--output", required=True, type=FILE_OR_STDIO, metavar="FILE",
              help="Write the drawing here (atomically): FILE.svg, or FILE.html for a page; '-' is stdout.")
@click.option("--format", "fmt", type=click.Choice(["svg", "html"]),
              help="svg or html; default: by FILE's suffix (svg for stdout).")
@click.option("--force", is_flag=True, help="Replace FILE if it exists (never done silently).")
@click.option("--baseline", type=FILE, metavar="FILE",
              help="Judge against this watched baseline run (saved by guard --watch --save-current), as guard did.")
@click.option("--own-pid", "own_pids", multiple=True, type=int, metavar="PID",
              help="A process of the run's own (repeatable): any other that appears on a GPU is foreign.")
@click.option("--watch-rules", type=FILE, metavar="FILE",
              help="[[rule]] tables replacing or adding watch rules by metric, as for guard --watch-rules.")
def timeline(trace: str, output: str, fmt: str | None, force: bool, baseline: str | None,
             own_pids: tuple[int, ...], watch_rules: str | None) -> None:
    """Draw a watched run from TRACE, its --watch-trace file: per GPU the SM clock, power, temperature, clock-event
    reasons, processes and events, with the run's verdict and where each of its reasons fired.

    One self-contained SVG or HTML file (no script, nothing fetched). Exit 0 when written, 2 on bad input or
    when FILE exists without --force.
    """
    from hoststate.render.timeline import kind_of
    from hoststate.render.timeline import timeline as draw
    from hoststate.watch import baseline_metrics, load_rules

    inputs = tuple(p for p in (trace, baseline, watch_rules) if p)
    prepare_output(output, force, protect=inputs)
    base = None
    if baseline:
        base = baseline_metrics(load_snapshot(baseline))
        if base is None:
            raise InputError("not a watched baseline run (no [guard.watch] metrics: save one with guard --watch "
                             "--save-current)", baseline)
    drawing, judged = draw(trace, kind=kind_of(output, fmt), baseline=base, own_pids=own_pids or None,
                           rules=load_rules(watch_rules))
    if output == STDIO:
        click.echo(drawing, nl=False)
    else:
        from hoststate.output import write_output

        write_output(output, drawing, force=force, protect=inputs)
        click.echo(f"hoststate timeline: wrote {output} (run {judged.verdict}, {len(judged.reasons)} reason(s))",
                   err=True)


def debug_requested(args: list[str]) -> bool:
    """True when ``--debug`` is among hoststate's own options, before the subcommand: a ``--debug`` after it
    belongs to the subcommand or to guard's command (``hoststate guard ... -- tool --debug``)."""
    for arg in args:
        if arg == "--debug":
            return True
        if arg == "--" or not arg.startswith("-"):
            return False
    return False


def _error(line: str) -> None:
    """One line on stderr, secrets redacted: messages may quote input values."""
    from hoststate.redact import redact_text

    click.echo(redact_text(line), err=True)


def _traceback(exc: BaseException) -> None:
    """``--debug``'s traceback on stderr, secrets redacted like any other output."""
    import traceback

    from hoststate.redact import redact_text

    sys.stderr.write(redact_text("".join(traceback.format_exception(type(exc), exc, exc.__traceback__))))
    sys.stderr.flush()


def main(argv: list[str] | None = None) -> None:
    """Entry point: run the CLI, turning every error into one line and its documented exit code.

    With ``--debug`` (before the subcommand) an error also shows its traceback; the exit code stays the same.
    """
    args = sys.argv[1:] if argv is None else argv
    debug = debug_requested(args)
    try:
        rc = cli.main(args=args, prog_name="hoststate", standalone_mode=False)
    except click.exceptions.Exit as exc:
        rc = exc.exit_code
    except click.exceptions.Abort:
        _error("hoststate: aborted")
        rc = 130
    except click.ClickException as exc:
        hint = ""
        if isinstance(exc, click.UsageError) and exc.ctx is not None:
            hint = f" (see '{exc.ctx.command_path} --help')"
        _error(f"hoststate: {exc.format_message()}{hint}")
        rc = exc.exit_code
    except HoststateError as exc:
        if debug and not isinstance(exc, GuardRefused):  # a refusal is a verdict, not a failure
            _traceback(exc)
        _error(f"hoststate: {exc}")
        rc = next(code for cls, code in EXIT_CODES if isinstance(exc, cls))
    except KeyboardInterrupt:
        _error("hoststate: interrupted")
        rc = 130
    except BrokenPipeError:
        rc = 0
    except Exception as exc:
        if debug:
            _traceback(exc)
        hint = "" if debug else " (run with --debug for details)"
        _error(f"hoststate: internal error: {type(exc).__name__}: {exc}{hint}")
        rc = 2
    sys.exit(rc if isinstance(rc, int) else 0)
