"""Dotted paths into a snapshot (``dsa.devices.dsa0.wqs."wq0.0".state``) and the walk over its leaves.

A leaf is any value that is not a table: scalars and lists. Paths are tuples of keys inside the
library and TOML-style dotted strings (keys quoted when not bare) in reports and policies.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

_BARE = re.compile(r"[A-Za-z0-9_-]+")

Path = tuple[str, ...]


def quote(key: str) -> str:
    """A key as TOML writes it in a dotted path: bare when it can be, else double-quoted."""
    if _BARE.fullmatch(key):  # fullmatch: "$" would let a key end in a newline
        return key
    return '"' + key.replace("\\", "\\\\").replace('"', '\\"') + '"'


#: A path whose keys are all bare (no key holds a dot when the dots number one less than the keys).
_BARE_PATH = re.compile(r"[A-Za-z0-9_-]+(?:\.[A-Za-z0-9_-]+)*")


def format_path(parts: Path) -> str:
    text = ".".join(parts)
    if _BARE_PATH.fullmatch(text) and text.count(".") == len(parts) - 1:  # one match instead of one per key
        return text
    return ".".join(quote(p) for p in parts)


def split_path(text: str) -> Path:
    """Inverse of format_path; raises ValueError on an unbalanced quote or an empty key."""
    if '"' not in text:  # no quoted key: the keys between the dots (a report splits one path per finding)
        keys = tuple(text.split(".") if text.isprintable() and " " not in text  # nothing to strip
                     else (key.strip() for key in text.split(".")))
        if all(keys):
            return keys
        raise ValueError(f"empty or badly quoted key in path {text!r}")
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


class PatternIndex:
    """Path patterns (``*``, ``**``, ``ab*`` keys) filed by their leading literal keys, so that the patterns that
    could match a path are found without trying every one: a pattern is filed under its literal keys up to the
    first wildcard, and a glob there under its literal first piece. With ``whole`` (a pattern matches a whole path,
    as a policy rule does) the patterns filed at one place are split again by their last key, which the path's
    last key must take (``vllm.**.args.port`` is tried only on paths ending in ``port``); without it (a region
    that hides everything below it) they are not. ``candidates`` gives a superset of the patterns that match; the
    caller checks each exactly. A lookup costs the path's depth x the number of distinct glob prefix lengths, plus
    the candidates: time per path does not grow with the number of patterns that cannot match it."""

    __slots__ = ("_whole", "_here", "_last", "_globs", "_lit")

    def __init__(self, whole: bool = False) -> None:
        self._whole = whole
        self._here: list[Any] = []
        # made on the first item filed there: most of a policy's 3,000 nodes have neither
        self._last: Prefixed | None = None
        self._globs: Prefixed | None = None
        self._lit: dict[str, PatternIndex] = {}

    def add(self, parts: Path, item: Any) -> None:
        node = self
        for part in parts:
            if "*" not in part:
                node = node._lit.setdefault(part, PatternIndex(self._whole))
                continue
            if part != "**" and part.split("*", 1)[0]:
                if node._globs is None:
                    node._globs = Prefixed()
                node._globs.add(part.split("*", 1)[0], item)
                return
            break
        last = parts[-1] if parts else "**"
        if self._whole and last != "**" and (last.split("*", 1)[0] if "*" in last else last):
            if node._last is None:
                node._last = Prefixed()
            node._last.add(last.split("*", 1)[0] if "*" in last else last, item, exact="*" not in last)
        else:
            node._here.append(item)

    def candidates(self, path: Path) -> Iterator[Any]:
        node = self
        end = path[-1] if path else ""
        for key in path:
            yield from node._here
            if node._last is not None:
                yield from node._last.get(end)
            if node._globs is not None:
                yield from node._globs.get(key)
            child = node._lit.get(key)
            if child is None:
                return
            node = child
        yield from node._here
        if node._last is not None:
            yield from node._last.get(end)


class Prefixed:
    """Items filed by a literal key or a key prefix: ``get`` gives those whose key is ``key`` or a prefix of it.

    The prefixes a key starts with are the longest one and the prefixes of that one: one regular-expression match
    (alternatives longest first) finds the longest, and each prefix keeps the list of those it starts with."""

    __slots__ = ("_chains", "_exact", "_longest", "_prefixed", "_starts")

    def __init__(self) -> None:
        self._exact: dict[str, list[Any]] = {}
        self._prefixed: dict[str, list[Any]] = {}
        self._starts: tuple[str, ...] = ()  # every prefix filed: one startswith call rules them all out
        self._longest: re.Pattern[str] | None = None
        self._chains: dict[str, tuple[list[Any], ...]] = {}

    def add(self, key: str, item: Any, exact: bool = False) -> None:
        if exact:
            self._exact.setdefault(key, []).append(item)
        else:
            self._prefixed.setdefault(key, []).append(item)
            self._longest = None
            if key not in self._starts:
                self._starts += (key,)

    def get(self, key: str) -> Iterator[Any]:
        yield from self._exact.get(key, ())
        if key.startswith(self._starts):
            if self._longest is None:
                self._index()
            match = self._longest.match(key)  # type: ignore[union-attr]
            for items in self._chains[match.group()]:  # type: ignore[union-attr]
                yield from items

    def _index(self) -> None:
        by_length = sorted(self._prefixed, key=len)
        self._longest = re.compile("|".join(map(re.escape, reversed(by_length))))
        self._chains = {p: tuple(self._prefixed[q] for q in by_length if p.startswith(q)) for p in by_length}
