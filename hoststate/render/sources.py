"""How each side of a comparison describes vLLM, and the line that says so before any vLLM finding is read.

Findings under ``vllm`` compare two descriptions when the sides were described differently (a command line
against a discovered process, a dead URL against a live one), not two servers: the reader must know that first.
"""

from __future__ import annotations

import re
from typing import Any

from hoststate.render.text import Elide, fit, safe

_SOURCE_WORDS = {"cmd": "--vllm-cmd", "pid": "--vllm-pid", "discovered": "a discovered server", "log": "--vllm-log",
                 "url": "--vllm-url", "servers": "discovered servers", "none": "no server",
                 "skipped": "not read (skipped)", "dead-url": "--vllm-url (unreachable)"}
_URL = re.compile(r"https?://[^\s\]\)'\"<>]+")


def _dead_url(snap: dict[str, Any]) -> tuple[str, str] | None:
    """(URL, error) of a --vllm-url that did not answer, from ``collectors.vllm.unreadable``."""
    entry = (snap.get("collectors") or {}).get("vllm")
    unread = entry.get("unreadable") if isinstance(entry, dict) and isinstance(entry.get("unreadable"), dict) else {}
    for key, why in unread.items():
        url = _URL.search(f"{key} {why}")
        if url and re.search(r"refused|unreachable|timed out|error|reset|not known", str(why), re.IGNORECASE):
            error = re.sub(r"\s*[\[(]?--vllm-url\s+\S+.*$", "", str(why)).strip() or "unreachable"
            return safe(url.group()), safe(error)
    return None


def vllm_source(snap: Any) -> tuple[str, str]:
    """(kind, words) of how a snapshot describes vLLM: ``cmd``, ``pid``, ``discovered``, ``log``, ``url``,
    ``servers``, ``dead-url`` (a --vllm-url that did not answer), ``none`` or ``skipped``."""
    snap = snap if isinstance(snap, dict) else {}
    dead = _dead_url(snap)
    if dead:
        return "dead-url", f"--vllm-url {dead[0]} (did not answer)"
    entry = (snap.get("collectors") or {}).get("vllm")
    entry = entry if isinstance(entry, dict) else {}
    vllm = snap.get("vllm") if isinstance(snap.get("vllm"), dict) else {}
    if isinstance(vllm.get("servers"), dict) and vllm["servers"]:
        return "servers", f"{len(vllm['servers'])} discovered servers"
    source = vllm.get("source")
    if isinstance(source, str) and source in _SOURCE_WORDS:
        return source, _SOURCE_WORDS[source]
    if entry.get("status") == "skipped":
        return "skipped", f"nothing ({safe(str(entry.get('reason') or 'skipped'))})"
    return "none", "no vLLM server" + (f" ({safe(str(entry['reason']))})" if entry.get("reason") else "")


def vllm_source_note(baseline: Any, current: Any) -> list[str]:
    """The report's first line when the two sides describe vLLM differently, with the fix; [] when they agree.
    A dead URL's error (``Connection refused``) is kept whole: the URL is what is shortened."""
    for side, snap in (("now", current), ("in the baseline", baseline)):
        dead = _dead_url(snap if isinstance(snap, dict) else {})
        if dead:
            return fit([f"vLLM: {side} --vllm-url ", Elide(dead[0]), " did not answer (", dead[1],
                        "); fix: start the server or correct the URL (its vllm values are missing, not changed)"])
    (kind_a, words_a), (kind_b, words_b) = vllm_source(baseline), vllm_source(current)
    if kind_a == kind_b or {kind_a, kind_b} <= {"discovered", "pid"}:
        return []
    return fit([f"vLLM described differently: baseline by {words_a}, now by ", Elide(words_b),
                "; fix: describe both sides the same way (the same --vllm-* option, or the server running)"])
