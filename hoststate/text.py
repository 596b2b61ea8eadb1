"""Text from outside (argv, the environment, file names, logs) as strings a snapshot can hold.

A snapshot is UTF-8 TOML, so a string must never carry a surrogate. One representation, everywhere: a byte that
is not UTF-8 is written ``\\xNN`` (what hoststate.io.decode makes of a file's bytes, and what Python's
``surrogateescape`` turns into U+DC80..U+DCFF in argv, the environment and file names), and a lone surrogate that
came as such (``'\\udcff'`` in a logged repr, ``"\\ud800"`` in JSON) is written ``\\uNNNN``. A backslash already in
the text is kept as it is, so ``\\xff`` may also have been typed; a digest only needs the same input to give the
same string.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape's stand-in for the byte code - 0xDC00
        return f"\\x{code - 0xDC00:02x}"
    return f"\\u{code:04x}"


def clean(text: str) -> str:
    """``text`` with every surrogate escaped as above: always encodable as UTF-8."""
    return _SURROGATE.sub(_escape, text)


#: Deepest nesting kept in a snapshot, counted from its top: a value parsed from another user's argv or log (a JSON
#: option nested hundreds deep) is cut here, below the 32 levels a snapshot may hold (hoststate.snapshot.MAX_DEPTH)
#: and far below the recursion limit of the TOML writer. hoststate's own tables nest at most about 8 levels.
MAX_NESTING = 24
NESTED_TOO_DEEPLY = f"<nested deeper than {MAX_NESTING} levels>"


def clean_all(value: Any, depth: int = 0) -> Any:
    """``value`` with every string in it cleaned (table keys too), tuples as lists, a table or list deeper than
    MAX_NESTING as NESTED_TOO_DEEPLY, other values as they are."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, list | tuple | Mapping) and depth >= MAX_NESTING:
        return NESTED_TOO_DEEPLY
    if isinstance(value, list | tuple):
        return [clean_all(v, depth + 1) for v in value]
    if isinstance(value, Mapping):
        return {clean(k) if isinstance(k, str) else k: clean_all(v, depth + 1) for k, v in value.items()}
    return value
