"""vLLM server arguments as vLLM itself reads them, and the CUDA graph mode they declare, by version.

Pure functions, no I/O except reading a ``--config`` file through a loader the caller may replace.
The rules follow vLLM's FlexibleArgumentParser and ``VllmConfig.__post_init__`` as summarised in
reference/vllm.md; every version difference lives in one row of ``VERSIONS``: adding a version is
adding a row. A version not in the table is read by the nearest older row, and the result says so.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hoststate.collectors.vllm.modes import (
    COMP_NAMES,
    _has_full,
    _has_piecewise,
    parse_cg_mode,
    parse_comp_mode,
)

# --------------------------------------------------------------------------------------------
# The version table


@dataclass(frozen=True)
class Rules:
    """What one vLLM version does with the arguments that decide the CUDA graph mode."""

    version: str
    #: "v10.0" (no cudagraph_mode field), "v10" (piecewise default), "v11" (FULL_AND_PIECEWISE when
    #: level/mode 3), "opt" (optimization-level table, 0.12+).
    family: str
    #: What ``-O<n>`` means: "full" (``-O 3`` = compilation_config level 3), "dotted-level",
    #: "dotted-mode" (``-O.level=n``/``-O.mode=n``) or "optimization_level".
    o_number: str
    #: ``-O.x=y``: "ok" (``-O`` is --compilation-config), "deprecated" (rewritten to ``-cc.x``), "error".
    o_dotted: str
    #: The compilation_config key that holds the compilation mode, and whether ``level`` is still read.
    mode_key: str
    level_accepted: bool
    #: Short aliases of this version (reference/vllm.md "How the CLI takes arguments").
    aliases: Mapping[str, str]
    #: Piecewise graphs while the compilation mode is not VLLM_COMPILE: "refused" (startup assertion),
    #: "NONE" (0.12) or "downgrade" (0.33: PIECEWISE->NONE, FULL_AND_PIECEWISE->FULL_DECODE_ONLY).
    piecewise_without_compile: str
    #: DCP/PCP > 1 with full graphs -> PIECEWISE (0.11.1-0.12).
    dcp_rule: bool
    #: TORCH_COMPILE_DISABLE=1 sets the compilation mode to NONE at config time (0.33).
    torch_compile_disable: bool
    #: Options that exist only from / until this version: dest -> "missing".
    missing_options: frozenset[str] = frozenset()


_ALIASES_010 = {"-tp": "tensor_parallel_size", "-pp": "pipeline_parallel_size", "-dp": "data_parallel_size",
                "-q": "quantization", "-O": "compilation_config"}
_ALIASES_011 = {**_ALIASES_010, "-dcp": "decode_context_parallel_size"}
_ALIASES_012 = {**{k: v for k, v in _ALIASES_011.items() if k != "-O"}, "-O": "optimization_level",
                "-cc": "compilation_config"}
_ALIASES_033 = {**_ALIASES_012, "-ac": "attention_config", "-sc": "speculative_config"}

#: Options missing before 0.11.1 (the -O level, capture-size flags and performance mode came later).
_BEFORE_0111 = frozenset({"optimization_level", "cudagraph_capture_sizes", "max_cudagraph_capture_size",
                          "performance_mode"})

#: One row per version whose rules differ from the row before; add a version here and nowhere else.
VERSIONS: tuple[Rules, ...] = (
    Rules("0.10.0", "v10.0", "full", "ok", "level", True, _ALIASES_010, "refused", False, False, _BEFORE_0111),
    Rules("0.10.1", "v10", "full", "ok", "level", True, _ALIASES_010, "refused", False, False, _BEFORE_0111),
    Rules("0.10.2", "v10", "full", "ok", "level", True, _ALIASES_010, "refused", False, False, _BEFORE_0111),
    Rules("0.11.0", "v11", "dotted-level", "ok", "level", True, _ALIASES_011, "refused", False, False, _BEFORE_0111),
    Rules("0.11.1", "v11", "dotted-mode", "ok", "mode", True, _ALIASES_011, "refused", True, False,
          frozenset({"optimization_level", "performance_mode"})),
    Rules("0.12.0", "opt", "optimization_level", "deprecated", "mode", True, _ALIASES_012, "NONE", True, False,
          frozenset({"performance_mode"})),
    Rules("0.33.0", "opt", "optimization_level", "error", "mode", False, _ALIASES_033, "downgrade", False, True,
          frozenset({"cuda_graph_sizes"})),
)

#: Optimization level -> default CUDA graph mode (0.12+).
OPT_LEVEL_CUDAGRAPH: dict[int, str] = {0: "NONE", 1: "PIECEWISE", 2: "FULL_AND_PIECEWISE", 3: "FULL_AND_PIECEWISE"}
DEFAULT_OPT_LEVEL = 2

_VERSION_RE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?")


def version_key(text: str) -> tuple[int, int, int] | None:
    """(major, minor, patch) of a version string such as ``0.11.1rc2.dev5+g1234`` or ``v0.12.0``."""
    m = _VERSION_RE.match(text or "")
    if not m:
        return None
    return int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)


def rules_for(version: str | None) -> tuple[Rules, str | None]:
    """The table row for ``version`` and a note when it is not an exact row (nearest older is used)."""
    newest = VERSIONS[-1]
    if not version:
        return newest, f"vLLM version unknown: the rules of {newest.version} (newest known) are used"
    key = version_key(version)
    if key is None:
        return newest, f"vLLM version {version!r} not understood: the rules of {newest.version} are used"
    older = [r for r in VERSIONS if version_key(r.version) <= key]  # type: ignore[operator]
    if not older:
        oldest = VERSIONS[0]
        return oldest, f"vLLM {version} is older than any known version: the rules of {oldest.version} are used"
    row = older[-1]
    if version_key(row.version) == key:
        return row, None
    return row, f"vLLM {version} is not in the version table: the rules of {row.version} (nearest older) are used"


# --------------------------------------------------------------------------------------------
# Options: dest -> type. Long spelling is ``--`` + dest with dashes; booleans take ``--no-`` forms.

BOOL, INT, FLOAT, STR, JSON, LIST, INTLIST, MAXLEN = "bool", "int", "float", "str", "json", "list", "intlist", "maxlen"

OPTIONS: dict[str, str] = {
    # model and loading
    "model": STR, "tokenizer": STR, "revision": STR, "tokenizer_mode": STR, "dtype": STR, "quantization": STR,
    "load_format": STR, "download_dir": STR, "served_model_name": LIST, "trust_remote_code": BOOL, "seed": INT,
    "runner": STR, "convert": STR, "task": STR, "hf_token": STR, "hf_overrides": JSON, "max_model_len": MAXLEN,
    "skip_tokenizer_init": BOOL, "generation_config": STR, "override_generation_config": JSON,
    "model_loader_extra_config": JSON, "max_logprobs": INT, "enable_sleep_mode": BOOL, "config_format": STR,
    "kv_cache_dtype": STR, "calculate_kv_scales": BOOL, "rope_scaling": JSON, "limit_mm_per_prompt": JSON,
    "mm_processor_kwargs": JSON, "mm_processor_cache_gb": FLOAT, "pooler_config": JSON,
    "override_pooler_config": JSON, "logits_processors": LIST, "enable_lora": BOOL, "max_loras": INT,
    "max_lora_rank": INT, "lora_modules": LIST, "fully_sharded_loras": BOOL, "ignore_patterns": LIST,
    # parallelism
    "tensor_parallel_size": INT, "pipeline_parallel_size": INT, "data_parallel_size": INT,
    "data_parallel_size_local": INT, "decode_context_parallel_size": INT, "prefill_context_parallel_size": INT,
    "data_parallel_address": STR, "data_parallel_rpc_port": INT, "data_parallel_backend": STR,
    "data_parallel_start_rank": INT, "data_parallel_hybrid_lb": BOOL, "data_parallel_external_lb": BOOL,
    "enable_expert_parallel": BOOL, "enable_eplb": BOOL, "eplb_config": JSON, "all2all_backend": STR,
    "distributed_executor_backend": STR, "disable_custom_all_reduce": BOOL, "enable_dbo": BOOL, "headless": BOOL,
    "worker_cls": STR, "enable_multimodal_encoder_data_parallel": BOOL,
    # memory and scheduling
    "gpu_memory_utilization": FLOAT, "kv_cache_memory_bytes": INT, "swap_space": FLOAT, "cpu_offload_gb": FLOAT,
    "block_size": INT, "num_gpu_blocks_override": INT, "enable_prefix_caching": BOOL,
    "prefix_caching_hash_algo": STR, "max_num_seqs": INT, "max_num_batched_tokens": INT,
    "enable_chunked_prefill": BOOL, "max_num_partial_prefills": INT, "long_prefill_token_threshold": INT,
    "scheduling_policy": STR, "async_scheduling": BOOL, "disable_cascade_attn": BOOL, "disable_sliding_window": BOOL,
    "disable_hybrid_kv_cache_manager": BOOL, "disable_chunked_mm_input": BOOL, "num_scheduler_steps": INT,
    "performance_mode": STR,
    # compilation and graphs
    "enforce_eager": BOOL, "compilation_config": JSON, "optimization_level": INT, "max_seq_len_to_capture": INT,
    "cuda_graph_sizes": INTLIST, "cudagraph_capture_sizes": INTLIST, "max_cudagraph_capture_size": INT,
    "attention_backend": STR, "attention_config": JSON,
    # speculative decoding, KV transfer, structured outputs
    "speculative_config": JSON, "kv_transfer_config": JSON, "kv_events_config": JSON,
    "structured_outputs_config": JSON, "additional_config": JSON, "guided_decoding_backend": STR,
    # observability
    "disable_log_stats": BOOL, "disable_log_requests": BOOL, "enable_log_requests": BOOL, "enable_log_outputs": BOOL,
    "otlp_traces_endpoint": STR, "collect_detailed_traces": STR, "use_tqdm_on_load": BOOL,
    # server
    "host": STR, "port": INT, "uds": STR, "api_key": LIST, "root_path": STR, "ssl_keyfile": STR, "ssl_certfile": STR,
    "ssl_ca_certs": STR, "allowed_origins": JSON, "allow_credentials": BOOL, "middleware": LIST,
    "uvicorn_log_level": STR, "disable_uvicorn_access_log": BOOL, "disable_fastapi_docs": BOOL,
    "api_server_count": INT, "disable_frontend_multiprocessing": BOOL, "enable_auto_tool_choice": BOOL,
    "tool_call_parser": STR, "reasoning_parser": STR, "chat_template": STR, "response_role": STR,
    "enable_request_id_headers": BOOL, "enable_prompt_tokens_details": BOOL, "enable_force_include_usage": BOOL,
    "enable_server_load_tracking": BOOL, "return_tokens_as_token_ids": BOOL, "max_log_len": INT,
    "config": STR,
}


def human_int(text: str) -> int:
    """vLLM's human_readable_int: ``1k`` = 1000, ``1K`` = 1024, ``25.6k`` = 25600; ValueError otherwise."""
    text = text.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", text)
    if m:
        number, suffix = m.groups()
        if suffix.islower():
            return int(float(number) * {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}[suffix])
        return int(number) * {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[suffix]
    return int(text)


def loose_value(text: str) -> Any:
    """A dotted or unknown option's value as vLLM reads it: JSON, then a human int, else the string."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return human_int(text)
    except ValueError:
        return text


def convert(dest: str, kind: str, text: str) -> Any:
    """One option value converted by its type; raises ValueError with a message for a bad value."""
    if kind == INT:
        try:
            return human_int(text)
        except ValueError:
            raise ValueError(f"--{dest.replace('_', '-')}: invalid int value {text!r}") from None
    if kind == MAXLEN:
        if text.strip().lower() == "auto":
            return "auto"
        try:
            return human_int(text) if text.strip() != "-1" else -1
        except ValueError:
            raise ValueError(f"--max-model-len: invalid value {text!r}") from None
    if kind == FLOAT:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"--{dest.replace('_', '-')}: invalid float value {text!r}") from None
    if kind == JSON:
        stripped = text.strip()
        if dest == "compilation_config" and stripped.isdigit():
            return {"level": int(stripped)}  # <= 0.11: ``-O 3`` is level 3
        try:
            value = json.loads(stripped)
        except ValueError as err:
            raise ValueError(f"--{dest.replace('_', '-')}: invalid JSON ({err.msg} at column {err.colno})") from None
        if not isinstance(value, dict):
            raise ValueError(f"--{dest.replace('_', '-')}: expected a JSON object, got {type(value).__name__}")
        return value
    return text


# --------------------------------------------------------------------------------------------
# Commands: find the vLLM part of a command line


#: Module entry points that run the OpenAI server (``python -m <module> ...``).
SERVER_MODULES: dict[str, str] = {
    "vllm.entrypoints.openai.api_server": "api_server",
    "vllm.entrypoints.cli.main": "cli",
    "vllm": "cli",
}
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


@dataclass
class Command:
    """A command line split into its ``VAR=value`` prefixes, the launcher, and vLLM's own arguments."""

    env: dict[str, str]
    launcher: list[str]
    program: str | None  # "vllm serve", "api_server" or None when it is not a vLLM server command
    args: list[str]


def split_command(text: str) -> list[str]:
    """shlex split as a shell would; ValueError on unbalanced quotes (the message says so)."""
    try:
        return shlex.split(text, posix=True)
    except ValueError as err:
        raise ValueError(f"cannot split the command: {err}") from None


def locate(argv: list[str]) -> Command:
    """Find ``vllm serve`` / ``python -m vllm.entrypoints.openai.api_server`` in argv (after env/wrappers)."""
    env: dict[str, str] = {}
    i = 0
    if argv and argv[0] == "env":
        i = 1
    while i < len(argv) and _ASSIGN.match(argv[i]):
        m = _ASSIGN.match(argv[i])
        assert m is not None
        env[m.group(1)] = m.group(2)
        i += 1
    for j in range(i, len(argv)):
        tok = argv[j]
        base = tok.rsplit("/", 1)[-1]
        if base == "vllm" and j + 1 < len(argv) and argv[j + 1] == "serve":
            return Command(env, argv[i:j + 2], "vllm serve", argv[j + 2:])
        if tok == "-m" and j + 1 < len(argv) and argv[j + 1] in SERVER_MODULES:
            kind = SERVER_MODULES[argv[j + 1]]
            if kind == "api_server":
                return Command(env, argv[i:j + 2], "api_server", argv[j + 2:])
            if j + 2 < len(argv) and argv[j + 2] == "serve":
                return Command(env, argv[i:j + 3], "vllm serve", argv[j + 3:])
    return Command(env, argv[i:], None, [])


# --------------------------------------------------------------------------------------------
# The normaliser


@dataclass
class Normalised:
    """vLLM's view of a command's arguments: ``args`` by dest name, plus what did not parse."""

    args: dict[str, Any] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def model(self) -> str | None:
        model = self.args.get("model")
        return model if isinstance(model, str) else None


ConfigLoader = Callable[[str], Mapping[str, Any]]


def load_yaml_config(path: str) -> Mapping[str, Any]:
    """A ``--config`` YAML file as a mapping: PyYAML when installed, else flat ``key: value`` lines."""
    with open(path, encoding="utf-8") as fh:
        return parse_config_text(fh.read(), path)


def parse_config_text(text: str, path: str) -> Mapping[str, Any]:
    """The text of a ``--config`` YAML file as a mapping (``path`` names it in errors)."""
    try:
        import yaml  # optional: not a runtime dependency
    except ImportError:
        yaml = None
    if yaml is not None:
        data = yaml.safe_load(text) or {}
        if not isinstance(data, dict):
            raise ValueError(f"--config {path}: not a mapping")
        return data
    data = {}
    for line in text.splitlines():
        line = line.split(" #", 1)[0].rstrip()
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        if line.startswith((" ", "\t", "-")) or ":" not in line:
            raise ValueError(f"--config {path}: only flat 'key: value' lines can be read without PyYAML")
        key, _, value = line.partition(":")
        value = value.strip().strip("'\"") if value.strip()[:1] in "'\"" else value.strip()
        lowered = value.lower()
        data[key.strip()] = True if lowered == "true" else False if lowered == "false" else value
    return data


def _config_tokens(data: Mapping[str, Any]) -> list[str]:
    """Config-file keys as option tokens, the way vLLM's ``_pull_args_from_config`` writes them."""
    tokens: list[str] = []
    for key, value in data.items():
        flag = "--" + str(key).replace("_", "-")
        if value is True:
            tokens.append(flag)
        elif value is False:
            tokens.append("--no-" + flag[2:])
        elif isinstance(value, list):
            tokens.append(flag)
            tokens.extend(str(v) for v in value)
        elif isinstance(value, dict):
            tokens += [flag, json.dumps(value)]
        else:
            tokens += [flag, str(value)]
    return tokens


def _dash_key(token: str) -> str:
    """``--tensor_parallel_size=2`` -> ``--tensor-parallel-size=2``: underscores become dashes up to '.'/'='."""
    key, eq, value = token.partition("=")
    head, dot, rest = key.partition(".")
    return head[:2] + head[2:].replace("_", "-") + dot + rest + eq + value


def _is_option(token: str) -> bool:
    return token.startswith("-") and not re.fullmatch(r"-\d+(\.\d+)?", token)


def _merge(original: dict[str, Any], update: dict[str, Any], prefix: str, dups: list[str]) -> None:
    for k, v in update.items():
        if isinstance(v, dict) and isinstance(original.get(k), dict):
            _merge(original[k], v, f"{prefix}{k}.", dups)
        elif isinstance(v, list) and isinstance(original.get(k), list):
            original[k] = original[k] + v
        else:
            if k in original:
                dups.append(prefix + k)
            original[k] = v


def _dest_of(option: str, rules: Rules) -> tuple[str | None, bool]:
    """(dest, negated) for an option string, or (None, False) when unknown."""
    if option in rules.aliases:
        return rules.aliases[option], False
    if option.startswith("--"):
        name = option[2:].replace("-", "_")
        if name in OPTIONS:
            return name, False
        if name.startswith("no_") and OPTIONS.get(name[3:]) == BOOL:
            return name[3:], True
    return None, False


def normalise(
    argv: list[str],
    version: str | None = None,
    *,
    program: str = "vllm serve",
    config_loader: ConfigLoader = load_yaml_config,
) -> Normalised:
    """vLLM's arguments (after ``vllm serve`` or the api_server module) as ``{dest: value}``.

    Follows FlexibleArgumentParser: ``--model`` vs positional, dashes/underscores, aliases, ``-O``
    by version, dotted keys merged into one JSON value appended last (so they win over a full JSON
    value given anywhere), ``--config`` below the command line, booleans and ``--no-``, last one
    wins. Nothing raises: a bad value is recorded in ``errors`` and the option is left out.
    """
    rules, _ = rules_for(version)
    out = Normalised()
    tokens = list(argv)

    # --config FILE: its options come first, so the command line wins over them.
    for idx, tok in enumerate(tokens):
        if tok == "--config" or tok.startswith("--config="):
            path = tok.split("=", 1)[1] if "=" in tok else (tokens[idx + 1] if idx + 1 < len(tokens) else "")
            end = idx + 1 if "=" in tok else idx + 2
            try:
                pulled = _config_tokens(config_loader(path))
            except (OSError, ValueError) as err:
                out.errors.append(f"--config {path}: {err}")
                pulled = []
            except Exception as err:  # a YAML parser error is not an OSError/ValueError
                out.errors.append(f"--config {path}: {type(err).__name__}: {err}".splitlines()[0])
                pulled = []
            out.args["config"] = path
            # vLLM puts the file's options right after the positional model, before the command line's.
            head = 1 if program == "vllm serve" and tokens and not _is_option(tokens[0]) and idx > 0 else 0
            tokens = tokens[:head] + pulled + tokens[head:idx] + tokens[end:]
            break

    # Pass 1 (FlexibleArgumentParser): spellings, -O, dotted keys.
    processed: list[str] = []
    dotted: dict[str, dict[str, Any]] = {}
    dups: list[str] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if tok.startswith("--") and len(tok) > 2:
            tok = _dash_key(tok)
        elif tok.startswith("-O") and tok != "-O" and tok[2] != ".":
            value = tok[3:] if tok[2] == "=" else tok[2:]
            tokens[i:i + 1] = _o_number(value, rules, out)  # re-read: the result may be a dotted key
            continue
        elif tok == "-O" and i + 1 < len(tokens) and (
            rules.o_number != "full" and tokens[i + 1] in ("0", "1", "2", "3")
            or rules.o_number == "optimization_level"
        ):
            tokens[i:i + 2] = _o_number(tokens[i + 1], rules, out)
            continue
        elif tok.startswith("-O."):
            if rules.o_dotted == "error":
                out.errors.append(f"{tok.split('=', 1)[0]}: -O.<key> is an error in vLLM {rules.version}; "
                                  "use -cc.<key>=<value>")
                i += 1 if "=" in tok else 2
                continue
            if rules.o_dotted == "deprecated":
                out.notes.append(f"{tok.split('=', 1)[0]}: -O.<key> is deprecated in vLLM {rules.version}, "
                                 "read as -cc.<key>")
                tok = "-cc" + tok[2:]
        if _is_option(tok) and "." in tok.split("=", 1)[0]:
            key_part, eq, value_str = tok.partition("=")
            if not eq:
                if i + 1 >= len(tokens):
                    out.errors.append(f"{key_part}: expected a value")
                    i += 1
                    continue
                value_str = tokens[i + 1]
                i += 1
            if key_part.endswith("+"):
                key_part = key_part[:-1]
                value: Any = [loose_value(v) for v in value_str.split(",")]
            else:
                value = loose_value(value_str)
            root, *keys = key_part.split(".")
            nested: Any = value
            for k in reversed(keys):
                nested = {k: nested}
            _merge(dotted.setdefault(root, {}), nested, root + ".", dups)
            i += 1
            continue
        processed.append(tok)
        i += 1
    if dups:
        out.notes.append("duplicate dotted keys, the last one wins: " + ", ".join(dups))
    for root, value in dotted.items():
        processed += [root, json.dumps(value)]

    # Pass 2 (argparse): options to dests, last one wins.
    positionals: list[str] = []
    model_option: str | None = None
    i = 0
    while i < len(processed):
        tok = processed[i]
        if not _is_option(tok) or tok == "-":
            positionals.append(tok)
            i += 1
            continue
        option, eq, inline = tok.partition("=")
        dest, negated = _dest_of(option, rules)
        if dest is None:
            i = _unknown_option(processed, i, option, eq, inline, out)
            continue
        if dest in rules.missing_options:
            out.errors.append(f"{option}: not an option of vLLM {rules.version}")
        kind = OPTIONS.get(dest, JSON if dest.endswith("_config") else STR)
        if dest == "optimization_level":
            kind = INT
        if kind == BOOL:
            if eq:
                lowered = inline.lower()
                if lowered not in ("true", "false", "1", "0"):
                    out.errors.append(f"{option}: does not take a value ({inline!r})")
                    i += 1
                    continue
                out.args[dest] = (lowered in ("true", "1")) != negated
            else:
                out.args[dest] = not negated
            i += 1
            continue
        if kind in (LIST, INTLIST):
            values = [inline] if eq else []
            j = i + 1
            if not eq:
                while j < len(processed) and not _is_option(processed[j]):
                    values.append(processed[j])
                    j += 1
            if not values:
                out.errors.append(f"{option}: expected at least one value")
            elif kind == INTLIST:
                try:
                    out.args[dest] = [human_int(v) for part in values for v in part.split(",") if v]
                except ValueError:
                    out.errors.append(f"{option}: invalid int list {' '.join(values)!r}")
            else:
                out.args[dest] = values
            i = j
            continue
        if eq:
            text, i = inline, i + 1
        elif i + 1 < len(processed) and (not _is_option(processed[i + 1]) or kind in (INT, MAXLEN, FLOAT)):
            text, i = processed[i + 1], i + 2
        else:
            out.errors.append(f"{option}: expected a value")
            i += 1
            continue
        try:
            value = convert(dest, kind, text)
        except ValueError as err:
            out.errors.append(str(err))
            continue
        if dest == "optimization_level" and value not in (0, 1, 2, 3):
            out.errors.append(f"-O/--optimization-level: unknown value {text!r} (0, 1, 2 or 3)")
            continue
        if dest == "model":
            model_option = value
        out.args[dest] = value

    # The positional model of ``vllm serve`` wins over --model.
    if program == "vllm serve" and positionals:
        if model_option is not None and model_option != positionals[0]:
            out.notes.append(f"both a positional model and --model were given; vLLM uses {positionals[0]!r}")
        out.args["model"] = positionals[0]
        positionals = positionals[1:]
    if positionals:
        out.errors.append("unexpected positional arguments: " + " ".join(positionals))
    if "model" not in out.args and program == "api_server":
        out.notes.append("no --model: the api_server default (facebook/opt-125m) applies")
    _check_compilation_keys(out, rules)
    return out


def _o_number(value: str, rules: Rules, out: Normalised) -> list[str]:
    """``-O<n>`` as the tokens this version rewrites it to; an unknown value is an error (no tokens)."""
    if value not in ("0", "1", "2", "3"):
        out.errors.append(f"-O{value}: unknown -O value {value!r} (0, 1, 2 or 3)")
        return []
    if rules.o_number == "optimization_level":
        return ["--optimization-level", value]
    if rules.o_number == "full":
        return ["--compilation-config", value]
    key = "level" if rules.o_number == "dotted-level" else "mode"
    return [f"-O.{key}={value}"]


def _unknown_option(tokens: list[str], i: int, option: str, eq: str, inline: str, out: Normalised) -> int:
    """Record an option vLLM does not know here; returns the next index."""
    name = option.lstrip("-").replace("-", "_")
    if not option.startswith("--"):
        out.errors.append(f"{option}: not an option of vLLM (unknown short option)")
    if eq:
        out.args[name] = loose_value(inline)
        nxt = i + 1
    elif i + 1 < len(tokens) and not _is_option(tokens[i + 1]):
        out.args[name] = loose_value(tokens[i + 1])
        nxt = i + 2
    elif name.startswith("no_"):
        name = name[3:]
        out.args[name] = False
        nxt = i + 1
    else:
        out.args[name] = True
        nxt = i + 1
    out.notes.append(f"{option}: not a known vLLM option; recorded as {name}")
    return nxt


def _check_compilation_keys(out: Normalised, rules: Rules) -> None:
    cc = out.args.get("compilation_config")
    if not isinstance(cc, dict):
        return
    if "level" in cc and not rules.level_accepted:
        out.errors.append(f"compilation_config.level is not accepted by vLLM {rules.version} (use mode)")
    if rules.mode_key == "level" and "mode" in cc:
        out.notes.append(f"compilation_config.mode is not a field in vLLM {rules.version} (level is)")
    if "cudagraph_mode" in cc and parse_cg_mode(cc["cudagraph_mode"]) is None:
        out.errors.append(f"compilation_config.cudagraph_mode: unknown mode {cc['cudagraph_mode']!r}")
    if "cudagraph_mode" in cc and rules.family == "v10.0":
        out.notes.append(f"compilation_config.cudagraph_mode does not exist in vLLM {rules.version}; ignored")


# --------------------------------------------------------------------------------------------
# The declared CUDA graph mode


@dataclass
class Declared:
    """The CUDA graph mode the arguments declare, why, and what the rules used were."""

    mode: str
    because: str
    rules_version: str
    compilation_mode: str | None = None
    problems: list[str] = field(default_factory=list)


_TRUE = ("1", "true", "yes", "on")
_POOLING_TASKS = ("embed", "embedding", "classify", "score", "reward", "pooling")


def _is_pooling(args: Mapping[str, Any]) -> bool:
    return args.get("runner") == "pooling" or args.get("task") in _POOLING_TASKS or bool(args.get("convert")) and \
        args.get("convert") not in ("none", "auto")


def declare(args: Mapping[str, Any], env: Mapping[str, str] | None = None, version: str | None = None) -> Declared:
    """The declared CUDA graph mode of normalised ``args`` under ``env`` for vLLM ``version``."""
    env = env or {}
    rules, note = rules_for(version)
    why: list[str] = [note] if note else []
    problems: list[str] = []
    cc = args.get("compilation_config") if isinstance(args.get("compilation_config"), dict) else {}
    assert isinstance(cc, dict)
    explicit = parse_cg_mode(cc["cudagraph_mode"]) if "cudagraph_mode" in cc else None
    if rules.family == "v10.0":
        explicit = None
    raw_mode = cc.get(rules.mode_key)
    if raw_mode is None and rules.level_accepted and rules.mode_key == "mode":
        raw_mode = cc.get("level")
    comp = parse_comp_mode(raw_mode) if raw_mode is not None else None
    eager = bool(args.get("enforce_eager"))
    tag = f"vLLM {rules.version}"

    def done(mode: str) -> Declared:
        return Declared(mode, "; ".join(why), rules.version, COMP_NAMES.get(comp) if comp is not None else None,
                        problems)

    if eager:
        # 0.12+: enforce-eager means O0, but an explicitly set compilation mode survives.
        comp = (comp if comp is not None else 0) if rules.family == "opt" else 0
        why.append("--enforce-eager: no CUDA graphs" + (" (optimization level O0)" if rules.family == "opt" else ""))
        return done("NONE")

    if rules.torch_compile_disable and env.get("TORCH_COMPILE_DISABLE", "").lower() in _TRUE:
        comp = 0
        why.append("TORCH_COMPILE_DISABLE=1: compilation mode NONE")
    elif env.get("TORCH_COMPILE_DISABLE", "").lower() in _TRUE:
        why.append(f"TORCH_COMPILE_DISABLE=1 has no config-time effect in {tag}")

    if rules.family in ("v10.0", "v10", "v11"):
        level = comp if comp is not None else 3
        comp = level
        if explicit:
            mode = explicit
            why.append(f"explicit compilation_config.cudagraph_mode={explicit}")
        elif rules.family in ("v10.0", "v10") and cc.get("use_cudagraph") is False:
            mode = "NONE"
            why.append("compilation_config.use_cudagraph=false")
        elif rules.family in ("v10.0", "v10") and cc.get("full_cuda_graph") is True and level == 3:
            mode = "FULL"
            why.append("compilation_config.full_cuda_graph=true")
        elif level != 3:
            mode = "NONE"
            why.append(f"{tag}: compilation {rules.mode_key} {level} (not 3) -> no CUDA graphs by default")
        elif rules.family == "v11":
            if _is_pooling(args):
                mode = "PIECEWISE"
                why.append(f"{tag}: pooling model -> PIECEWISE")
            else:
                mode = "FULL_AND_PIECEWISE"
                why.append(f"{tag}: default with compilation {rules.mode_key} 3 -> FULL_AND_PIECEWISE")
        else:
            mode = "PIECEWISE"
            why.append(f"{tag}: default with compilation level 3 on V1 -> PIECEWISE")
        if _has_piecewise(mode) and level != 3:
            problems.append(f"{tag} refuses piecewise CUDA graphs unless compilation {rules.mode_key} is 3")
            why.append(f"startup fails: piecewise graphs need compilation {rules.mode_key} 3")
    else:
        opt = args.get("optimization_level")
        opt = opt if isinstance(opt, int) and opt in OPT_LEVEL_CUDAGRAPH else DEFAULT_OPT_LEVEL
        opt_src = f"optimization level O{opt}" + (" (default)" if "optimization_level" not in args else "")
        if comp is None:
            comp = 3 if opt > 0 else 0
        if explicit:
            mode = explicit
            why.append(f"explicit compilation_config.cudagraph_mode={explicit}")
        else:
            mode = OPT_LEVEL_CUDAGRAPH[opt]
            why.append(f"{tag}: {opt_src} -> {mode}")
        if _has_piecewise(mode) and comp != 3:
            new = "NONE"
            if rules.piecewise_without_compile == "downgrade" and mode == "FULL_AND_PIECEWISE":
                new = "FULL_DECODE_ONLY"
            why.append(f"compilation mode {COMP_NAMES[comp]} (not VLLM_COMPILE): {mode} -> {new}")
            mode = new
        if cc.get("splitting_ops") == [] and _has_piecewise(mode):
            new = "NONE" if mode == "PIECEWISE" else "FULL"
            why.append(f"splitting_ops=[]: {mode} -> {new}")
            mode = new
    if _has_full(mode) and _is_pooling(args) and rules.family == "opt":
        why.append(f"pooling model: {mode} -> PIECEWISE")
        mode = "PIECEWISE"
    cp = max(_int(args.get("decode_context_parallel_size")), _int(args.get("prefill_context_parallel_size")))
    if rules.dcp_rule and cp > 1 and _has_full(mode):
        why.append(f"context parallel size {cp} > 1: {mode} -> PIECEWISE")
        mode = "PIECEWISE"
    if args.get("all2all_backend") == "deepep_high_throughput" and _int(args.get("data_parallel_size")) > 1:
        why.append(f"all2all deepep_high_throughput with data parallel > 1: {mode} -> NONE")
        mode = "NONE"
    return done(mode)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 1
