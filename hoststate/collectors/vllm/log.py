"""What a vLLM server log says about the server: version, non-default args, engine config, the CUDA
graph mode it actually captured, and what ran (KV cache, graphs, backends, all-reduce, NCCL, MoE
configs). Pure functions on text, tested on real-format excerpts of each version.

Only vLLM's own records count, and only those of the last server start. A record is a line in
vLLM's logger format, ``[(Proc pid=N) ][PREFIX]LEVEL MM-DD HH:MM:SS [file.py:LINE] message``
(the process prefix since 0.10, ``VLLM_LOGGING_PREFIX``, ANSI colours and DEBUG's relative file
paths tolerated), whose message *starts* with the fact's wording and whose file is the one that
logs it in vLLM's source (``core.py`` for the engine config, ``api_server.py`` for the version...).
A logged prompt is a record of another file whose message starts elsewhere, and a multi-line
message's continuation lines (vLLM writes them after ``\r\n`` with the first line's prefix) are
skipped (but for 0.33's start logo, an empty ``startup.py`` record whose lines are all vLLM's), so
request text cannot claim a version, a mode or a capture. The last start is the last
``vLLM API server version`` record (else the last group of engine-config records); its facts end
where the API server starts listening (``Starting vLLM API server``): no request is served before.
Lines longer than MAX_LINE are skipped unread, so parsing stays linear in the input.

The engine config line prints ``compilation_config`` as JSON up to 0.11.x and as a Python dict repr
with enum reprs (``<CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>``) from 0.12; both are read. The line
is printed before the workers choose an attention backend, so runtime downgrades show only in the
later warnings (``...; setting cudagraph_mode=PIECEWISE``) and capture progress bars.
"""

from __future__ import annotations

import ast
import json
import os
import re
import stat
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hoststate.collectors.vllm.modes import COMP_NAMES, parse_cg_mode, parse_comp_mode
from hoststate.io import decode, reason_of
from hoststate.redact import bracket_depths
from hoststate.text import clean

#: Longest line read; longer ones (a logged 50 MB prompt) are skipped without being matched.
MAX_LINE = 256 << 10
_ENUM = re.compile(r"<(\w+(?:\.\w+)*): [^<>]*>")
_ANSI = re.compile(r"\x1b\[[0-9;]{0,32}[A-Za-z]")
#: ``(EngineCore_DP0 pid=7) `` / ``(RayWorkerWrapper pid=7, ip=10.0.0.1) `` added by vLLM's worker processes.
_PROC = r"(?:\((?P<proc>[^()\r\n]{1,100}?) pid=\d{1,10}(?:, ip=[^()\r\n]{0,64})?\) )?"
_RECORD = re.compile(
    _PROC + r"[^\r\n]{0,64}?(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d{1,6})? "
    r"\[?(?P<file>[\w./-]{1,300}?):\d{1,7}\] "  # before 0.9 the file had no opening bracket
)
_BARE = re.compile(_PROC)

