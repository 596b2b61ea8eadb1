"""Run the command blocks of a Markdown document and compare the output they show with what the code prints.

Used by tests/test_docs.py (compare) and scripts/refresh_docs.py (rewrite the shown outputs in place).

A ```console block holds commands (``$ CMD``, continued by a trailing ``\\`` or a here-document) each followed by
the output it shows (stdout and stderr as a terminal interleaves them). A ```sh block is one command whose output
is not shown. The documents of one run share a shell and a working directory in which ``fixtures`` is the
repository's fixtures folder, so a document that writes a file another one writes fails, as it would for a reader.

Shown output must equal the printed output, except for what differs between runs and hosts: a time in ms, a
timestamp, the working directory, the count of ignored findings (``taken_at`` is equal when two snaps fall in the
same second). A shown line ``...`` stands for any number of lines; a command ending in
``# first lines`` shows only the start of its output.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
MARK = "@@hoststate-doc-end@@"
#: Commands a test cannot run as written, replaced by what it can, and why.
SUBSTITUTE: tuple[tuple[str, str, str], ...] = (
    ("pip install . && ", "", "the package is installed (editable) by the test run itself"),
    ("pip install '.[test]' && python -m pytest",
     'python -m pytest --collect-only -q -p no:cacheprovider "$HS_REPO/tests/test_presentation.py" >/dev/null',
     "the whole suite cannot run inside one of its tests; collecting one file checks the command line"),
)


@dataclass
class Command:
    doc: str
    line: int  # 1-based line of the ``$`` in the document
    text: str
    shown: list[str] | None  # None: a ```sh block, output not shown
    out_start: int = 0  # 0-based index of the first output line in the document
    out_end: int = 0
    actual: list[str] = field(default_factory=list)  # as printed (the working directory shown as '.')
    status: int = 0
    script: str | None = None  # a ```sh block starting with '#!': written to this file and checked, not run

    @property
    def prefix_only(self) -> bool:
        return self.text.rstrip().endswith("# first lines")


def parse(path: Path) -> list[Command]:
    """The commands of ``path``'s console and sh blocks, in order."""
    lines = path.read_text().splitlines()
    out: list[Command] = []
    i = 0
    while i < len(lines):
        fence = re.match(r"^```(console|sh)\s*$", lines[i])
        if not fence:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        body = lines[i + 1:end]
        if fence.group(1) == "sh" and body and body[0].startswith("#!"):
            name = body[1].lstrip("# ").split()[0] if len(body) > 1 else "script.sh"
            out.append(Command(path.name, i + 2, "\n".join(body), None, script=name))
        elif fence.group(1) == "sh":
            out.append(Command(path.name, i + 2, "\n".join(body), None))
        else:
            out.extend(_console(path.name, body, i + 1))
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
        cmds.append(Command(doc, offset + start + 1, "\n".join(text), body[first:k], offset + first, offset + k))
    return cmds


def _script(cmds: list[Command], prelude: dict[str, str]) -> str:
    parts = ["exec 2>&1"]
    seen: set[str] = set()
    for n, c in enumerate(cmds):
        if c.doc not in seen and c.doc in prelude:
            parts.append(prelude[c.doc])
        seen.add(c.doc)
        text = c.text
        for old, new, _why in SUBSTITUTE:
            text = text.replace(old, new)
        if c.script:  # a script shown whole: written beside the others, its syntax checked
            text = f"cat > {c.script} <<'__HS_SCRIPT__'\n{text}\n__HS_SCRIPT__\nchmod +x {c.script}; bash -n {c.script}"
        elif c.shown is None and re.search(r"\bexit\b", text):
            text = f"(\n{text}\n)"  # its own exit must not end the shell the next documents run in
        # the status is kept for the next command's $? (``echo $?`` in a document)
        parts.append(f"{text}\n__hs=$?; printf '\\n{MARK} {n} %s\\n' \"$__hs\"; (exit $__hs)")
    return "\n".join(parts) + "\n"


def run(docs: list[Path], workdir: Path, env: dict[str, str] | None = None, timeout: float = 600,
        prelude: dict[str, str] | None = None) -> list[Command]:
    """Run every command of ``docs`` in order in one bash in ``workdir``; fill ``actual`` and ``status``.

    ``prelude`` maps a document's name to shell code run before its first command (stand-ins it needs)."""
    cmds = [c for d in docs for c in parse(d)]
    link = workdir / "fixtures"
    if not link.exists():
        link.symlink_to(REPO / "fixtures")
    full = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "120", "HS_REPO": str(REPO), **(env or {})}
    full.pop("NO_COLOR", None)
    proc = subprocess.run(["bash", "-c", _script(cmds, prelude or {})], cwd=workdir, env=full, capture_output=True,
                          text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    chunks = re.split(rf"\n?{MARK} (\d+) (\d+)\n", proc.stdout)
    done = 0
    for k in range(1, len(chunks) - 1, 3):
        c = cmds[int(chunks[k])]
        text = chunks[k - 1].replace(f"{workdir}/", "").replace(str(workdir), ".")
        c.actual, c.status = text.splitlines(), int(chunks[k + 1])
        done += 1
    if done != len(cmds):
        raise RuntimeError(f"only {done} of {len(cmds)} documented commands ran; output: {proc.stdout[-2000:]}")
    return cmds


_VOLATILE = (
    (re.compile(r" +\d+(\.\d+)? ms\b"), " N ms"),
    (re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?(\+00:00|Z)?"), "TIME"),
    # two snapshots taken within the same second have equal taken_at: one ignored finding fewer
    (re.compile(r"\b\d+ ignore\b"), "N ignore"),
)


def normalise(text: str) -> str:
    """``text`` without what differs between runs and hosts (a time in ms, a timestamp)."""
    for pattern, repl in _VOLATILE:
        text = pattern.sub(repl, text)
    return text


def matches(shown: list[str], actual: list[str], prefix_only: bool = False) -> bool:
    """Whether the shown lines are what was printed (``...`` any lines; ``prefix_only``: the start of it)."""
    shown = [normalise(s) for s in shown]
    while shown and not shown[-1].strip():
        shown.pop()
    actual = [normalise(a) for a in actual]
    while actual and not actual[-1].strip():
        actual.pop()
    if prefix_only:
        actual = actual[:len(shown)]
    if "..." not in shown:
        return shown == actual
    cut = shown.index("...")
    head, tail = shown[:cut], shown[cut + 1:]
    return (actual[:len(head)] == head and (not tail or actual[-len(tail):] == tail)
            and len(actual) >= len(head) + len(tail))


def refreshed(shown: list[str], actual: list[str], prefix_only: bool) -> list[str]:
    """The lines to show instead of ``shown``: the printed ones, keeping the shape (``...``, a prefix)."""
    while actual and not actual[-1].strip():
        actual = actual[:-1]
    if prefix_only:
        return actual[:max(1, len([s for s in shown if s.strip()]))]
    if "..." in shown:
        cut = shown.index("...")
        head, tail = shown[:cut], shown[cut + 1:]
        return actual[:len(head)] + ["..."] + (actual[-len(tail):] if tail else [])
    if len(shown) == len(actual):  # keep a shown line that differs only in what normalise hides (a time in ms)
        return [s if normalise(s) == a else a for s, a in zip(shown, actual, strict=True)]
    return actual
