"""Text primitives of every report: width in terminal columns, escaping, fitting a line, colour, tables, Markdown.

Width is what a terminal shows, not ``len``: an East Asian wide or fullwidth character (a Korean model path, a
Chinese host name) takes two columns, a combining mark none (unicodedata.east_asian_width and .combining), so a
line promised to fit 120 columns fits 120 on screen. Values come from other people's processes and files: every
control character (newline, ESC, CSI, OSC, C1, bidi overrides) and every invisible one (zero-width, fillers,
spaces other than U+0020, private use, unassigned) is shown as an escape by :func:`safe`, so a value can neither
start a line of its own ("verdict: clean"), pass for another key, nor drive the terminal.

Shortening keeps meaning: a line is built from parts, and only values (:class:`Elide`) are cut, in their middle;
the words between them (verbs, arrows, ``differs from``) are never cut. Pure functions returning strings.
"""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Sequence
from typing import Any

from hoststate.records import Frozen
from hoststate.snapshot import jsonable

#: The columns every report keeps to.
WIDTH = 120
#: The one colour table of every report (diff, guard, check, show, fleet), by severity or verdict word.
COLOURS = {"invalidating": "\x1b[1;31m", "refused": "\x1b[1;31m", "warning": "\x1b[33m", "info": "\x1b[36m",
           "ignore": "\x1b[2m", "accepted": "\x1b[35m", "ok": "\x1b[32m"}
RESET = "\x1b[0m"
ELLIPSIS = "..."

# -- escaping ----------------------------------------------------------------------------------------------------

#: Unicode categories never shown as themselves: controls (Cc), format characters (Cf: zero-width spaces and
#: joiners, bidirectional marks and overrides, soft hyphen, tags), line/paragraph separators (Zl, Zp), spaces
#: other than U+0020 (Zs), surrogates (Cs), private use (Co) and unassigned code points (Cn). A key holding one
#: could look identical to a real key, or drive the terminal.
_HIDDEN_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Zs", "Cs", "Co", "Cn"})
#: Letters and marks that render as nothing (fillers, variation selectors, invisible vowels, the blank braille
#: pattern): visible categories, but as invisible as a zero-width space.
_FILLERS = frozenset(
    [0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x2800, 0x3164, 0xFFA0, *range(0x180B, 0x1810),
     *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)]
)
#: Every character outside printable ASCII is looked at (then kept unless hidden): ASCII text costs one scan.
_SUSPECT = re.compile("[^\x20-\x7e]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\x1b": "\\e"}


def _hidden(char: str) -> bool:
    import unicodedata  # here: ASCII text never asks, and the module's import is 1 ms of every report

    return char != " " and (ord(char) in _FILLERS or unicodedata.category(char) in _HIDDEN_CATEGORIES)


def _escape_char(match: re.Match[str]) -> str:
    char = match.group()
    if char in _NAMED:
        return _NAMED[char]
    if not _hidden(char):
        return char
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def safe(text: str) -> str:
    """``text`` with every control or invisible character written as a visible escape (``\\n``, ``\\e``, ``\\x9b``,
    ``\\u200b``, ``\\u3164``, ``\\U000e0041``): the one escaping of snapshot text in every report."""
    return _SUSPECT.sub(_escape_char, text)


# -- columns -----------------------------------------------------------------------------------------------------


def char_cells(char: str) -> int:
    """Columns one character takes on a terminal: 2 for East Asian wide and fullwidth, 0 for a combining mark
    (and a Hangul medial vowel or final consonant of a decomposed syllable), else 1."""
    if char < "\u0300":
        return 1
    import unicodedata

    if unicodedata.combining(char) or unicodedata.category(char) in ("Mn", "Me") or "\u1160" <= char <= "\u11ff":
        return 0
    return 2 if unicodedata.east_asian_width(char) in ("W", "F") else 1


def cells(text: str) -> int:
    """Columns ``text`` takes on a terminal (``len`` for ASCII)."""
    return len(text) if text.isascii() else sum(map(char_cells, text))


def _head(text: str, columns: int) -> str:
    """The longest start of ``text`` within ``columns``."""
    used = 0
    for i, char in enumerate(text):
        used += char_cells(char)
        if used > columns:
            return text[:i]
    return text


def _tail(text: str, columns: int) -> str:
    """The longest end of ``text`` within ``columns``."""
    used = 0
    for i in range(len(text) - 1, -1, -1):
        used += char_cells(text[i])
        if used > columns:
            return text[i + 1:]
    return text


