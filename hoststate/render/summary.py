"""One line per subsystem saying what happened in words, most important first
("dsa0, dsa2: 8 WQs disabled -> enabled (+68 derived settings)"): how a reader gets a diff's verdict in ten seconds.

Each subsystem has its describer in DESCRIBE; a line keeps to the summary width by naming fewer findings
(``(+N more)``) and by shortening values in their middle, never the arrow or the words between them.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

from hoststate.diff import Finding
from hoststate.policy import RANK
from hoststate.render.findings import ORDER, Ranked, importance, list_delta, parts_of, subsystem
from hoststate.render.text import WIDTH, Elide, Part, cells, one_line, plain, safe, show_value


class SummaryLine(NamedTuple):
    severity: str
    subsystem: str
    text: str
    findings: int

    def to_dict(self) -> dict[str, Any]:
        return {"severity": self.severity, "subsystem": self.subsystem, "text": self.text, "findings": self.findings}


#: A summary line's columns: the report's width less the severity column (``INVALIDATING  ``).
SUMMARY_WIDTH = WIDTH - 14


def _word(value: Any) -> str:
    """A value as a bare word for a sentence: strings unquoted, absent as 'absent'."""
    if value is None:
        return "absent"
    if isinstance(value, str):
        return "unreadable" if value.startswith("<unreadable") else safe(value) or '""'
    return show_value(value, 40)


def _short(f: Finding, rel: str) -> list[Part]:
    """``rel`` plus what happened, short: ``kernel.release 5.15 -> 6.8``, ``NCCL_DEBUG added "INFO"``."""
    if f.change == "coverage":
        return [f"{rel} ", Elide(_word(f.old)), " -> ", Elide(_word(f.new))]
    if f.change == "unreadable":
        return [f"{rel} unreadable" if rel else "unreadable"]
    delta = list_delta(f.old, f.new) if f.change == "changed" else None
    if delta is not None:
        gone, came = delta
        bits: list[Part] = []
        for sign, values in (("-", gone[:2]), ("+", came[:2])):
            for v in values:
                bits += [" " if bits else "", sign, Elide(show_value(v, 30))]
        more = len(gone) + len(came) - min(len(gone), 2) - min(len(came), 2)
        return [f"{rel} ", *bits, f" (+{more})" if more > 0 else ""]
    if f.change == "added":
        return [f"{rel} added ", Elide(show_value(f.new, 40))]
    if f.change == "removed":
        return [f"{rel} removed (was ", Elide(show_value(f.old, 40)), ")"]
    return [f"{rel} ", Elide(show_value(f.old, 40)), " -> ", Elide(show_value(f.new, 40))]


def _short_gpu(key: str) -> str:
    """A GPU's UUID cut to its first group (``GPU-7de10c90``); position keys (a bus id, ``GPU3``) stay whole."""
    return key[:12] if key.startswith("GPU-") else key


def _rel(parts: tuple[str, ...], skip: int) -> str:
    """The path below the subsystem, with a GPU's UUID cut to its first group (``GPU-7de10c90``)."""
    keys = list(parts[skip:])
    if parts[:3] == ("system", "cpufreq", "governor") and len(parts) == 4:  # keyed by CPU range: read forwards
        return f"CPUs {safe(parts[3])} governor"
    if parts[:2] == ("gpu", "devices") and len(parts) > 2:
        keys = [_short_gpu(parts[2]), *parts[3:]]
    return safe(".".join(keys))


def _joined(head: str, shown: list[list[Part]], rest: int, more: str) -> list[Part]:
    out: list[Part] = [head]
    for i, item in enumerate(shown):
        out += [", "] if i else []
        out += item
    return out + ([f" (+{rest} {more})"] if rest > 0 else [])


