"""gitleaks' provider rules (hoststate/gitleaks_rules.toml), translated to Python and run as redaction rules.

The table holds each rule as gitleaks publishes it: a Go RE2 regex, the keywords one of which the lowercased text
must contain before the regex runs (gitleaks' own prefilter; the text is case-folded, so ``ſ`` and ``K``, which
``(?i)`` matches as ``s`` and ``k``, meet the keyword too), and which group is the secret. A rule's secret is its
``secret_group``, else its first group that matched, else the whole match (gitleaks' detect.go); a rule whose
groups are all named (jwt-base64's header markers), or whose first group is repeated (the UUID pieces of
microsoft-teams-webhook), redacts the whole match. Entropy thresholds are not applied:
a value that only looks like a token is redacted too, since a leaked secret costs more than a hidden lookalike.

RE2 and Python's ``re`` differ; ``to_python`` translates what the table uses, and a rule it cannot translate fails
the tests, never the snapshot:

- a flag group in mid-pattern (``SG\\.(?i)[a-z]``), which Python refuses, becomes a scoped group that ends where
  the enclosing group ends, closed and reopened around each ``|`` of that group, as RE2 scopes it;
- ``\\z`` (end of text) is Python's ``\\Z``, and in a rule's final terminator it also takes the end of a quoted
  value, as gitleaks' generated rules do (``(?:\\s|\\z)`` of curl-auth-user: a command quoted in JSON ends at
  its quote); POSIX classes (``[[:alnum:]]``) are spelled out;
- an open repetition (``*``, ``+``, ``{n,}``) takes at most MAX_REPEAT characters, so a failed start costs a
  bounded scan where Python's re would backtrack over the whole rest of the text;
- the lazy ``[\\w.-]{0,50}?`` that starts the context-word rules only widens the match to the left, never
  decides whether there is one, and costs 50 steps at every position: it is dropped;
- a rule that starts with a word and up to N more lines of anything (``\\bcurl\\b(?:.*|.*(?:[\\r\\n]{1,2}.*){1,5})``,
  which backtracks quadratically in Python) runs as its remainder, kept where the word occurs within 2N ``\\n``
  before it (each ``[\\r\\n]{1,2}`` holds at most two; a ``\\r`` is any character to ``.``).

RE2's ``\\w``, ``\\d``, ``\\s`` and ``\\b`` are ASCII; Python's Unicode ones match a superset, so a translated
rule never matches less. Every scan is linear in its input (RE2 is; each translated pattern is bounded, and the
context rules use a sorted index, not a pattern, to look back).
"""

from __future__ import annotations

import bisect
import functools
import os
import re
import threading
from collections.abc import Sequence
from typing import NamedTuple

TABLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gitleaks_rules.toml")  # no pathlib: 1.4 ms a snap

#: POSIX classes RE2 accepts inside brackets, spelled for Python.
POSIX: dict[str, str] = {
    "alnum": "0-9A-Za-z", "alpha": "A-Za-z", "digit": "0-9", "xdigit": "0-9A-Fa-f", "upper": "A-Z",
    "lower": "a-z", "space": r"\t\n\v\f\r ", "word": r"\w", "punct": r"!-/:-@\[-`{-~", "blank": r" \t",
    "cntrl": r"\x00-\x1f\x7f", "print": r" -~", "graph": r"!-~", "ascii": r"\x00-\x7f",
}
_MID_FLAGS = re.compile(r"\(\?([imsU-]+)\)")
_OPEN_REPEAT = re.compile(r"\{(\d+),\}")
#: The most an open repetition (``*``, ``+``, ``{n,}``) takes: RE2 scans in linear time, Python's re backtracks,
#: and an open repetition that fails at every start (``<add key="Password" value="`` repeated) is quadratic;
#: bounded, a start costs at most this much. No token is this long.
MAX_REPEAT = 4096
#: The head of the context-word rules (cmd/generate/config/utils.go ``generateSemiGenericRegex``).
_LAZY_PREFIX = r"[\w.-]{0,50}?"
#: ``\bWORD\b`` then the rest of its line or of up to N more lines (curl-auth-header, curl-auth-user).
_NEAR_WORD = re.compile(
    r"\\b(?P<word>\w+)\\b\(\?:\.\*\??\|\.\*\??\(\?:\[\\r\\n\]\{1,2\}\.\*\??\)\{1,(?P<lines>\d+)\}\)"
)


