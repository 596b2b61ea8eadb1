"""Rewrite the outputs README.md, docs/tutorial.md and docs/recipes.md show, from a fresh run of their commands, and
the seed sweep's outputs docs/watch.md shows, from a fresh run of its scripts (tests/test_results_docs.py).

Run it after a change of ratings, wording or digests makes tests/test_docs.py or tests/test_results_docs.py fail,
then review the diff:
    python scripts/refresh_docs.py            # rewrite in place
    python scripts/refresh_docs.py --check    # only list what is stale (exit 1 if anything is)
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests import docexec  # noqa: E402
from tests.test_docs import DOCS, PRELUDE, docs_env  # noqa: E402
from tests.test_results_docs import run_blocks  # noqa: E402

WATCH = Path(__file__).resolve().parent.parent / "docs" / "watch.md"


def sweep_outputs(check: bool, page: Path = WATCH) -> int:
    """The seed sweep's shown outputs (docs/watch.md, or ``page``) against a run of its scripts: how many are stale,
    each rewritten unless ``check``."""
    text, stale = page.read_text(), 0
    with tempfile.TemporaryDirectory(prefix="hoststate-sweep-") as tmp:
        runs = run_blocks(Path(tmp), text)
    for script, shown, proc in runs:
        if proc.stdout == shown:
            continue
        stale += 1
        print(f"{page.name}: {script.splitlines()[0]}")
        block = f"{script}```\n\n```\n{shown}```"
        assert text.count(block) == 1, "the script and its output are one block pair in docs/watch.md"
        text = text.replace(block, f"{script}```\n\n```\n{proc.stdout}```")
    if not check:
        page.write_text(text)
    return stale


def main(argv: list[str]) -> int:
    check = "--check" in argv
    with tempfile.TemporaryDirectory(prefix="hoststate-docs-") as tmp:
        work, lib = Path(tmp) / "work", Path(tmp) / "lib"
        work.mkdir()
        lib.mkdir()
        env = docs_env(Path(tmp) / "bin", lib)
        cmds = docexec.run(DOCS, work, env=env, prelude=PRELUDE)  # as tests/test_docs.py runs them
    stale = 0
    for doc in DOCS:
        lines = doc.read_text().splitlines()
        mine = [c for c in cmds if c.doc == doc.name and c.shown is not None]
        for c in reversed(mine):  # from the end: earlier line numbers stay valid
            if docexec.matches(c.shown, c.actual):
                continue
            stale += 1
            print(f"{doc.name}:{c.line}: {c.text.splitlines()[0][:100]}")
            lines[c.out_start:c.out_end] = docexec.refreshed(c.shown, c.actual)
        if not check:
            doc.write_text("\n".join(lines) + "\n")
    stale += sweep_outputs(check)
    print(f"{stale} stale output(s)" + ("" if check else " rewritten"))
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