def _fit(head: str, items: list[list[Part]], total: int, more: str = "more") -> str:
    """``head`` and as many items as fit the summary width, then ``(+N more)`` for the findings not named; the
    values in them shortened when even the first does not fit."""
    shown: list[list[Part]] = []
    for item in items:
        candidate = plain(_joined(head, [*shown, item], total - len(shown) - 1, more))
        if shown and cells(candidate) > SUMMARY_WIDTH:
            break
        shown.append(item)
    return one_line(_joined(head, shown, total - len(shown), more), SUMMARY_WIDTH)


def _first(findings: list[Finding], n: int = 6) -> list[Finding]:
    """The ``n`` most important findings, as ``sorted(findings, key=importance)[:n]`` gives them, without sorting
    a group that may hold a finding per leaf of two 8 MiB snapshots; the first ``n`` of findings in that order."""
    return findings[:n] if isinstance(findings, Ranked) else heapq.nsmallest(n, findings, key=importance)


def _generic(label: str, findings: list[Finding], skip: int) -> str:
    """``label: item, item (+N more)``: the most important findings first, one item each."""
    ranked = _first(findings)
    return _fit(f"{label}: ", [_short(f, _rel(parts_of(f), skip)) for f in ranked], len(findings))


def _dsa(findings: list[Finding]) -> str:
    """WQ state transitions by device, everything else counted as derived from them."""
    transitions: dict[tuple[str, str], list[str]] = {}
    state = []
    for f in findings:
        p = parts_of(f)
        if len(p) == 6 and p[1] == "devices" and p[3] == "wqs" and p[5] == "state":
            transitions.setdefault((_word(f.old), _word(f.new)), []).append(safe(p[2]))
            state.append(f)
    if not state:
        return _generic("DSA", findings, 2)
    devices = sorted({d for devs in transitions.values() for d in devs})
    moves = ", ".join(f"{len(devs)} WQ{'s' if len(devs) != 1 else ''} {a} -> {b}"
                      for (a, b), devs in transitions.items())
    rest = len(findings) - len(state)
    return f"{', '.join(devices)}: {moves}" + (f" (+{rest} derived settings)" if rest else "")


def _vllm(findings: list[Finding]) -> str:
    """The cudagraph modes first (declared, then what the log says ran), then arguments and the rest."""
    items: list[list[Part]] = []
    for f in _first(findings):
        p = parts_of(f)
        body = p[3:] if len(p) > 2 and p[1] == "servers" else p[1:]
        if body[:1] == ("cudagraph",) and len(body) == 2 and f.change == "changed":
            kind = "" if body[1] == "declared" else f"{safe(body[1])} "
            items.append([f"{kind}cudagraph ", Elide(_word(f.old)), " -> ", Elide(_word(f.new))])
        else:
            items.append(_short(f, safe(".".join(body))))
    first = parts_of(findings[0])
    server = f" :{safe(first[2])}" if first[1:2] == ("servers",) and len(first) > 2 else ""
    return _fit(f"vLLM{server} ", items, len(findings), "related")


def _gpu(findings: list[Finding]) -> str:
    """GPUs lost, removed and added first, then the settings that changed on GPUs on both sides; a lost GPU's
    consequences on the others (NVLink peers, topology) are counted. A GPU is lost where the device as a whole
    could not be read (a finding at the device's own path) or its name could not, with nothing but removed or
    unreadable values; removed or added where its name is, with every value alike. One value that could not be
    read (a call the driver lacks) leaves the GPU where it is: every device has a name (invalidating, never
    left out of a report), and a device gone takes it along."""
    per_gpu: dict[str, set[str]] = {}
    named: dict[str, str] = {}
    whole_device: set[str] = set()
    for f in findings:
        p = parts_of(f)
        if p[1:2] == ("devices",) and len(p) > 2:
            per_gpu.setdefault(p[2], set()).add(f.change)
            if len(p) == 3:
                whole_device.add(p[2])
            elif p[3:] == ("name",):
                named[p[2]] = f.change
    lost = sorted(u for u, changes in per_gpu.items() if changes <= {"removed", "unreadable"}
                  and (u in whole_device or named.get(u) == "unreadable"))
    gone = sorted(u for u, changes in per_gpu.items() if changes == {"removed"} and named.get(u) == "removed")
    came = sorted(u for u, changes in per_gpu.items() if changes == {"added"} and named.get(u) == "added")
    whole = set(lost) | set(gone) | set(came)
    whole_items: list[list[Part]] = [[f"{len(ids)} GPU{'s' if len(ids) != 1 else ''} {word} "
                                      f"({', '.join(safe(_short_gpu(u)) for u in ids)})"]
                                     for word, ids in (("lost", lost), ("removed", gone), ("added", came)) if ids]
    rest = [f for f in findings
            if parts_of(f)[1:2] != ("devices",) or len(parts_of(f)) < 3 or parts_of(f)[2] not in whole]
    if whole_items:
        return _fit("GPU: ", whole_items, len(whole_items) + len(rest), "related")
    items = [_short(f, _rel(parts_of(f), 1)) for f in _first(rest)]
    return _fit("GPU: ", items, len(rest))