#: Each fact: (name, files that log it in vLLM's source, message pattern matched at the message start).
#: A name may have several rows (wordings of different versions). tests/test_vllm_log_formats.py checks
#: every row against the formats recorded from each version's source (fixtures/vllm/log-formats/).
_API = ("api_server.py", "serve.py", "main.py", "startup.py", "entry.py")
_FACTS: tuple[tuple[str, tuple[str, ...] | None, re.Pattern[str]], ...] = tuple(
    (name, files, re.compile(pattern)) for name, files, pattern in (
        ("start", _API, r"vLLM (?:API )?server version ([^\s,]{1,64})"),
        # 0.33's default start record is a logo; its version line continues an empty startup.py record
        ("start", ("startup.py",), r"[^\w\r\n]{1,120}version ([^\s,]{1,64})\s{0,8}$"),
        ("listening", _API, r"Starting vLLM (?:API )?server"),
        ("non_default", ("utils.py", "api_server.py", "serve.py", "arg_utils.py", "startup.py"),
         r"non-default args: (\{.*\})\s*$"),
        ("engine", ("core.py", "llm_engine.py"),
         r"Initializing an? (?:V\d )?LLM engine \(v([^)\s]{1,64})\) with config: (.*)$"),
        ("downgrade", ("gpu_model_runner.py", "model_runner.py", "cudagraph_utils.py", "compilation.py", "vllm.py"),
         r"CUDAGraphMode\.(\w{1,32}) is not supported([^;]{0,400}); setting cudagraph_mode=(\w{1,32})"),
        ("captured", ("gpu_model_runner.py", "model_runner.py", "cudagraph_utils.py"),
         r"Graph capturing finished in ([\d.]{1,12}) secs?(?:, took ([\d.]{1,12}) GiB)?"),
        # the model's attention backend, a name of at most four words: not the ViT encoder's, not the MLA
        # prefill backend (0.33), not ``Using HND KV cache layout for FLASHINFER backend.`` (0.11-0.12)
        ("attention", ("cuda.py", "rocm.py", "xpu.py", "cpu.py", "tpu.py", "selector.py", "interface.py"),
         r"Using (?!default backend |[\w ]{0,48}prefill backend)([A-Za-z_]\w{0,40}(?: \w{1,40}){0,3}?)"
         r"(?: attention)? backend\b(?! for ViT)"),
        ("kv_memory", ("gpu_worker.py", "worker.py"), r"Available KV cache memory: ([\d.]{1,16}) GiB"),
        # 0.33 logs tokens and concurrency in one record, its pools named first (``GPU``, ``GPU + host``)
        ("kv_tokens", ("kv_cache_utils.py",),
         r"(?:GPU|[A-Z]{2,8})(?: \+ host)? KV cache size: ([\d,]{1,20}) tokens"
         r"(?:, Maximum concurrency for ([\d,]{1,20}) tokens per request: ([\d.]{1,16})x)?"),
        ("concurrency", ("kv_cache_utils.py", "executor_base.py"),
         r"Maximum concurrency for ([\d,]{1,20}) tokens per request: ([\d.]{1,16})x"),
        ("kv_blocks", ("executor_base.py", "llm_engine.py", "loggers.py", "core.py"),
         r"(?:# GPU blocks: |(?:Engine \d{1,6}|\d{1,6} Engines): vllm cache_config_info with initialization after "
         r"num_gpu_blocks is: )(\d{1,12})"),
        ("nccl", ("pynccl.py",), r"vLLM is using nccl==(\S{1,32})"),
        ("allreduce", ("custom_all_reduce.py", "parallel.py", "cuda_communicator.py"),
         r"(?:Custom allreduce is disabled|Disabled the custom all-reduce(?: kernel)?) (?:because |due to |since )?"
         r"(.{0,300}?)(?:\.? To silence this warning.*)?$"),
        ("moe_default", ("fused_moe.py", "fused_flydsl_moe.py"),
         r"Using default (?:FlyDSL )?MoE config\. Performance might be sub-optimal! Config file not found at "
         r"(.{1,4000})$"),
        ("moe_tuned", ("fused_moe.py", "fused_flydsl_moe.py"),
         r"Using (?:configuration from|tuned FlyDSL MoE config from) (.{1,2000}?)(?: for MoE layer\.?)?$"),
        # Mxfp4MoEMethod names its kernel without the word (``Using Marlin backend``, 0.10-0.12)
        ("moe_backend", ("mxfp4.py",), r"(Using [\w ]{1,60} backend[^\r\n]{0,200})$"),
        ("moe_backend", None,
         r"(Using (?!configuration from|default |tuned |FusedMoEConfig::)[^\r\n]{0,200}MoE[^\r\n]{0,120})$"),
    )
)
_JSON_NAME = re.compile(r"([^/'\"]{1,400}\.json)")
_BAR = r"(?:: *\d{1,3}%[^\r\n]{0,200}? (\d{1,9})/(\d{1,9}))?"  # tqdm: ``: 100%|####| 67/67 [...]``
_CAPTURE = re.compile(r"Capturing CUDA graphs? \(([^,()]{1,64}), (\w{1,32})\)" + _BAR)
_CAPTURE_OLD = re.compile(r"Capturing CUDA graph shapes" + _BAR)

#: Engine-config keys kept in the snapshot (the rest is long and mostly repeats the arguments).
CONFIG_KEYS: tuple[str, ...] = (
    "model", "speculative_config", "dtype", "max_seq_len", "tensor_parallel_size", "pipeline_parallel_size",
    "data_parallel_size", "disable_custom_all_reduce", "quantization", "enforce_eager", "kv_cache_dtype",
    "enable_prefix_caching", "chunked_prefill_enabled", "seed", "async_scheduling",
)


#: Deepest nesting kept from a logged value; below it a value is kept as MAX_DEPTH_TEXT (vLLM's own values nest
#: three or four levels; a snapshot refuses more than 32, hoststate.snapshot.MAX_DEPTH).
MAX_VALUE_DEPTH = 12
MAX_DEPTH_TEXT = f"<nested deeper than {MAX_VALUE_DEPTH} levels>"