def to_python(regex: str) -> str:
    """A Go RE2 regex as Python's re spells it (see the module docstring for what changes)."""
    out: list[str] = []
    scopes: list[list[str]] = [[]]  # per open group: the flags opened in mid-pattern inside it
    i, n = 0, len(regex)
    while i < n:
        c = regex[i]
        if c == "\\":
            out.append(r"\Z" if regex.startswith(r"\z", i) else regex[i:i + 2])
            i += 2
        elif c == "[":
            i = _bracket(regex, i, out)
        elif c in "*+" or (c == "{" and (q := _OPEN_REPEAT.match(regex, i))):
            least = ("0" if c == "*" else "1") if c in "*+" else q.group(1)
            out.append(f"{{{least},{max(int(least), MAX_REPEAT)}}}")
            i = i + 1 if c in "*+" else q.end()
        elif c == "(" and (m := _MID_FLAGS.match(regex, i)) and i > 0:
            out.append(f"(?{m.group(1)}:")
            scopes[-1].append(m.group(1))
            i = m.end()
        elif c == "(":
            scopes.append([])
            out.append(c)
            i += 1
        elif c == "|":
            flags = scopes[-1]
            out.append(")" * len(flags) + "|" + "".join(f"(?{f}:" for f in flags))
            i += 1
        elif c == ")":
            out.append(")" * len(scopes.pop()) + ")")
            i += 1
        else:
            out.append(c)
            i += 1
    out.append(")" * len(scopes[0]))
    return "".join(out)


def _bracket(regex: str, i: int, out: list[str]) -> int:
    """Copy the character class starting at ``regex[i]`` ('['), POSIX classes spelled out; returns its end."""
    out.append("[")
    i += 1
    if regex.startswith("^", i):
        out.append("^")
        i += 1
    if regex.startswith("]", i):  # a ']' first is a literal in RE2
        out.append(r"\]")
        i += 1
    while i < len(regex) and regex[i] != "]":
        if regex[i] == "\\":
            out.append(regex[i:i + 2])
            i += 2
        elif regex.startswith("[:", i) and (end := regex.find(":]", i + 2)) > 0 and regex[i + 2:end] in POSIX:
            out.append(POSIX[regex[i + 2:end]])
            i = end + 2
        elif regex[i] == "[":
            out.append(r"\[")  # a literal '[' (Python would warn of a nested set)
            i += 1
        else:
            out.append(regex[i])
            i += 1
    out.append("]")
    return i + 1


def _drop_lazy_prefix(regex: str) -> str:
    """``(?i)[\\w.-]{0,50}?(?:kw)...`` -> ``(?i)(?:kw)...`` (also the doubled form of cisco-meraki, cohere...)."""
    head = "(?i)" if regex.startswith("(?i)") else ""
    body = regex[len(head):]
    if body.startswith(_LAZY_PREFIX):
        body = body[len(_LAZY_PREFIX):]
        if body.startswith("(?i:" + _LAZY_PREFIX):
            body = "(?i:" + body[len("(?i:" + _LAZY_PREFIX):]
    return head + body


