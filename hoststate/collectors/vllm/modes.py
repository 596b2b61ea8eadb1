"""CUDA graph and compilation modes: every spelling vLLM accepts or prints, read to one name."""

from __future__ import annotations

import re
from typing import Any

CG_MODES: tuple[str, ...] = ("NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE")
_CG_BY_VALUE: dict[Any, str] = {
    0: "NONE", 1: "PIECEWISE", 2: "FULL", (2, 0): "FULL_DECODE_ONLY", (2, 1): "FULL_AND_PIECEWISE",
}
#: Compilation mode/level values and the names both spellings (CompilationLevel <= 0.11.0, CompilationMode) use.
_COMP_BY_NAME: dict[str, int] = {
    "NONE": 0,
    "NO_COMPILATION": 0,
    "STOCK_TORCH_COMPILE": 1,
    "DYNAMO_AS_IS": 1,
    "DYNAMO_TRACE_ONCE": 2,
    "DYNAMO_ONCE": 2,
    "VLLM_COMPILE": 3,
    "PIECEWISE": 3,
}
COMP_NAMES: dict[int, str] = {0: "NONE", 1: "STOCK_TORCH_COMPILE", 2: "DYNAMO_TRACE_ONCE", 3: "VLLM_COMPILE"}
_ENUM_REPR = re.compile(r"^<?(?:\w+\.)?(\w+)(?::\s*[^>]*)?>?$")


def parse_cg_mode(value: Any) -> str | None:
    """A CUDA graph mode name from any spelling vLLM accepts or prints, or None when not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return _CG_BY_VALUE.get(value)
    if isinstance(value, list | tuple):
        try:
            return _CG_BY_VALUE.get(tuple(int(v) for v in value))
        except (TypeError, ValueError):
            return None
    if isinstance(value, str):
        m = _ENUM_REPR.match(value.strip())
        name = (m.group(1) if m else value.strip()).upper()
        return name if name in CG_MODES else None
    return None


def parse_comp_mode(value: Any) -> int | None:
    """A compilation mode/level as 0..3, or None when not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value <= 3 else None
    if isinstance(value, str):
        text = value.strip()
        if text.isdigit():
            return parse_comp_mode(int(text))
        m = _ENUM_REPR.match(text)
        return _COMP_BY_NAME.get((m.group(1) if m else text).upper())
    return None


def has_piecewise(mode: str) -> bool:
    return mode in ("PIECEWISE", "FULL_AND_PIECEWISE")


def has_full(mode: str) -> bool:
    return mode.startswith("FULL")