def clip(text: str, width: int) -> str:
    """``text`` cut in the middle to ``width`` columns (both ends stay: a path's leaf, a version's tail)."""
    if cells(text) <= width:
        return text
    if width <= len(ELLIPSIS) + 2:
        return _head(text, width)
    keep = width - len(ELLIPSIS)
    return _head(text, (keep + 1) // 2) + ELLIPSIS + _tail(text, keep - (keep + 1) // 2)


_WHITESPACE = re.compile(r"([\t\n\x0b\x0c\r ]+)")


def wrap(text: str, width: int, initial: str = "", subsequent: str = "", *, break_long: bool = True) -> list[str]:
    """``text`` broken at spaces into lines of at most ``width`` columns, as textwrap.wrap (without hyphen breaks)
    breaks it, counted in columns: a word longer than a line is broken only with ``break_long``."""
    chunks = [c for c in _WHITESPACE.split(text.expandtabs()) if c]
    chunks = [" " * len(c) if not c.strip() else c for c in chunks]
    chunks.reverse()
    lines: list[str] = []
    while chunks:
        indent = subsequent if lines else initial
        room = width - cells(indent)
        if not chunks[-1].strip() and lines:
            chunks.pop()
            continue
        line: list[str] = []
        used = 0
        while chunks and used + cells(chunks[-1]) <= room:
            used += cells(chunks[-1])
            line.append(chunks.pop())
        if chunks and cells(chunks[-1]) > room:
            if break_long:
                piece = _head(chunks[-1], 1 if room < 1 else room - used)
                if not piece and not line:  # a wide character wider than the line: it goes on one of its own
                    piece = chunks[-1][0]
                line.append(piece)  # possibly empty: as textwrap, a space before it then stays on the line
                chunks[-1] = chunks[-1][len(piece):]
            elif not line:
                line.append(chunks.pop())
        if line and not line[-1].strip():
            line.pop()
        if line:
            lines.append(indent + "".join(line))
    return lines


def paint(text: str, tone: str, color: bool) -> str:
    """``text`` in the colour of ``tone`` (a severity or verdict word) when ``color`` is on."""
    return f"{COLOURS[tone]}{text}{RESET}" if color and tone in COLOURS else text


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


# -- fitting a line from parts -----------------------------------------------------------------------------------


class Elide(Frozen):
    """A part of a line that may be shortened in its middle (a value); every other part is kept whole."""

    text: str

    def __init__(self, text: str) -> None:
        self.__dict__["text"] = text


class Name(Frozen):
    """A part of a line never cut nor broken across lines (a file name with its host); other parts wrap at spaces."""

    text: str

    def __init__(self, text: str) -> None:
        self.__dict__["text"] = text


Part = str | Elide | Name
#: The shortest a value is elided to (keeps its head and tail readable).
_MIN_VALUE = 15
#: Stands for a space inside a Name while wrapping (a control character: escaped text never holds one).
_GLUE = "\x1f"


def _elide(texts: list[str], elidable: list[int], over: int, floor: int) -> int:
    """Shorten ``texts[i]`` for i in ``elidable``, longest first, down to ``floor`` columns each, until ``over``
    columns are gone; the columns still over."""
    while over > 0 and elidable:
        i = max(elidable, key=lambda k: cells(texts[k]))
        now = cells(texts[i])
        room = now - floor
        if room <= 0:
            break
        texts[i] = clip(texts[i], now - min(room, over))
        over -= now - cells(texts[i])
    return over


def _texts(parts: Sequence[Part]) -> list[str]:
    return [p.text.replace(" ", _GLUE) if isinstance(p, Name) else p.text if isinstance(p, Elide) else p
            for p in parts]


def fit(parts: Sequence[Part], width: int = WIDTH, indent: int = 4) -> list[str]:
    """One line of at most ``width`` columns from ``parts``: names and key words (plain strings) are never cut;
    values (:class:`Elide`) are shortened in the middle, longest first, down to 15 columns each. When the names
    alone do not fit, the line is wrapped at spaces onto lines indented by ``indent``: nothing is hidden."""
    texts = _texts(parts)
    over = sum(map(cells, texts)) - width
    elidable = [i for i, p in enumerate(parts) if isinstance(p, Elide)]
    if over > sum(max(0, cells(texts[i]) - _MIN_VALUE) for i in elidable):
        elidable = []  # eliding cannot make it one line: wrap it whole instead
    _elide(texts, elidable, over, _MIN_VALUE)
    line = "".join(texts)
    if cells(line) <= width:
        return [line.replace(_GLUE, " ")]
    lead = len(line) - len(line.lstrip(" "))
    # A word (a name glued with its spaces) is broken only when it cannot fit on a line of its own.
    too_long = any(cells(word) > width - max(indent, lead) for word in line[lead:].split(" "))
    wrapped = wrap(line[lead:], width, " " * lead, " " * max(indent, lead), break_long=too_long) or [""]
    return [w.replace(_GLUE, " ") for w in wrapped]


#: The shortest a value is elided to when a line must stay one line (a summary line).
_MIN_SHORT = 9


def one_line(parts: Sequence[Part], width: int) -> str:
    """``parts`` as one line of at most ``width`` columns: values shortened in their middle (down to 15 columns,
    then to 9), the words between them kept; only a line of words alone too long is cut in its middle."""
    texts = _texts(parts)
    elidable = [i for i, p in enumerate(parts) if isinstance(p, Elide)]
    over = _elide(texts, elidable, sum(map(cells, texts)) - width, _MIN_VALUE)
    _elide(texts, elidable, over, _MIN_SHORT)
    return clip("".join(texts), width).replace(_GLUE, " ")


#: A word longer than this many columns is taken for a value (a digest, a path, a URL) by :func:`message_parts`.
_WORD_MAX = 15
_TOKENS = re.compile(r"(\S+)")


def message_parts(text: str) -> list[Part]:
    """A sentence as parts for :func:`fit`: each token longer than a word (a digest, a path, a URL) is a value
    that may be shortened, the words around it ("differs from content") never are."""
    return [Elide(t) if i % 2 and cells(t) > _WORD_MAX else t for i, t in enumerate(_TOKENS.split(text)) if t]


def plain(parts: Sequence[Part]) -> str:
    """``parts`` joined, nothing shortened."""
    return "".join(p if isinstance(p, str) else p.text for p in parts)


def table(data: Any, *keys: str) -> dict[str, Any]:
    """The table at ``keys`` below ``data``, or an empty one when a level is missing or not a table: a hand-edited
    snapshot may hold anything anywhere, and a report must still render (check, show and fleet use this one)."""
    for key in keys:
        data = data.get(key) if isinstance(data, dict) else None
    return data if isinstance(data, dict) else {}


# -- values ------------------------------------------------------------------------------------------------------


def scalar(value: Any) -> str:
    """A bare value as TOML writes it: ``true``/``false``, numbers and other scalars as text (strings unquoted)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    return str(value)


def show_value(value: Any, width: int | None = WIDTH) -> str:
    """A value as a reader expects it in TOML: strings quoted, lists bracketed, absent as ``(absent)``; escaped."""
    if value is None:
        text = "(absent)"
    elif isinstance(value, str) and value.startswith("<unreadable"):
        text = value
    elif isinstance(value, (list, dict)):
        text = json.dumps(jsonable(value), ensure_ascii=False, separators=(", ", ": "))
    elif isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
    else:
        text = scalar(value)
    text = safe(text)
    return text if width is None else clip(text, width)


#: An unreadable marker as hoststate.diff writes it: ``<unreadable (class): reason [what failed]>`` (coverage.entry).
_MARKER = re.compile(r"(?P<head><unreadable \([a-z]+\): )(?P<reason>.*?)(?: \[(?P<key>[^\]]*)\])?"
                     r"(?P<tail>(?: \(not a declared source\))?>)", re.DOTALL)


def value_parts(value: Any) -> list[Part]:
    """A value as parts for :func:`fit`: one elidable value; an unreadable marker keeps its class and its reason
    (``Connection refused``, ``cannot honour --root``) whole and shortens only what failed (a URL, a path)."""
    text = show_value(value, None)
    marker = _MARKER.fullmatch(text) if text.startswith("<unreadable") else None
    if marker is None:
        return [Elide(text)]
    parts: list[Part] = [marker["head"], marker["reason"]]
    if marker["key"] is not None:
        parts += [" [", Elide(marker["key"]), "]"]
    return [*parts, marker["tail"]]


# -- Markdown ----------------------------------------------------------------------------------------------------

_MD_PROSE = re.compile(r"([\\`*_\[\]<|])")


def md_text(text: str) -> str:
    """Prose for a Markdown cell or bullet: controls escaped, Markdown and HTML syntax inert, pipes escaped."""
    return _MD_PROSE.sub(r"\\\1", safe(text))


def md_code(text: str) -> str:
    """A code span that holds any text: controls escaped, pipes escaped for tables, fence longer than any run."""
    text = safe(text).replace("|", "\\|")
    runs = [len(m) for m in re.findall(r"`+", text)]
    fence = "`" * (max(runs, default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or runs else ""
    return f"{fence}{pad}{text}{pad}{fence}"



def md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table's lines, cells as given (each already made safe with md_text or md_code)."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]
