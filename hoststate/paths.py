"""Dotted paths into a snapshot (``dsa.devices.dsa0.wqs."wq0.0".state``) and the walk over its leaves.

A leaf is any value that is not a table: scalars and lists. Paths are tuples of keys inside the
library and TOML-style dotted strings (keys quoted when not bare) in reports and policies.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

_BARE = re.compile(r"^[A-Za-z0-9_-]+$")

Path = tuple[str, ...]


def quote(key: str) -> str:
    """A key as TOML writes it in a dotted path: bare when it can be, else double-quoted."""
    if _BARE.match(key):
        return key
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


def format_path(parts: Path) -> str:
    return ".".join(quote(p) for p in parts)


def split_path(text: str) -> Path:
    """Inverse of format_path; raises ValueError on an unbalanced quote or an empty key."""
    parts: list[str] = []
    i, n = 0, len(text)
    while True:
        if i < n and text[i] == '"':
            j, buf = i + 1, []
            while j < n and text[j] != '"':
                if text[j] == "\\" and j + 1 < n:
                    j += 1
                buf.append(text[j])
                j += 1
            if j >= n:
                raise ValueError(f"unbalanced quote in path {text!r}")
            parts.append("".join(buf))
            i = j + 1
            if i < n and text[i] != ".":
                raise ValueError(f"expected '.' after quoted key in path {text!r}")
        else:
            j = text.find(".", i)
            j = n if j < 0 else j
            key = text[i:j].strip()
            if not key or '"' in key:
                raise ValueError(f"empty or badly quoted key in path {text!r}")
            parts.append(key)
            i = j
        if i >= n:
            return tuple(parts)
        i += 1  # the '.'


def leaves(data: Mapping[str, Any], prefix: Path = ()) -> Iterator[tuple[Path, Any]]:
    """Every (path, value) below ``data`` whose value is not a table, in key order."""
    for key in sorted(data):
        value = data[key]
        path = (*prefix, key)
        if isinstance(value, Mapping):
            yield from leaves(value, path)
        else:
            yield path, value


def get(data: Mapping[str, Any], parts: Path, default: Any = None) -> Any:
    """The value at ``parts``, or ``default`` when any key on the way is missing."""
    node: Any = data
    for key in parts:
        if not isinstance(node, Mapping) or key not in node:
            return default
        node = node[key]
    return node


def glob_key(pieces: tuple[str, ...], key: str) -> bool:
    """Whether ``key`` matches the glob whose literal pieces (split at '*') are ``pieces``; greedy leftmost search,
    linear in the key (a '*' glob needs no backtracking)."""
    first, last = pieces[0], pieces[-1]
    if len(key) < len(first) + len(last) or not key.startswith(first) or not key.endswith(last):
        return False
    pos, stop = len(first), len(key) - len(last)
    for piece in pieces[1:-1]:
        found = key.find(piece, pos, stop)
        if found < 0:
            return False
        pos = found + len(piece)
    return True
