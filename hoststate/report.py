"""The names this module held before the presentation layer had its own package (hoststate.render), kept so that
imports made before it keep working (hoststate.guard's refusal message and [guard] table still use it). New code
imports from hoststate.render.* directly."""

from __future__ import annotations

from hoststate.diff import only as filter_paths
from hoststate.render.diff import FORMATS, iter_json, render_diff, render_markdown, render_text, to_json
from hoststate.render.findings import (
    by_rule,
    change_parts,
    change_text,
    finding_line,
    finding_lines,
    importance,
    list_delta,
    rule_lines,
)
from hoststate.render.guard import GUARD_RULES, accept_patterns, next_step, render_guard
from hoststate.render.sources import vllm_source, vllm_source_note
from hoststate.render.summary import SummaryLine, headline, summarize
from hoststate.render.text import (
    COLOURS,
    RESET,
    WIDTH,
    Elide,
    Name,
    _hidden,
    clip,
    fit,
    md_code,
    md_text,
    paint,
    safe,
    show_value,
    table,
)

__all__ = [
    "COLOURS", "FORMATS", "iter_json", "GUARD_RULES", "RESET", "WIDTH", "Elide", "Name", "SummaryLine", "_hidden",
    "accept_patterns", "by_rule", "change_parts", "change_text", "clip", "filter_paths", "finding_line",
    "finding_lines", "fit", "headline", "importance", "list_delta", "md_code", "md_text", "next_step", "paint",
    "render_diff", "render_guard", "render_markdown", "render_text", "rule_lines", "safe", "show_value",
    "summarize", "table", "to_json", "vllm_source", "vllm_source_note",
]
