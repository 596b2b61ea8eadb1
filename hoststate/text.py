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


def clean_all(value: Any) -> Any:
    """``value`` with every string in it cleaned (table keys too), tuples as lists, other values as they are.
    Recursive: what reaches it nests a few levels (collected values are bounded; hoststate.snapshot.MAX_DEPTH)."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, list | tuple):
        return [clean_all(v) for v in value]
    if isinstance(value, Mapping):
        return {clean(k) if isinstance(k, str) else k: clean_all(v) for k, v in value.items()}
    return value
