"""``hoststate check``'s advisories as text (a block per code), JSON (docs/check.schema.json) or a Markdown table.

Loads no diff or policy module: an advisory is already decided by hoststate.check.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hoststate.check import SEVERITIES, Advisory
from hoststate.render.text import WIDTH, fit, md_code, md_table, md_text, paint, safe


def _counts(advisories: list[Advisory]) -> dict[str, int]:
    return {s: sum(1 for a in advisories if a.severity == s) for s in SEVERITIES}


def render_text(advisories: list[Advisory], color: bool = False) -> str:
    """One block per code, warnings first: ``CODE name [severity]`` once, then each advisory's path and message
    wrapped within 120 columns (nothing cut); then the counts."""
    counts = _counts(advisories)
    lines: list[str] = []
    ordered = sorted(advisories, key=lambda a: (SEVERITIES.index(a.severity), a.code))
    for i, a in enumerate(ordered):
        if i == 0 or ordered[i - 1].code != a.code:
            same = sum(1 for b in ordered if b.code == a.code)
            lines.append(paint(f"{a.code} {a.name} [{a.severity}]", a.severity, color)
                         + (f" x {same}" if same > 1 else ""))
        lines += fit([f"  {safe(a.path) + ': ' if a.path else ''}{safe(a.message)}"], WIDTH, 6)
    lines.append(f"{counts['warning']} warning(s), {counts['info']} info" if advisories else "no advisories")
    return "\n".join(lines) + "\n"


def to_json(advisories: list[Advisory]) -> dict[str, Any]:
    """The object of docs/check.schema.json: every advisory and the counts per severity."""
    return {"advisories": [a.to_dict() for a in advisories], "counts": _counts(advisories)}


def render_json(advisories: list[Advisory], color: bool = False) -> str:
    return json.dumps(to_json(advisories), indent=2) + "\n"


def render_markdown(advisories: list[Advisory], color: bool = False) -> str:
    if not advisories:
        return "No advisories.\n"
    rows = [(a.code, a.name, a.severity, md_code(a.path or ""), md_text(a.message)) for a in advisories]
    return "\n".join(md_table(("code", "name", "severity", "path", "message"), rows)) + "\n"


#: format -> renderer; colour only applies to text.
RENDERERS: dict[str, Callable[[list[Advisory], bool], str]] = {
    "text": render_text, "json": render_json, "markdown": render_markdown}


def render_checks(advisories: list[Advisory], fmt: str, color: bool = False) -> str:
    """Advisories in ``fmt`` (text, json or markdown)."""
    renderer = RENDERERS.get(fmt)
    if renderer is None:
        raise ValueError(f"unknown format {fmt!r} (one of {', '.join(RENDERERS)})")
    return renderer(advisories, color)