def _accel_config(findings: list[Finding]) -> str:
    lead = []
    for f in findings:
        p = parts_of(f)
        if p[1:] == ("saved", "matches_live") and f.change == "changed":
            lead.append("live configuration not saved" if f.new is False else "live configuration now saved")
        elif p[1:] == ("saved", "present") and f.change == "changed":
            lead.append("saved configuration " + ("appeared" if f.new else "removed"))
    if not lead:
        return _generic("accel-config", findings, 1)
    rest = len(findings) - len(lead)
    return f"accel-config: {', '.join(lead)}" + (f" (+{rest} related)" if rest else "")


def _host(findings: list[Finding]) -> str:
    for f in findings:
        if parts_of(f)[1:] == ("hostname",):
            rest = len(findings) - 1
            return one_line(["different host (", Elide(_word(f.old)), " -> ", Elide(_word(f.new)), ")",
                             f" (+{rest} more)" if rest else ""], SUMMARY_WIDTH)
    return _generic("snapshot", findings, 1)


#: subsystem -> how its findings read as one line.
DESCRIBE: dict[str, Callable[[list[Finding]], str]] = {
    "dsa": _dsa,
    "vllm": _vllm,
    "accel-config": _accel_config,
    "host": _host,
    "collectors": lambda fs: _generic("collectors", fs, 1),
    "packages": lambda fs: _generic("packages", fs, 1),
    "env": lambda fs: _generic("env", fs, 1),
    "gpu": _gpu,
    "system": lambda fs: _generic("system", fs, 1),
}


def summarize(findings: Iterable[Finding]) -> list[SummaryLine]:
    """One line per subsystem (vLLM: per server), most important first: severity, then ORDER. Findings in
    importance order (hoststate.render.findings.Ranked) are grouped in that order and not ranked again."""
    group_of = Ranked if isinstance(findings, Ranked) else list
    groups: dict[str, list[Finding]] = {}
    for f in findings:
        parts = parts_of(f)
        name = subsystem(parts)
        key = name
        if name == "vllm" and parts[1:2] == ("servers",) and len(parts) > 2:
            key = f"vllm\x1f{parts[2]}"
        group = groups.get(key)
        if group is None:
            group = groups[key] = group_of()
        group.append(f)
    out = []
    for key, group in groups.items():
        name = key.split("\x1f")[0]
        severity = min((f.severity for f in group), key=RANK.__getitem__)
        describe = DESCRIBE.get(name) or (lambda fs, n=name: _generic(safe(n), fs, 1))
        out.append(SummaryLine(severity, name, describe(group), len(group)))
    order = {name: i for i, name in enumerate(ORDER)}
    out.sort(key=lambda s: (RANK[s.severity], order.get(s.subsystem, len(order)), s.text))
    return out


def headline(findings: Iterable[Finding]) -> str:
    """The most important thing that happened, in words (guard's refusal names it)."""
    lines = summarize(findings)
    return lines[0].text if lines else ""
