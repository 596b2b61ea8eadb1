"""The vLLM version table: what each version does with the arguments that decide the CUDA graph mode.

One keyword row per version whose rules differ from the row before; each row names only what changed
and inherits the rest from the previous row. Adding a version is adding a row (and running the oracle,
docs/vllm.md "Adding a vLLM version"). A version not in the table is read by the nearest older row.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True)
class Rules:
    """One version's rules. Every field is read by one step of the parser (argv.py) or the resolution
    (cudagraph.py); the docstring of the field says which vLLM behaviour it stands for."""

    version: str
    #: Default CUDA graph mode: "v10.0" (no cudagraph_mode field), "v10" (PIECEWISE with compilation
    #: level 3), "v11" (FULL_AND_PIECEWISE with level/mode 3), "opt" (from the optimization level, 0.12+).
    family: str
    #: What ``-O<n>`` means: "full" (``--compilation-config <n>``), "dotted-level" / "dotted-mode"
    #: (``-O.level=n`` / ``-O.mode=n``) or "optimization_level" (``--optimization-level n``).
    o_number: str
    #: ``-O<n>`` values this version accepts (others are refused by its parser); with ``o_any_int`` any
    #: integer is accepted as the compilation level (above 3 it compiles nothing: NONE).
    o_values: frozenset[str]
    o_any_int: bool
    #: ``-O.x=y``: "ok" (``-O`` is --compilation-config), "deprecated" (rewritten to ``-cc.x``), "error".
    o_dotted: str
    #: The compilation_config key that holds the compilation mode, and whether ``level`` is still read.
    mode_key: str
    level_accepted: bool
    #: Short aliases -> dest.
    aliases: Mapping[str, str]
    #: A graph mode other than NONE while the compilation mode is not VLLM_COMPILE: "refused"
    #: (piecewise graphs fail an assertion at startup), "none" (any mode but NONE -> NONE, 0.12) or
    #: "downgrade" (PIECEWISE -> NONE, FULL_AND_PIECEWISE -> FULL_DECODE_ONLY, 0.33).
    graphs_without_compile: str
    #: ``splitting_ops=[]``: "piecewise-to-full" (PIECEWISE -> FULL, <= 0.11.0) or "split"
    #: (PIECEWISE -> NONE, FULL_AND_PIECEWISE -> FULL, 0.11.1+).
    empty_splitting_ops: str
    #: ``full_cuda_graph`` / ``use_cudagraph`` still converted to a cudagraph mode (<= 0.11.0).
    legacy_graph_flags: bool
    #: The conversion happens in CompilationConfig itself (0.10.2-0.11.0): whatever the compilation level,
    #: the parsed compilation_config holds the mode, and either flag next to a cudagraph_mode is refused.
    legacy_flags_in_config: bool
    #: DCP/PCP > 1 with full graphs -> PIECEWISE (0.11.1-0.12).
    context_parallel_piecewise: bool
    #: TORCH_COMPILE_DISABLE=1 sets the compilation mode to NONE at config time (0.33).
    torch_compile_disable: bool
    #: ``VLLM_ALL2ALL_BACKEND`` from the environment sets the all2all backend when the option is unset.
    all2all_env: bool
    #: deepep_high_throughput with DP > 1 -> NONE applies only to MoE models (0.33) instead of any model.
    all2all_moe_only: bool
    #: What deepep_high_throughput with DP > 1 makes of graphs: "NONE" (any mode) or "PIECEWISE" (full
    #: modes become PIECEWISE, MoE ops split out of the graphs, 0.10.2).
    all2all_ht_mode: str
    #: Model Runner V2 (VLLM_USE_V2_MODEL_RUNNER=1) with a compilation mode below VLLM_COMPILE -> NONE.
    v2_runner_needs_compile: bool
    #: ``--convert`` makes a pooling runner by itself (older) or only with ``--runner pooling``.
    convert_makes_pooling: bool
    #: Encoder-decoder models with full graphs: "PIECEWISE" (0.11-0.12) or "FULL_DECODE_ONLY" (0.33).
    encoder_decoder_mode: str
    #: ``vllm serve ... --model M``: "option" (an option; a positional model wins), "refused" (0.11.0 and
    #: 0.33) or "moved" (FlexibleArgumentParser.parse_args moves M to the front as the positional model,
    #: so a second positional is refused; 0.11.1-0.12).
    serve_model_option: str
    #: ``--max-model-len auto`` is accepted.
    max_model_len_auto: bool
    #: Speculative methods the version knows (others are refused).
    spec_methods: frozenset[str]
    #: Known speculative methods the engine refuses at config time.
    spec_refused_methods: frozenset[str]
    #: pass_config keys that turn on attention+quant fusion, which empties splitting_ops so piecewise
    #: modes become FULL (CompilationConfig.set_splitting_ops_for_attn_fusion: 0.11.1 ``enable_attn_fusion``;
    #: 0.12 ``fuse_attn_quant``, ``enable_attn_fusion`` its deprecated spelling). Empty: no such rule.
    attn_fusion_keys: tuple[str, ...]
    #: pass_config's ``enable_*`` keys were renamed (``enable_attn_fusion`` -> ``fuse_attn_quant`` ...), the
    #: old spelling setting the new field (0.12+). Before, the new names are not fields and are ignored.
    pass_config_renamed: bool
    #: Pooling / encoder-decoder models replace full graphs only in the default mode (0.11.0), not an explicit
    #: one; from 0.11.1 VllmConfig.__post_init__ checks any mode with full graphs.
    model_rules_default_only: bool
    #: Speculative methods ``--async-scheduling`` accepts (0.11.0: none; 0.11.1+: EAGLE/MTP kinds,
    #: VllmConfig.__post_init__ checks EagleModelTypes).
    async_spec_methods: frozenset[str]
    #: Decode context parallel without MLA must split the KV heads (TP > heads, DCP <= TP // heads;
    #: ModelConfig.verify_with_parallel_config, 0.11.1+).
    dcp_head_check: bool
    #: ``VLLM_USE_V1=0`` selects the V0 engine: no compilation and no graphs by default (up to 0.11.0).
    v0_env: bool
    #: VLLM_ATTENTION_BACKEND values the V1 engine takes; with ``VLLM_USE_V1`` unset, another value, more
    #: than one concurrent partial prefill or ``--load-format sharded_state`` select the V0 engine, and
    #: ``VLLM_USE_V1=1`` with one is refused (0.10.2). Empty: no such fallback.
    v1_attention_backends: frozenset[str]
    #: Graphs with an empty capture-size list or a maximum capture size of 0 fail an assertion
    #: (VllmConfig._set_cudagraph_sizes, 0.11.1+).
    capture_size_checks: bool
    #: Options this version's parser does not have (dest names): using one is refused.
    missing_options: frozenset[str] = frozenset()


_ALIASES_010 = {"-tp": "tensor_parallel_size", "-pp": "pipeline_parallel_size", "-dp": "data_parallel_size",
                "-q": "quantization", "-O": "compilation_config"}
_ALIASES_012 = {**{k: v for k, v in _ALIASES_010.items() if k != "-O"}, "-dcp": "decode_context_parallel_size",
                "-O": "optimization_level", "-cc": "compilation_config"}
_ALIASES_033 = {**_ALIASES_012, "-ac": "attention_config", "-sc": "speculative_config"}
_O_0_3 = frozenset("0123")
_SPEC_METHODS_0110 = frozenset({"ngram", "eagle", "eagle3", "medusa", "mlp_speculator", "draft_model", "deepseek_mtp",
                                "ernie_mtp", "qwen3_next_mtp", "mimo_mtp", "longcat_flash_mtp", "mtp"})
_EAGLE_MTP = frozenset({"eagle", "eagle3", "mtp", "deepseek_mtp", "mimo_mtp", "glm4_moe_mtp", "ernie_mtp",
                        "qwen3_next_mtp", "longcat_flash_mtp", "pangu_ultra_moe_mtp"})
_SPEC_METHODS = _EAGLE_MTP | {"ngram", "medusa", "mlp_speculator", "draft_model", "suffix"}
_SPEC_METHODS_0102 = frozenset({"ngram", "eagle", "eagle3", "medusa", "mlp_speculator", "draft_model", "deepseek_mtp",
                                "ernie_mtp", "qwen3_next_mtp"})
_V1_BACKENDS_0102 = frozenset({
    "FLASH_ATTN_VLLM_V1", "FLASH_ATTN", "PALLAS", "PALLAS_VLLM_V1", "TRITON_ATTN_VLLM_V1", "TRITON_MLA", "CUTLASS_MLA",
    "FLASHMLA", "FLASHMLA_VLLM_V1", "FLASH_ATTN_MLA", "FLASHINFER", "FLASHINFER_VLLM_V1", "FLASHINFER_MLA",
    "ROCM_AITER_MLA", "TORCH_SDPA_VLLM_V1", "FLEX_ATTENTION", "TREE_ATTN", "XFORMERS_VLLM_V1"})
_MISSING_0102 = frozenset({"optimization_level", "cudagraph_capture_sizes", "max_cudagraph_capture_size",
                           "performance_mode", "all2all_backend", "attention_config", "attention_backend",
                           "data_parallel_external_lb", "enable_dbo", "num_scheduler_steps", "pooler_config",
                           "prefill_context_parallel_size", "structured_outputs_config"})

#: The rows, oldest first. The first row names every field; each later one only what changed.
ROWS: tuple[dict[str, Any], ...] = (
    {"version": "0.10.0", "family": "v10.0", "o_number": "full", "o_values": frozenset("01234"), "o_any_int": False,
     "o_dotted": "ok",
     "mode_key": "level", "level_accepted": True, "aliases": _ALIASES_010, "graphs_without_compile": "refused",
     "empty_splitting_ops": "piecewise-to-full", "legacy_graph_flags": True, "legacy_flags_in_config": False,
     "context_parallel_piecewise": False, "torch_compile_disable": False, "all2all_env": True,
     "all2all_moe_only": False, "all2all_ht_mode": "NONE", "v2_runner_needs_compile": False,
     "convert_makes_pooling": True,
     "encoder_decoder_mode": "PIECEWISE", "serve_model_option": "option", "max_model_len_auto": False,
     "spec_methods": _SPEC_METHODS_0110, "spec_refused_methods": frozenset(), "attn_fusion_keys": (),
     "pass_config_renamed": False, "model_rules_default_only": True, "async_spec_methods": frozenset(),
     "dcp_head_check": False, "v0_env": True, "v1_attention_backends": frozenset(), "capture_size_checks": False,
     "missing_options": frozenset({"optimization_level", "cudagraph_capture_sizes", "max_cudagraph_capture_size",
                                   "performance_mode", "all2all_backend", "attention_config",
                                   "decode_context_parallel_size"})},
    {"version": "0.10.1", "family": "v10"},
    {"version": "0.10.2", "o_number": "dotted-level", "o_values": _O_0_3, "o_any_int": True,
     "aliases": _ALIASES_010 | {"-dcp": "decode_context_parallel_size"}, "serve_model_option": "refused",
     "legacy_flags_in_config": True, "all2all_ht_mode": "PIECEWISE", "spec_methods": _SPEC_METHODS_0102,
     "spec_refused_methods": frozenset({"draft_model"}), "v1_attention_backends": _V1_BACKENDS_0102,
     "missing_options": _MISSING_0102},
    {"version": "0.11.0", "family": "v11", "convert_makes_pooling": False, "all2all_ht_mode": "NONE",
     "spec_methods": _SPEC_METHODS_0110, "v1_attention_backends": frozenset(),
     "missing_options": _MISSING_0102 - {"enable_dbo", "pooler_config", "structured_outputs_config"}
     | {"max_seq_len_to_capture"}},
    {"version": "0.11.1", "o_number": "dotted-mode", "o_values": _O_0_3, "o_any_int": False, "mode_key": "mode",
     "v0_env": False,
     "empty_splitting_ops": "split", "legacy_graph_flags": False, "context_parallel_piecewise": True,
     "spec_methods": _SPEC_METHODS, "serve_model_option": "moved", "attn_fusion_keys": ("enable_attn_fusion",),
     "model_rules_default_only": False, "capture_size_checks": True, "async_spec_methods": _EAGLE_MTP,
     "dcp_head_check": True,
     "missing_options": frozenset({"optimization_level", "performance_mode", "attention_config"})},
    {"version": "0.12.0", "family": "opt", "o_number": "optimization_level", "o_dotted": "deprecated",
     "aliases": _ALIASES_012, "graphs_without_compile": "none",
     "attn_fusion_keys": ("fuse_attn_quant", "enable_attn_fusion"), "pass_config_renamed": True,
     "missing_options": frozenset({"performance_mode", "attention_config"})},
    {"version": "0.33.0", "o_dotted": "error", "level_accepted": False, "aliases": _ALIASES_033,
     "graphs_without_compile": "downgrade", "context_parallel_piecewise": False, "torch_compile_disable": True,
     "all2all_env": False, "all2all_moe_only": True, "v2_runner_needs_compile": True,
     "encoder_decoder_mode": "FULL_DECODE_ONLY", "serve_model_option": "refused", "max_model_len_auto": True,
     "spec_refused_methods": frozenset(),
     "attn_fusion_keys": ("fuse_attn_quant",), "missing_options": frozenset({"cuda_graph_sizes"})},
)


def build(rows: tuple[dict[str, Any], ...]) -> tuple[Rules, ...]:
    """The table: the first row in full, each later row as the previous one with its changes."""
    table: list[Rules] = []
    for row in rows:
        table.append(replace(table[-1], **row) if table else Rules(**row))
    return tuple(table)


VERSIONS: tuple[Rules, ...] = build(ROWS)

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
