"""Rewrite the stored digest of every bundled snapshot (fixtures/*/*.toml) to the one this version computes.

    python scripts/refresh_fixture_digests.py        # prints each file whose digest changed

The digest covers the values the default policy rates invalidating, so a change to that policy (or to
position keys) changes it. Only the ``digest = ...`` line of ``[hoststate]`` is rewritten; the rest of each
file stays byte for byte, and the write is atomic (hoststate.output).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hoststate.digest import digest  # noqa: E402
from hoststate.output import write_output  # noqa: E402
from hoststate.snapshot import loads  # noqa: E402

_LINE = re.compile(r'^digest = "sha256:[0-9a-f]{64}"$', re.M)


def main() -> int:
    for path in sorted((REPO / "fixtures").glob("*/*.toml")):
        text = path.read_text(encoding="utf-8")
        if not text.startswith("[hoststate]"):
            continue
        fresh = digest(loads(text))
        new, count = _LINE.subn(f'digest = "{fresh}"', text, count=1)
        if count != 1:
            print(f"{path}: no digest line", file=sys.stderr)
            return 1
        if new != text:
            write_output(str(path), new, force=True)
            print(f"{path.relative_to(REPO)}: {fresh}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