def plain(value: Any, depth: int = 0) -> Any:
    """A parsed log value as a snapshot can hold it: strings with surrogates escaped (``\\udcff``: vLLM logs a
    model path that is not UTF-8 that way; hoststate.text), bytes literals as text with ``\\xNN`` escapes,
    Ellipsis as ``...``, anything else TOML has no type for (complex, None inside a list) as its repr, integers
    beyond 64 bits as text, nesting beyond MAX_VALUE_DEPTH as MAX_DEPTH_TEXT. Tables keep string keys."""
    if isinstance(value, str):
        return clean(value)
    if isinstance(value, bool | float) or value is None:
        return value
    if isinstance(value, int):
        return value if -(1 << 63) <= value < (1 << 63) else clean(_repr(value))
    if isinstance(value, bytes):
        return decode(value)
    if value is Ellipsis:
        return "..."
    if isinstance(value, list | tuple | dict):
        if depth >= MAX_VALUE_DEPTH:
            return MAX_DEPTH_TEXT
        if isinstance(value, dict):
            return {clean(str(k)): plain(v, depth + 1) for k, v in value.items()}
        return [plain(v, depth + 1) for v in value]
    return clean(_repr(value))


def _repr(value: Any) -> str:
    try:
        return repr(value)
    except ValueError:  # an integer too long for str() (sys.get_int_max_str_digits)
        return f"<{type(value).__name__}>"


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
        operand = node.operand.value
        if isinstance(operand, int | float | complex) and not isinstance(operand, bool):
            return -operand
    if isinstance(node, ast.Call):  # SpeculativeConfig(method='suffix', ...) -> its keyword arguments
        return {kw.arg or "**": _from_ast(kw.value) for kw in node.keywords}
    return ast.unparse(node)


#: One parse at a time: the warnings filter that silences the parser is process-wide state.
_PARSE_LOCK = threading.Lock()


def _parse_silently(source: str) -> ast.Expression:
    """``ast.parse(source, mode="eval")`` without the warnings Python's compiler prints on stderr for text it
    still accepts (``1if 1else 2``: "invalid decimal literal"; ``'\\d'``: "invalid escape sequence" on 3.12):
    a log line is data, and what it holds is recorded, never echoed."""
    with _PARSE_LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(source, mode="eval")


def parse_pyrepr(text: str) -> Any:
    """A Python repr (dict, list, dataclass repr, enum reprs) as plain values; ValueError when not one."""
    cleaned = _ENUM.sub(lambda m: repr(m.group(1)), text.strip())
    try:
        tree = _parse_silently(cleaned)
        return plain(_from_ast(tree.body))
    except SyntaxError as err:
        raise ValueError(f"not a Python repr ({err.msg})") from None
    except (RecursionError, MemoryError):
        raise ValueError("not a Python repr (nested too deeply)") from None
    except ValueError as err:  # a NUL in the text, an integer too long to convert
        raise ValueError(f"not a Python repr ({err})") from None


_KEY_AT = re.compile(r",\s*([A-Za-z_]\w*)=")


def split_config(text: str) -> dict[str, str]:
    """``model='m', tensor_parallel_size=8, compilation_config={...}`` -> {key: value text}."""
    items: dict[str, str] = {}
    start = 0
    for i, depth in bracket_depths(text):
        if depth == 0 and text[i] == "," and _KEY_AT.match(text, i):
            _add_item(items, text[start:i])
            start = i + 1
    _add_item(items, text[start:])
    return items


def _add_item(items: dict[str, str], chunk: str) -> None:
    key, eq, value = chunk.strip().partition("=")
    if eq and key.isidentifier():
        items[key] = value.strip()


def parse_value(text: str) -> Any:
    """One engine-config value: JSON, then Python repr, else the text itself (``auto``, ``torch.bfloat16``)."""
    try:
        return plain(json.loads(text))
    except (ValueError, RecursionError):
        pass
    try:
        return parse_pyrepr(text)
    except ValueError:
        return clean(text)




@dataclass
class LogFacts:
    """What one server log says about its last start; ``errors`` lists what could not be read."""

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
    #: What actually ran (``vllm.observed``): KV cache, graphs, backends, all-reduce, NCCL, MoE configs.
    ran: dict[str, Any] = field(default_factory=dict)
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


