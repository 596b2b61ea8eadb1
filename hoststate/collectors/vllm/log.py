"""What a vLLM server log says about the server: version, non-default args, engine config, and the
CUDA graph mode it actually captured (pure functions on text, tested on real-format excerpts).

The engine config line prints ``compilation_config`` as JSON up to 0.11.x and as a Python dict repr
with enum reprs (``<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>``) from 0.12; both are read. The line
is printed before the workers choose an attention backend, so runtime downgrades show only in the
later warnings (``...; setting cudagraph_mode=PIECEWISE``) and capture progress bars.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

from hoststate.collectors.vllm.modes import COMP_NAMES, parse_cg_mode, parse_comp_mode

_VERSION_LINES = (
    re.compile(r"vLLM API server version (\S+)"),
    re.compile(r"Initializing a V\d LLM engine \(v([^)\s]+)\)"),
    re.compile(r"Initializing an LLM engine \(v([^)\s]+)\)"),
)
_NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$")
_ENGINE_CONFIG = re.compile(r"Initializing an? (?:V\d )?LLM engine \(v[^)]*\) with config: (.*)$")
_DOWNGRADE = re.compile(r"CUDAGraphMode\.(\w+) is not supported(.*?); setting cudagraph_mode=(\w+)")
_CAPTURE = re.compile(r"Capturing CUDA graphs? \(([^,()]+), (\w+)\)")
_CAPTURE_OLD = re.compile(r"Capturing CUDA graph shapes")
_CAPTURE_DONE = re.compile(r"Graph capturing finished in ([\d.]+) secs?")
_BACKEND = re.compile(r"Using ([A-Za-z_][\w ]*?) (?:[Aa]ttention )?backend")
_ENUM = re.compile(r"<(\w+(?:\.\w+)*): [^<>]*>")

#: Engine-config keys kept in the snapshot (the rest is long and mostly repeats the arguments).
CONFIG_KEYS: tuple[str, ...] = (
    "model", "speculative_config", "dtype", "max_seq_len", "tensor_parallel_size", "pipeline_parallel_size",
    "data_parallel_size", "disable_custom_all_reduce", "quantization", "enforce_eager", "kv_cache_dtype",
    "enable_prefix_caching", "chunked_prefill_enabled", "seed", "async_scheduling",
)


def _from_ast(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Dict):
        pairs = zip(node.keys, node.values, strict=True)
        return {str(_from_ast(k)) if k is not None else "**": _from_ast(v) for k, v in pairs}
    if isinstance(node, ast.List | ast.Tuple | ast.Set):
        return [_from_ast(e) for e in node.elts]
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return ast.unparse(node)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub) and isinstance(node.operand, ast.Constant):
        return -node.operand.value
    if isinstance(node, ast.Call):  # SpeculativeConfig(method='suffix', ...) -> its keyword arguments
        return {kw.arg or "**": _from_ast(kw.value) for kw in node.keywords}
    return ast.unparse(node)


def parse_pyrepr(text: str) -> Any:
    """A Python repr (dict, list, dataclass repr, enum reprs) as plain values; ValueError when not one."""
    cleaned = _ENUM.sub(lambda m: repr(m.group(1)), text.strip())
    try:
        tree = ast.parse(cleaned, mode="eval")
    except SyntaxError as err:
        raise ValueError(f"not a Python repr ({err.msg})") from None
    return _from_ast(tree.body)


def split_config(text: str) -> dict[str, str]:
    """``model='m', tensor_parallel_size=8, compilation_config={...}`` -> {key: value text}."""
    items: dict[str, str] = {}
    depth, quote, start, i = 0, "", 0, 0
    key_at = re.compile(r",\s*([A-Za-z_]\w*)=")
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0 and key_at.match(text, i):
            _add_item(items, text[start:i])
            start = i + 1
        i += 1
    _add_item(items, text[start:])
    return items


def _add_item(items: dict[str, str], chunk: str) -> None:
    key, eq, value = chunk.strip().partition("=")
    if eq and key.isidentifier():
        items[key] = value.strip()


def parse_value(text: str) -> Any:
    """One engine-config value: JSON, then Python repr, else the text itself (``auto``, ``torch.bfloat16``)."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return parse_pyrepr(text)
    except ValueError:
        return text