class Rule(NamedTuple):
    """One gitleaks rule as hoststate runs it."""

    id: str
    regex: str  # as published (Go)
    pattern: re.Pattern[str]  # translated; for a near-word rule, its remainder
    keywords: tuple[str, ...]
    secret_group: int | None = None
    #: The whole match is the secret (groups that only label or repeat a piece).
    whole: bool = False
    #: For a rule that starts with a word and N lines (curl): the word's pattern and the most line breaks.
    near: re.Pattern[str] | None = None
    near_breaks: int = 0

    def secret_span(self, m: re.Match[str]) -> tuple[int, int]:
        """Where the secret of a match is (gitleaks' choice of group, see the module docstring)."""
        if self.secret_group is not None:
            return m.span(self.secret_group) if m.group(self.secret_group) is not None else m.span()
        if self.whole:
            return m.span()
        for g in range(1, self.pattern.groups + 1):
            if m.group(g):
                return m.span(g)
        return m.span()

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The secrets this rule finds in ``text``."""
        if self.near is None:
            return [self.secret_span(m) for m in self.pattern.finditer(text)]
        words = [m.end() for m in self.near.finditer(text)]
        if not words:
            return []
        breaks = [m.start() for m in re.finditer("\n", text)]  # '.' takes a '\r', only '\n' ends a line
        found = []
        for m in self.pattern.finditer(text):
            w = bisect.bisect_right(words, m.start()) - 1
            if w < 0:
                continue
            between = bisect.bisect_left(breaks, m.start()) - bisect.bisect_left(breaks, words[w])
            if between <= self.near_breaks:
                found.append(self.secret_span(m))
        return found


def compile_rule(row: dict) -> Rule:
    """A table row as a Rule (ValueError, from re, when its regex cannot be translated)."""
    regex = row["regex"]
    near, breaks, source = None, 0, regex
    m = _NEAR_WORD.match(regex)
    if m:
        near = re.compile(rf"\b{m.group('word')}\b")
        breaks = 2 * int(m.group("lines"))  # each of the N line breaks ([\r\n]{1,2}) holds at most two '\n'
        source = regex[m.end():]
    pattern = re.compile(to_python(_terminator_as_lookahead(_drop_lazy_prefix(source))))
    named = set(pattern.groupindex.values())
    whole = bool(named) and len(named) == pattern.groups or _first_group_repeats(source)
    return Rule(row["id"], regex, pattern, keywords(row), row.get("secret_group"), whole, near, breaks)


#: Where gitleaks' generated rules take a value to end (besides white space and the end of the text): a quote, a
#: ';', an escaped line break. A terminator that ends a value only at white space or the end of the text
#: (``(?:\\s|\\z)`` of curl-auth-user) ends it here too, so a command quoted in a JSON string or a repr
#: (``"curl -u 'bob:pw'"``) is read as the command is.
_END_OF_VALUE = r"""[\x60'"\s;]|\\[nr]|"""


def _terminator_as_lookahead(regex: str) -> str:
    """A regex that ends in a non-capturing group (the terminator ``(?:[\\x60'"\\s;]|\\\\[nr]|$)`` most rules end
    with) with that group as a lookahead: it still decides whether there is a match, but is no part of it, so a
    rule whose secret is its whole match (sentry-org-token) never takes the quote that closes a JSON string. A
    terminator that takes the end of the text (``\\z``) also takes the end of a quoted value (_END_OF_VALUE)."""
    if not regex.endswith(")"):
        return regex
    depth, start, i = 0, -1, 0
    while i < len(regex):
        c = regex[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            i = _bracket(regex, i, [])
            continue
        if c == "(":
            if depth == 0:
                start = i
            depth += 1
        elif c == ")":
            depth -= 1
        i += 1
    if start > 0 and regex.startswith("(?:", start) and re.compile(to_python(regex[start:])).groups == 0:
        ends_text = r"\z" in regex[start:]
        return regex[:start] + "(?=" + (_END_OF_VALUE if ends_text else "") + regex[start + 3:]
    return regex  # no final group, or one that holds the secret (kubernetes-secret-yaml is one group)


def keywords(row: dict) -> tuple[str, ...]:
    """The row's keywords and hints, case-folded: one of them in the case-folded text lets the rule run."""
    return tuple(k.casefold() for k in (*row.get("keywords", ()), *row.get("hints", ())))


_QUANTIFIER = re.compile(r"[*+?{]")


def _first_group_repeats(regex: str) -> bool:
    """True when the first capturing group of ``regex`` is followed by a quantifier (``([a-z0-9]{4}-){3}``)."""
    depth, first, i = 0, None, 0
    while i < len(regex):
        c = regex[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            out: list[str] = []
            i = _bracket(regex, i, out)
            continue
        if c == "(":
            depth += 1
            if first is None and not regex.startswith("(?", i):
                first = depth
        elif c == ")":
            if depth == first:
                return bool(_QUANTIFIER.match(regex, i + 1))
            depth -= 1
        i += 1
    return False


@functools.cache
def table() -> dict:
    """The rule table as written (rows under ``rule``; ``source`` and ``commit`` name the gitleaks version), parsed
    once per content: every snap redacts with it, and its JSON copy beside the bytecode (hoststate.parsed) is read
    in C where the TOML would be parsed and its parser imported each time."""
    from hoststate.parsed import parse_once
    from hoststate.snapshot import toml_loads

    with open(TABLE, encoding="utf-8") as fh:
        return parse_once(TABLE, fh.read(), toml_loads)


@functools.cache
def rows() -> tuple[dict, ...]:
    """The rows hoststate runs: every rule with a regex and without ``left_out``."""
    return tuple(row for row in table()["rule"] if "left_out" not in row and "regex" in row)


@functools.cache
def _compiled(index: int) -> Rule:
    return compile_rule(rows()[index])


def rules() -> tuple[Rule, ...]:
    """Every rule hoststate runs, compiled (a snapshot compiles only those whose keywords it meets)."""
    return tuple(_compiled(i) for i in range(len(rows())))


def _trie(words: list[str]) -> str:
    """A pattern matching the longest of ``words`` that starts where it is tried (a trie: one branch per first
    character, so a position that starts no word costs one comparison per distinct first character)."""
    heads: dict[str, list[str]] = {}
    ends = False
    for word in words:
        if word:
            heads.setdefault(word[0], []).append(word[1:])
        else:
            ends = True
    branches = [re.escape(c) + _trie(rest) for c, rest in sorted(heads.items())]
    if not branches:
        return ""
    body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
    return f"(?:{body})?" if ends else body


#: Texts checked keyword by keyword before the one scan for every keyword is compiled. A check is one ``in`` per
#: keyword (9 us a text on the VM, where the scan takes 3 us but 5-6 ms to compile), so the scan pays its compile
#: back only after about 1,000 texts: a live host's snapshot holds 30-300.
SCAN_AFTER = 512


class KeywordIndex:
    """The rules to run on a text, by the keywords in it: ``own`` each keyword's rules, ``always`` the rules
    without a keyword. The first SCAN_AFTER texts are checked keyword by keyword; after that, one compiled scan
    reports the longest keyword at each position, and ``runs`` holds the rules of that keyword and of every keyword
    it starts with (``sk_live`` there also means ``sk``). Both give the rules of every keyword the text holds."""

    def __init__(self, keyword_lists: Sequence[Sequence[str]]) -> None:
        by_keyword: dict[str, list[int]] = {}
        always: list[int] = []
        for i, words in enumerate(keyword_lists):
            words = [w for w in words if w]
            if not words:
                always.append(i)
            for word in words:
                by_keyword.setdefault(word, []).append(i)
        self.own = {w: tuple(rules) for w, rules in sorted(by_keyword.items())}
        self.always = tuple(always)
        self.checked = 0  # texts checked without the scan (a race only moves the switch: both give the same rules)
        self._scan: tuple[re.Pattern[str], dict[str, tuple[int, ...]]] | None = None
        self._compiling = threading.Lock()

    def rules(self, folded: str, scan: bool = False) -> set[int]:
        """The rules to run on the case-folded text; ``scan``: by the compiled scan whatever the count."""
        ran = set(self.always)
        if self._scan is None and not scan and self.checked < SCAN_AFTER:
            self.checked += 1
            for word, rules in self.own.items():
                if word in folded:
                    ran.update(rules)
            return ran
        pattern, runs = self._scan or self._compile()
        for m in pattern.finditer(folded):
            if m.group(1):
                ran.update(runs[m.group(1)])
        return ran

    def _compile(self) -> tuple[re.Pattern[str], dict[str, tuple[int, ...]]]:
        with self._compiling:
            if self._scan is None:
                own = self.own
                # a keyword's prefixes that are keywords, by lookup (a keyword is at most tens of characters; a
                # scan of every pair of the 242 keywords cost more than compiling the scan)
                runs = {w: tuple(sorted({i for j in range(1, len(w) + 1) for i in own.get(w[:j], ())})) for w in own}
                self._scan = re.compile("(?=(" + _trie(list(own)) + "))"), runs
            return self._scan


def keyword_index(keyword_lists: Sequence[Sequence[str]]) -> KeywordIndex:
    """The index of rules whose keywords (case-folded) are ``keyword_lists[i]``; a rule without one runs on
    every text, as gitleaks runs it."""
    return KeywordIndex(keyword_lists)


@functools.cache
def _keyword_index() -> KeywordIndex:
    return keyword_index([keywords(row) for row in rows()])


def prepare() -> None:
    """The rule table read and its keyword index built (hoststate.redact.prepare)."""
    _keyword_index()


def rules_for(folded: str, index: KeywordIndex | None = None, scan: bool = False) -> set[int]:
    """The indexes (into ``rows()``, or into the lists ``index`` was made of) of the rules one of whose keywords
    occurs in the case-folded text, and of those without a keyword (``scan``: found by the compiled scan)."""
    return (_keyword_index() if index is None else index).rules(folded, scan)


def secret_spans(text: str, folded: str | None = None) -> list[tuple[int, int]]:
    """Every secret the rules find in ``text``, as sorted, merged (start, end) spans; a rule runs only when one
    of its keywords occurs in the case-folded text (``folded``, when the caller has it)."""
    folded = text.casefold() if folded is None else folded
    spans: list[tuple[int, int]] = []
    for index in sorted(rules_for(folded)):
        spans.extend(s for s in _compiled(index).spans(text) if s[1] > s[0])
    merged: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(end, merged[-1][1]))
        else:
            merged.append((start, end))
    return merged


def redact(text: str, replacement: str, folded: str | None = None) -> str:
    """``text`` with every secret the rules find replaced by ``replacement``."""
    spans = secret_spans(text, folded)
    if not spans:
        return text
    out, pos = [], 0
    for start, end in spans:
        out += [text[pos:start], replacement]
        pos = end
    out.append(text[pos:])
    return "".join(out)