@dataclass(frozen=True)
class Line:
    """One log line as vLLM's: a record (``file``, ``message``) or bare process output (a progress bar)."""

    file: str | None
    message: str


def classify(raw: str) -> Line:
    """A line as a vLLM record or as bare output (the worker prefix removed); ANSI colours dropped."""
    text = _ANSI.sub("", raw) if "\x1b" in raw else raw
    m = _RECORD.match(text)
    if m:
        return Line(m.group("file").rsplit("/", 1)[-1], text[m.end():])
    return Line(None, text[_BARE.match(text).end():])  # type: ignore[union-attr]  # it matches empty


def _fact(line: Line) -> tuple[str, re.Match[str]] | None:
    if line.file is None:
        return None
    for name, files, pattern in _FACTS:
        if files is not None and line.file not in files:
            continue
        m = pattern.match(line.message)
        if m:
            return name, m
    return None


#: Files whose record with an empty first line is a logo: its continuation lines are vLLM's own text.
_LOGO_FILES = ("startup.py",)


def _is_logo(line: str) -> bool:
    first = classify(line)
    return first.file in _LOGO_FILES and not first.message.strip()


def split_lines(text: str, errors: list[str]) -> list[str]:
    """The lines that may be vLLM's own: continuation lines of multi-line messages (after a line ending
    in ``\\r``) and lines longer than MAX_LINE are dropped (counted in ``errors``). The continuation
    lines of a logo record (an empty first line from a _LOGO_FILES file: 0.33's start banner, which
    holds the version) are kept: vLLM writes all of that record's text."""
    out: list[str] = []
    long_lines = 0
    after_cr = logo = False
    for raw in text.split("\n"):
        continuation, after_cr = after_cr, raw.endswith("\r")
        if len(raw) > MAX_LINE:
            long_lines += 1
            logo = logo and continuation
            continue
        if continuation:
            if logo:
                out.append(raw.rstrip("\r"))
            continue
        line = raw.rstrip("\r")
        logo = after_cr and _is_logo(line)
        out.append(line)
    if long_lines:
        errors.append(f"{long_lines} line(s) longer than {MAX_LINE} characters skipped")
    return out


def last_start(lines: list[Line], facts: list[tuple[str, re.Match[str]] | None]) -> tuple[int, int]:
    """(first, end) indices of the last server start: from its version record (else its first
    engine-config record) to the record that says the API server listens (else the end)."""
    starts = [i for i, f in enumerate(facts) if f and f[0] == "start"]
    if starts:
        first = starts[-1]
    else:
        first, seen_end = 0, True
        for i, f in enumerate(facts):
            if f and f[0] == "engine" and seen_end:
                first, seen_end = i, False
            elif f and f[0] in ("listening", "captured") or (lines[i].file == "core.py" and
                                                          lines[i].message.startswith("init engine")):
                seen_end = True
    end = next((i + 1 for i in range(first, len(facts)) if facts[i] and facts[i][0] == "listening"), len(facts))
    return first, end


def parse_log(text: str, deadline: float | None = None) -> LogFacts:
    """Every fact parse_log knows how to find in the last server start of a log; never raises.

    ``deadline`` (time.monotonic) stops a very large log early; what was read so far is kept and
    ``errors`` says so.
    """
    result = LogFacts()
    raws = split_lines(text, result.errors)
    lines: list[Line] = []
    for n, raw in enumerate(raws):
        if deadline is not None and n % 2048 == 0 and time.monotonic() > deadline:
            result.errors.append(f"stopped at the deadline after {n} lines")
            break
        lines.append(classify(raw))
    facts = [_fact(line) for line in lines]
    first, end = last_start(lines, facts)
    state = _State()
    for line, fact in zip(lines[first:end], facts[first:end], strict=True):
        if fact is not None:
            _HANDLERS[fact[0]](fact[1], result)
        elif line.file is None:
            _progress(line.message, result, state)
    result.captured_mode = mode_from_captures(set(state.kinds))
    if result.version or result.config:  # a start was read: silence is a reading too
        result.ran.setdefault("custom_all_reduce", "not disabled")
        result.ran.setdefault("moe_default_config", [])
    if state.kinds or state.old_count:
        result.ran["graphs_captured"] = sum(state.kinds.values()) + state.old_count
        if state.kinds:
            result.ran["graph_captures"] = {f"{k}, {m}": c for (k, m), c in state.kinds.items()}
    return result


