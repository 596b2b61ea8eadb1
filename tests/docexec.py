"""Run every block of a Markdown document and compare the output it shows with what the code prints.

Used by tests/test_docs.py (compare) and scripts/refresh_docs.py (rewrite the shown outputs in place).

Blocks, by their fence; any other fence (or none) is an error, so a block that is not run cannot be written:

- ```console: commands (``$ CMD``, continued by a trailing ``\\`` or a here-document), each followed by the
  whole output it shows (stdout and stderr as a terminal interleaves them).
- ```sh: one command whose output is not shown; one starting with ``#!`` is a script shown whole: written to the
  file its second line names, its syntax checked (the commands after it run it).
- ```python: a block whose first line is ``# NAME.py`` is a file: written to NAME (syntax checked), for the
  commands and tests that use it; any other block runs as a script.
- ```yaml: a CI job's steps (a list of ``run:``/``uses:`` items) run as the runner would, each ``run:`` in
  ``bash -e``, a later step only after success unless its ``if:`` says ``always()``, an action through the stand-in
  USES gives; any other YAML (a fragment of another program's configuration) is parsed.

The documents of one run share a shell and a working directory in which ``fixtures`` is the repository's fixtures
folder, so a document that writes a file another one writes fails, as it would for a reader. The shell starts
without the variables ``[env]`` records (CUDA_*, NCCL_*, LD_LIBRARY_PATH, ...) and without HOSTSTATE_* settings, as a
fresh login would: the digests the documents show are the fixtures', never this machine's environment's.

Shown output must equal the printed output, line for line, except for what a machine makes different between runs
and hosts; each such normalisation is one row of VOLATILE (name, pattern, why):

- ``workdir``: the run's working directory (a temporary folder) is shown as ``.`` and a path under it relative;
- ``duration``: a time in ms (snap's per-collector line) is how long a read took on this machine, now;
- ``timestamp``: an ISO 8601 time is the wall clock (a snapshot's ``taken_at``, a rebaseline's time) or a file time
  of the checkout (``enabled_no_later_than`` comes from the fixture tree's /dev node times, set when git wrote them).

Nothing else is normalised: a count, a digest of the fixtures, a verdict shown is the one every run prints.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MARK = "@@hoststate-doc-end@@"
END = "__HS_BLOCK__"
#: Commands a test cannot run as written, replaced by what it can, and why.
SUBSTITUTE: tuple[tuple[str, str, str], ...] = (
    ("pip install . && ", "", "the package is installed (editable) by the test run itself"),
    ("pip install '.[test]' && python -m pytest -n auto --dist worksteal",
     'python -m pytest -n auto --dist worksteal --collect-only -q -p no:cacheprovider '
     '"$HS_REPO/tests/test_presentation.py" >/dev/null',
     "the whole suite cannot run inside one of its tests; collecting one file checks the command line"),
    ("python bench.py -o bench.json", "python bench.py --debug-single-value -o bench.json",
     "pyperf's full run takes minutes of CPU; one value runs the script, its worker and the metadata it records"),
)
#: A CI job's ``uses:`` actions belong to GitHub; each stand-in is a shell command on the step's ``with:`` values.
USES: dict[str, tuple[str, str]] = {
    "actions/upload-artifact": ('test -e "{path}"', "uploading is GitHub's: the file the job uploads must exist"),
}


@dataclass
class Command:
    doc: str
    line: int  # 1-based line of the ``$`` (or the block's first line) in the document
    text: str
    shown: list[str] | None  # None: a block whose output is not shown
    out_start: int = 0  # 0-based index of the first output line in the document
    out_end: int = 0
    actual: list[str] = field(default_factory=list)  # as printed, the workdir normalised (VOLATILE)
    status: int = 0
    kind: str = "sh"  # console, sh, script, python, python-file, yaml-job, yaml
    file: str | None = None  # the file a script or python-file block is written to


_PY_FILE = re.compile(r"^# ([\w.-]+\.py)\b")


def _block(doc: str, lang: str, body: list[str], line: int) -> list[Command]:
    text = "\n".join(body)
    if lang == "console":
        return _console(doc, body, line - 1)
    if lang == "sh" and body and body[0].startswith("#!"):
        name = body[1].lstrip("# ").split()[0] if len(body) > 1 else "script.sh"
        return [Command(doc, line, text, None, kind="script", file=name)]
    if lang == "sh":
        return [Command(doc, line, text, None)]
    if lang == "python":
        named = _PY_FILE.match(body[0]) if body else None
        return [Command(doc, line, text, None, kind="python-file" if named else "python",
                        file=named.group(1) if named else None)]
    if lang == "yaml":
        import yaml

        data = yaml.safe_load(text)
        job = isinstance(data, list) and all(isinstance(s, dict) and ("run" in s or "uses" in s) for s in data)
        return [Command(doc, line, text, None, kind="yaml-job" if job else "yaml")]
    raise ValueError(f"{doc}:{line - 1}: a ```{lang or ''} block is not run by tests/docexec.py; use console, sh, "
                     "python or yaml")


def parse(path: Path) -> list[Command]:
    """The blocks of ``path``, in order; a fence of a language not run here is a ValueError."""
    lines = path.read_text().splitlines()
    out: list[Command] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(\S*)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        out.extend(_block(path.name, fence.group(1), lines[i + 1:end], i + 2))
        i = end + 1
    return out


def _console(doc: str, body: list[str], offset: int) -> list[Command]:
    cmds: list[Command] = []
    k = 0
    while k < len(body):
        if not body[k].startswith("$ "):
            raise ValueError(f"{doc}:{offset + k + 1}: output before any command")
        start, text = k, [body[k][2:]]
        here = re.search(r"<<-?'?(\w+)'?", body[k])
        while text[-1].endswith("\\") and k + 1 < len(body):
            k += 1
            text.append(body[k])
        if here:
            while k + 1 < len(body) and body[k] != here.group(1):
                k += 1
                text.append(body[k])
        k += 1
        first = k
        while k < len(body) and not body[k].startswith("$ "):
            k += 1
        cmds.append(Command(doc, offset + start + 1, "\n".join(text), body[first:k], offset + first, offset + k,
                            kind="console"))
    return cmds


def _write(name: str, text: str) -> str:
    return f"cat > {shlex.quote(name)} <<'{END}'\n{text}\n{END}"


def _job(c: Command, n: int) -> str:
    """A CI job's steps as a runner runs them: each ``run:`` in ``bash -e``; the job's status is its first failure."""
    import yaml

    parts = ["__hs_job=0"]
    for k, step in enumerate(yaml.safe_load(c.text)):
        when = "true" if "always()" in str(step.get("if", "")) else '[ "$__hs_job" = 0 ]'
        if "run" in step:
            name = f".hs-step-{n}-{k}.sh"
            parts += [_write(name, step["run"]), f'if {when}; then bash -e {name} || __hs_job=$?; fi']
        else:
            action = step["uses"].split("@")[0]
            template, _why = USES.get(action, (f"echo 'no stand-in for {action}' >&2; exit 127", ""))
            parts.append(f"if {when}; then ( {template.format(**step.get('with', {}))} ) || __hs_job=$?; fi")
    return "\n".join([*parts, "(exit $__hs_job)"])


def _code(c: Command, n: int) -> str:
    """The shell code that runs one block (its own SUBSTITUTE rows applied)."""
    text = c.text
    for old, new, _why in SUBSTITUTE:
        text = text.replace(old, new)
    py = '"${HS_PYTHON:-python}"'
    if c.kind == "script":  # a script shown whole: written beside the others, its syntax checked
        return f"{_write(c.file or '', text)}\nchmod +x {c.file}; bash -n {c.file}"
    if c.kind == "python-file":
        check = "import sys; compile(open(sys.argv[1]).read(), sys.argv[1], 'exec')"
        return f"{_write(c.file or '', text)}\n{py} -c {shlex.quote(check)} {c.file}"
    if c.kind == "python":
        return f"{_write(f'.hs-block-{n}.py', text)}\n{py} .hs-block-{n}.py"
    if c.kind == "yaml-job":
        return _job(c, n)
    if c.kind == "yaml":
        check = "import sys, yaml; yaml.safe_load(open(sys.argv[1]))"
        return f"{_write(f'.hs-block-{n}.yaml', text)}\n{py} -c {shlex.quote(check)} .hs-block-{n}.yaml"
    if c.shown is None and re.search(r"\bexit\b", text):
        return f"(\n{text}\n)"  # its own exit must not end the shell the next documents run in
    return text


def _script(cmds: list[Command], prelude: dict[str, str]) -> str:
    parts = ["exec 2>&1"]
    seen: set[str] = set()
    for n, c in enumerate(cmds):
        if c.doc not in seen and c.doc in prelude:
            parts.append(prelude[c.doc])
        seen.add(c.doc)
        # the status is kept for the next command's $? (``echo $?`` in a document)
        parts.append(f"{_code(c, n)}\n__hs=$?; printf '\\n{MARK} {n} %s\\n' \"$__hs\"; (exit $__hs)")
    return "\n".join(parts) + "\n"


def _machine_env(name: str) -> bool:
    """A variable of this machine's environment the documents must not see: one ``[env]`` records (CUDA_*,
    LD_LIBRARY_PATH, ...: it would change the digests shown), a HOSTSTATE_* setting, NO_COLOR."""
    from hoststate.collectors.env import allowed

    return allowed(name) or name.startswith("HOSTSTATE_") or name == "NO_COLOR"


def run(docs: list[Path], workdir: Path, env: dict[str, str] | None = None, timeout: float = 600,
        prelude: dict[str, str] | None = None) -> list[Command]:
    """Run every block of ``docs`` in order in one bash in ``workdir``; fill ``actual`` and ``status``.

    ``prelude`` maps a document's name to shell code run before its first block (stand-ins it needs)."""
    cmds = [c for d in docs for c in parse(d)]
    link = workdir / "fixtures"
    if not link.exists():
        link.symlink_to(REPO / "fixtures")
    full = {k: v for k, v in os.environ.items() if not _machine_env(k)}
    full.update({"PYTHONUNBUFFERED": "1", "COLUMNS": "120", "HS_REPO": str(REPO), **(env or {})})
    proc = subprocess.run(["bash", "-c", _script(cmds, prelude or {})], cwd=workdir, env=full, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    chunks = re.split(rf"\n?{MARK} (\d+) (\d+)\n", proc.stdout)
    done = 0
    for k in range(1, len(chunks) - 1, 3):
        c = cmds[int(chunks[k])]
        c.actual, c.status = without_workdir(chunks[k - 1], workdir).splitlines(), int(chunks[k + 1])
        done += 1
    if done != len(cmds):
        raise RuntimeError(f"only {done} of {len(cmds)} documented blocks ran; output: {proc.stdout[-2000:]}")
    return cmds


@dataclass(frozen=True)
class Volatile:
    """One thing a machine makes different between runs, hidden when shown and printed output are compared."""

    name: str
    pattern: str  # a regular expression; for ``workdir``, the run's working directory (escaped) is inserted
    replacement: str
    why: str


VOLATILE: tuple[Volatile, ...] = (
    Volatile("workdir", r"{workdir}(/?)", ".", "the run's working directory is a temporary folder"),
    Volatile("duration", r" +\d+(\.\d+)? ms\b", " N ms", "how long a read took, on this machine, in this run"),
    Volatile("timestamp", r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)?", "TIME",
             "the wall clock (taken_at, a rebaseline's time) or a file time of the checkout (the fixture tree's "
             "/dev node times, set when git wrote them)"),
)
_RULES: dict[str, Volatile] = {v.name: v for v in VOLATILE}