@dataclass
class LogFacts:
    """What one server log says; ``errors`` lists what could not be read (never raised)."""

    version: str | None = None
    non_default_args: dict[str, Any] | None = None
    config: dict[str, Any] = field(default_factory=dict)
    config_cudagraph_mode: str | None = None
    config_compilation_mode: str | None = None
    downgrades: list[str] = field(default_factory=list)
    downgraded_to: str | None = None
    captures: list[str] = field(default_factory=list)
    captured_mode: str | None = None
    capture_finished: bool = False
    attention_backends: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def observed(self) -> tuple[str | None, str | None]:
        """(mode, where from): capture lines, else the last downgrade warning, else the engine config line."""
        if self.captured_mode:
            return self.captured_mode, "log: CUDA graph capture lines"
        if self.downgraded_to:
            return self.downgraded_to, "log: cudagraph_mode downgrade warning"
        if self.config_cudagraph_mode:
            return self.config_cudagraph_mode, "log: engine config line (before runtime downgrades)"
        return None, None


def mode_from_captures(kinds: set[tuple[str, str]]) -> str | None:
    """The graph mode implied by the capture progress bars' (batch kind, mode) pairs."""
    mixed = {m for k, m in kinds if k.startswith("mixed")}
    decode = {m for k, m in kinds if k == "decode"}
    if "FULL" in mixed:
        return "FULL"
    if "PIECEWISE" in mixed:
        return "FULL_AND_PIECEWISE" if "FULL" in decode else "PIECEWISE"
    if "FULL" in decode:
        return "FULL_DECODE_ONLY"
    return None


def parse_log(text: str) -> LogFacts:
    """Every fact parse_log knows how to find in a server log; later lines win (a restarted server)."""
    facts = LogFacts()
    kinds: set[tuple[str, str]] = set()
    for line in text.splitlines():
        for pattern in _VERSION_LINES:
            m = pattern.search(line)
            if m:
                facts.version = m.group(1).lstrip("v")
        m = _NON_DEFAULT.search(line)
        if m:
            try:
                value = parse_pyrepr(m.group(1))
                if isinstance(value, dict):
                    facts.non_default_args = value
            except ValueError as err:
                facts.errors.append(f"non-default args: {err}")
        m = _ENGINE_CONFIG.search(line)
        if m:
            _engine_config(m.group(1), facts)
            kinds = set()  # a new engine: earlier captures belonged to an earlier start
            facts.captures, facts.downgrades, facts.downgraded_to = [], [], None
        m = _DOWNGRADE.search(line)
        if m:
            text = f"{m.group(1)} -> {m.group(3)}{m.group(2)}".strip()
            if text not in facts.downgrades:  # every TP rank prints the same warning
                facts.downgrades.append(text)
            facts.downgraded_to = parse_cg_mode(m.group(3)) or m.group(3)
        m = _CAPTURE.search(line)
        if m:
            kind = (m.group(1).strip(), m.group(2).upper())
            if kind not in kinds:
                kinds.add(kind)
                facts.captures.append(f"{kind[0]}, {kind[1]}")
        elif _CAPTURE_OLD.search(line) and "graph shapes" not in facts.captures:
            facts.captures.append("graph shapes")
        if _CAPTURE_DONE.search(line):
            facts.capture_finished = True
        m = _BACKEND.search(line)
        if m and m.group(1) not in facts.attention_backends:
            facts.attention_backends.append(m.group(1))
    facts.captured_mode = mode_from_captures(kinds)
    return facts


def _engine_config(text: str, facts: LogFacts) -> None:
    items = split_config(text)
    facts.config = {k: parse_value(items[k]) for k in CONFIG_KEYS if k in items}
    raw = items.get("compilation_config")
    if raw is None:
        return
    cc = parse_value(raw)
    if not isinstance(cc, dict):
        facts.errors.append("engine config: compilation_config could not be read")
        return
    if "cudagraph_mode" in cc:
        facts.config_cudagraph_mode = parse_cg_mode(cc["cudagraph_mode"])
    for key in ("mode", "level"):
        if cc.get(key) is not None:
            comp = parse_comp_mode(cc[key])
            if comp is not None:
                facts.config_compilation_mode = COMP_NAMES[comp]
                break