@dataclass
class _State:
    kinds: dict[tuple[str, str], int] = field(default_factory=dict)
    old_count: int = 0


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def _least(ran: dict[str, Any], key: str, value: float) -> None:
    """Every rank (or DP engine) logs its own figure: the least is what bounds the server."""
    value = int(value) if float(value).is_integer() and key != "kv_cache_memory_gib" else value
    ran[key] = min(ran[key], value) if key in ran else value


def _append(ran: dict[str, Any], key: str, value: str) -> None:
    ran.setdefault(key, [])
    if value not in ran[key]:
        ran[key].append(value)


def _on_start(m: re.Match[str], out: LogFacts) -> None:
    out.version = m.group(1).lstrip("v")


def _on_non_default(m: re.Match[str], out: LogFacts) -> None:
    try:
        value = parse_pyrepr(m.group(1))
    except ValueError as err:
        out.errors.append(f"non-default args: {err}")
        return
    if isinstance(value, dict):
        out.non_default_args = value


def _on_engine(m: re.Match[str], out: LogFacts) -> None:
    out.version = out.version or m.group(1).lstrip("v")
    _engine_config(m.group(2), out)


def _on_downgrade(m: re.Match[str], out: LogFacts) -> None:
    text = f"{m.group(1)} -> {m.group(3)}{m.group(2)}".strip()
    if text not in out.downgrades:  # every TP rank prints the same warning
        out.downgrades.append(text)
    out.downgraded_to = parse_cg_mode(m.group(3)) or m.group(3)


def _on_captured(m: re.Match[str], out: LogFacts) -> None:
    out.capture_finished = True
    out.ran["graph_capture_secs"] = _number(m.group(1))
    if m.group(2):
        out.ran["graph_memory_gib"] = _number(m.group(2))


def _on_attention(m: re.Match[str], out: LogFacts) -> None:
    backend = m.group(1).strip()
    if backend not in out.attention_backends:
        out.attention_backends.append(backend)


def _on_concurrency(m: re.Match[str], out: LogFacts) -> None:
    out.ran["max_model_len"] = int(_number(m.group(1)))
    _least(out.ran, "max_concurrency", _number(m.group(2)))


def _on_kv_tokens(m: re.Match[str], out: LogFacts) -> None:
    _least(out.ran, "kv_cache_tokens", _number(m.group(1)))
    if m.group(2):
        out.ran["max_model_len"] = int(_number(m.group(2)))
        _least(out.ran, "max_concurrency", _number(m.group(3)))


def _on_allreduce(m: re.Match[str], out: LogFacts) -> None:
    out.ran["custom_all_reduce"] = "disabled"
    _append(out.ran, "custom_all_reduce_disabled_because", m.group(1).strip().rstrip(".") or "not said")


def _on_moe_config(key: str) -> Callable[[re.Match[str], LogFacts], None]:
    """A path, or (0.12) a list of paths; the file name says the shape."""
    def handle(m: re.Match[str], out: LogFacts) -> None:
        for found in _JSON_NAME.findall(m.group(1)) or [m.group(1).rsplit("/", 1)[-1]]:
            _append(out.ran, key, found)
    return handle


def _on_least(key: str) -> Callable[[re.Match[str], LogFacts], None]:
    def handle(m: re.Match[str], out: LogFacts) -> None:
        _least(out.ran, key, _number(m.group(1)))
    return handle


#: What each record kind of _FACTS adds to the facts.
_HANDLERS: dict[str, Callable[[re.Match[str], LogFacts], None]] = {
    "start": _on_start,
    "non_default": _on_non_default,
    "engine": _on_engine,
    "downgrade": _on_downgrade,
    "captured": _on_captured,
    "attention": _on_attention,
    "kv_memory": _on_least("kv_cache_memory_gib"),
    "kv_tokens": _on_kv_tokens,
    "concurrency": _on_concurrency,
    "kv_blocks": _on_least("kv_cache_blocks"),
    "nccl": lambda m, out: out.ran.__setitem__("nccl_version", m.group(1)),
    "allreduce": _on_allreduce,
    "moe_default": _on_moe_config("moe_default_config"),
    "moe_tuned": _on_moe_config("moe_tuned_config"),
    "moe_backend": lambda m, out: _append(out.ran, "moe_backends", m.group(1).strip().rstrip(".")),
    "listening": lambda m, out: None,
}