def without_workdir(text: str, workdir: Path) -> str:
    """``text`` with the run's working directory as ``.`` and the paths under it relative (VOLATILE ``workdir``)."""
    rule = _RULES["workdir"]
    pattern = rule.pattern.replace("{workdir}", re.escape(str(workdir)))
    return re.sub(pattern, lambda m: "" if m.group(1) == "/" else rule.replacement, text)


def normalise(text: str) -> str:
    """``text`` with what a machine makes different hidden (VOLATILE, but the workdir: run() already did it)."""
    for rule in VOLATILE:
        if rule.name != "workdir":
            text = re.sub(rule.pattern, rule.replacement, text)
    return text


def _trimmed(lines: list[str]) -> list[str]:
    lines = list(lines)
    while lines and not lines[-1].strip():
        lines.pop()
    return lines


def matches(shown: list[str], actual: list[str]) -> bool:
    """Whether the shown lines are all the printed ones, equal but for VOLATILE (trailing blank lines aside)."""
    return [normalise(s) for s in _trimmed(shown)] == [normalise(a) for a in _trimmed(actual)]


def refreshed(shown: list[str], actual: list[str]) -> list[str]:
    """The lines to show instead of ``shown``: the printed ones, keeping a shown line that differs only in what
    VOLATILE hides (a time in ms), so that a refresh changes only what changed."""
    actual = _trimmed(actual)
    if len(shown) == len(actual):
        return [s if normalise(s) == normalise(a) else a for s, a in zip(shown, actual, strict=True)]
    return actual