def _progress(message: str, out: LogFacts, state: _State) -> None:
    """A capture progress bar (tqdm redraws it after ``\\r``; the last drawing counts)."""
    segments = [s for s in message.split("\r") if s.strip()]
    if not segments:
        return
    last = segments[-1].strip()
    m = _CAPTURE.match(last)
    if m:
        kind = (m.group(1).strip(), m.group(2).upper())
        if kind not in state.kinds:
            out.captures.append(f"{kind[0]}, {kind[1]}")
        state.kinds[kind] = int(m.group(3)) if m.group(3) else state.kinds.get(kind, 0)
        return
    m = _CAPTURE_OLD.match(last)
    if m:
        if "graph shapes" not in out.captures:
            out.captures.append("graph shapes")
        state.old_count = int(m.group(1)) if m.group(1) else state.old_count


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
    sizes = cc.get("cudagraph_capture_sizes")
    if isinstance(sizes, list) and all(isinstance(x, int) for x in sizes):
        facts.ran["graph_capture_sizes"] = sorted(sizes)
    for key in ("mode", "level"):
        if cc.get(key) is not None:
            comp = parse_comp_mode(cc[key])
            if comp is not None:
                facts.config_compilation_mode = COMP_NAMES[comp]
                break


# --------------------------------------------------------------------------------------------
# Reading a log file: a bounded window that holds the last server start

#: Most of a log that is read. A log grows with every request after the start; the start's records
#: (config, KV cache, graphs) come within its first few MB.
MAX_LOG_BYTES = 32 << 20
_CHUNK = 1 << 20
#: 0.33's logo start record continues over lines this backward search cannot trust: its engine record counts.
_MARKERS = ((b"vLLM API server version ", "start"), (b"vLLM server version ", "start"), (b"LLM engine (v", "engine"))


def _line_at(fd: int, pos: int, size: int) -> tuple[int, str] | None:
    """(start offset, text) of the line holding byte ``pos``, or None when it is longer than MAX_LINE
    or continues a multi-line message (the line before it ends with ``\\r``)."""
    lo = max(0, pos - MAX_LINE)
    before = os.pread(fd, pos - lo, lo)
    cut = before.rfind(b"\n")
    if cut < 0 and lo > 0:
        return None
    start = lo + cut + 1
    if start >= 2 and os.pread(fd, 1, start - 2) == b"\r":
        return None
    after = os.pread(fd, min(MAX_LINE, size - start), start)
    end = after.find(b"\n")
    return start, after[: end if end >= 0 else len(after)].decode("utf-8", "backslashreplace")


def _last_start_offset(fd: int, size: int, deadline: float | None) -> tuple[int | None, str | None]:
    """Offset of the last start record (API server version, else engine config), scanning back from the end."""
    engine: int | None = None
    keep = max(len(m) for m, _ in _MARKERS)
    end = size
    while end > 0:
        if deadline is not None and time.monotonic() > deadline:
            return engine, "stopped looking for the last server start at the deadline"
        lo = max(0, end - _CHUNK)
        block = os.pread(fd, min(end + keep, size) - lo, lo)
        for marker, name in _MARKERS:
            at = block.rfind(marker)
            while at >= 0:
                line = _line_at(fd, lo + at, size)
                fact = _fact(classify(line[1])) if line else None
                if fact and fact[0] == name:
                    if name == "start":
                        return line[0], None  # type: ignore[index]
                    if engine is None:
                        engine = line[0]  # type: ignore[index]
                    break
                at = block.rfind(marker, 0, at)
        end = lo
    return engine, None


def read_log(path: str, deadline: float | None = None) -> tuple[str | None, str | None, list[str]]:
    """(text, error, notes) of a server log the user named: a regular file only (a FIFO, directory or
    device is refused at once); at most MAX_LOG_BYTES from the last server start (else the tail)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as err:
        return None, reason_of(err), []
    notes: list[str] = []
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, "not a regular file", []
        size = st.st_size
        start = 0
        if size > MAX_LOG_BYTES:
            found, why = _last_start_offset(fd, size, deadline)
            if why:
                notes.append(why)
            if found is None:
                start = size - MAX_LOG_BYTES
                notes.append(f"log of {size} bytes without a server start record: its last {MAX_LOG_BYTES} bytes read")
            else:
                start = found
                notes.append(f"log of {size} bytes: read from the last server start (byte {found}), "
                             f"at most {MAX_LOG_BYTES} bytes")
        data = os.pread(fd, min(MAX_LOG_BYTES, size - start), start)
        return data.decode("utf-8", "backslashreplace"), None, notes
    except OSError as err:
        return None, reason_of(err), notes
    finally:
        os.close(fd)

