"""The vLLM version table: what each version does with the arguments that decide the CUDA graph mode.

One keyword row per version whose rules differ from the row before; each row names only what changed
and inherits the rest from the previous row. Adding a version is adding a row (and running the oracle,
docs/vllm.md "Adding a vLLM version"). A version not in the table is read by the nearest older row.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from hoststate.collectors.vllm_release import version_key as version_key  # part of this module's API


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
    #: Aliases (short spellings, and other long names of an option) -> dest.
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
    #: Model Runner V2 exists (0.33): the default runner on a GPU host (Triton present) unless the
    #: command uses something V2 lacks; ``VLLM_USE_V2_MODEL_RUNNER`` (an integer) forces it on or off.
    #: V2 captures no graphs with stock torch.compile (compilation mode 1); V1 and V2 each refuse what
    #: they do not support, and only V1 limits ``--async-scheduling``.
    model_runner_v2: bool
    #: Speculative methods Model Runner V2 lacks: with them the default runner is V1.
    v2_unsupported_spec_methods: frozenset[str]
    #: ``VLLM_USE_BREAKABLE_CUDAGRAPH=1`` (or, unset, a model architecture listed here): compilation
    #: mode NONE, yet piecewise graphs are kept (0.33).
    breakable_cudagraph: bool
    breakable_architectures: frozenset[str]
    #: Dynamic speculative decoding (``num_speculative_tokens_per_batch_size``) on Model Runner V1 with
    #: full graphs -> PIECEWISE, for the methods V1 keeps it for and without data parallel (0.33).
    dynamic_spec_v1_methods: frozenset[str]
    #: KV connectors that need PIECEWISE graphs (layer-by-layer transfers cannot be captured): connector ->
    #: the ``kv_connector_extra_config`` flag that turns that on (0.33; MultiConnector when a child needs it).
    piecewise_kv_connectors: Mapping[str, str]
    #: The MoonEP all2all backend (0.33): unquantized bfloat16 models without EPLB only; it is eager-only,
    #: so with data parallel (or expert parallel with prefill context parallel) no graphs.
    moonep_all2all: bool
    #: all2all backends dual batch overlap (``--enable-dbo``) works with on CUDA; empty: not checked.
    dbo_all2all_backends: frozenset[str]
    #: The deepep_high_throughput all2all rule runs only under VLLM_COMPILE (0.33 applies it in
    #: ``set_splitting_ops_for_v1``, which returns first for any other compilation mode).
    all2all_needs_compile: bool
    #: ``--convert`` other than auto/none makes a pooling runner by itself (up to 0.10.2, again in 0.33) or
    #: not (0.11-0.12: the runner comes from the architecture).
    convert_makes_pooling: bool
    #: Encoder-decoder models: any graph mode other than NONE and this one becomes this one:
    #: "PIECEWISE" (0.11-0.12: full graphs only) or "FULL_DECODE_ONLY" (0.33: piecewise too).
    encoder_decoder_mode: str
    #: ``vllm serve ... --model M``: "option" (an option; a positional model wins), "refused" (0.11.0) or
    #: "moved" (FlexibleArgumentParser.parse_args moves M to the front as the positional model, so a second
    #: positional is refused; 0.11.1-0.12 and 0.33).
    serve_model_option: str
    #: ``--max-model-len auto`` (any case) is accepted, as -1 (0.33).
    max_model_len_auto: bool
    #: Speculative methods the version knows (others are refused).
    spec_methods: frozenset[str]
    #: Known speculative methods the engine refuses at config time.
    spec_refused_methods: frozenset[str]
    #: pass_config keys that turn on attention+quant fusion, which empties splitting_ops so piecewise
    #: modes become FULL (CompilationConfig.set_splitting_ops_for_attn_fusion: 0.11.1 ``enable_attn_fusion``;
    #: 0.12 ``fuse_attn_quant``, ``enable_attn_fusion`` its deprecated spelling). Empty: no such rule.
    attn_fusion_keys: tuple[str, ...]
    #: ``compilation_config.use_inductor_graph_partition=true`` is a field: Inductor partitions the graph itself,
    #: so neither ``splitting_ops=[]`` nor attention fusion changes the graph mode
    #: (CompilationConfig.set_splitting_ops_for_v1, 0.11.0+).
    inductor_partition: bool
    #: pass_config's ``enable_*`` keys were renamed (``enable_attn_fusion`` -> ``fuse_attn_quant`` ...), the
    #: old spelling setting the new field (0.12+). Before, the new names are not fields and are ignored.
    pass_config_renamed: bool
    #: The old pass_config spellings are gone (0.33): no longer fields of PassConfig.
    pass_old_spellings_dropped: bool
    #: compilation_config keys the version does not have: "ignored" (accepted, no effect) or "refused"
    #: (0.33 forbids unknown fields: ``level``, ``full_cuda_graph``, old pass_config spellings).
    unknown_compilation_keys: str
    #: Pooling / encoder-decoder models replace full graphs only in the default mode (0.11.0), not an explicit
    #: one; from 0.11.1 VllmConfig.__post_init__ checks any mode with full graphs.
    model_rules_default_only: bool
    #: Speculative methods ``--async-scheduling`` accepts (0.11.0: none; 0.11.1+: EAGLE/MTP kinds,
    #: VllmConfig.__post_init__ checks EagleModelTypes; 0.33: those, ngram_gpu and draft models on Model
    #: Runner V1, any on V2).
    async_spec_methods: frozenset[str]
    #: Decode context parallel without MLA must split the KV heads (TP > heads, DCP <= TP // heads;
    #: ModelConfig.verify_with_parallel_config, 0.11.1+).
    dcp_head_check: bool
    #: ``VLLM_USE_V1=0`` selects the V0 engine: no compilation and no graphs by default (up to 0.11.0).
    v0_env: bool
    #: VLLM_ATTENTION_BACKEND values the V1 engine takes; with ``VLLM_USE_V1`` unset, another value, more
    #: than one concurrent partial prefill, ``--load-format sharded_state`` or an fp8 KV cache the attention
    #: backend cannot hold (EngineArgs._is_v1_supported_oracle) select the V0 engine, and
    #: ``VLLM_USE_V1=1`` with one is refused (0.10.2). Empty: no such fallback.
    v1_attention_backends: frozenset[str]
    #: With that fallback, an fp8 KV cache keeps V1 only on these VLLM_ATTENTION_BACKEND values, by model kind
    #: ("mla", "other"); unset, the default backend takes it on capability 9.0 (assumed, and recorded).
    fp8_kv_v1_backends: Mapping[str, frozenset[str]]
    #: Graphs with an empty capture-size list or a maximum capture size of 0 fail an assertion
    #: (VllmConfig._set_cudagraph_sizes, 0.11.1+).
    capture_size_checks: bool
    #: ``--cuda-graph-sizes`` / ``--cudagraph-capture-sizes`` / ``--max-cudagraph-capture-size`` next to the
    #: compilation_config key they set are refused as mutually exclusive (EngineArgs.create_engine_config, 0.11.1+).
    capture_options_exclusive: bool
    #: ``--max-num-seqs`` / ``--max-num-batched-tokens`` below 1 fail SchedulerConfig's validation (0.11.1+).
    scheduler_sizes_checked: bool
    #: With Inductor graph partition, ``splitting_ops=[]`` changes no graph mode (0.11.0-0.12 return before reading
    #: it); 0.33 skips only attention fusion for it, so an empty list still makes FULL_AND_PIECEWISE FULL.
    partition_keeps_splitting_ops: bool = True
    #: A world size (TP x PP x PCP) above the GPUs vLLM sees is refused when vLLM picks the executor itself
    #: (ParallelConfig.__post_init__, 0.11.1+; before, it turns to Ray, which fails later when it lacks them).
    world_size_checked: bool = False
    #: RoPE types whose ``factor`` is not applied to the derived maximum length, and whether ``yarn`` derives it
    #: from ``original_max_position_embeddings`` x factor (``_get_and_verify_max_len``, up to 0.12).
    rope_unscaled_types: frozenset[str] = frozenset({"su", "longrope", "llama3"})
    rope_yarn_from_original: bool = True
    #: LoRA with speculative decoding needs max_num_batched_tokens >= max_num_seqs x (num_speculative_tokens + 1)
    #: (EngineArgs.create_engine_config, 0.11.1+).
    lora_spec_budget: bool = False
    #: Speculative methods that need no draft model when num_speculative_tokens is given (the rest are refused
    #: without ``model``); 0.10.2 instead takes the target model as the draft for these target model types.
    spec_self_drafting: frozenset[str] = frozenset({"ngram"})
    spec_draft_target_types: frozenset[str] = frozenset()
    #: Prefill context parallel above 1 is refused (ParallelConfig, 0.12).
    pcp_refused: bool = False
    #: A KV connector with ``expandable_segments:True`` in PYTORCH_CUDA_ALLOC_CONF is refused unless the cumem
    #: allocator is on (VllmConfig._verify_kv_transfer_compat, 0.33).
    kv_refuses_expandable_segments: bool = False
    #: Options this version's parser does not have (dest names): using one is refused.
    missing_options: frozenset[str] = frozenset()
    #: ``--disable-X`` spellings of flags (0.33's EnableDisableAction): option -> dest set to False.
    disable_flags: Mapping[str, str] = field(default_factory=dict)
    #: Boolean dests whose ``--no-`` spelling this version's parser lacks (store_true flags; 0.33's
    #: enable/disable pairs): ``--no-X`` is refused.
    no_negation: frozenset[str] = frozenset()
    #: Flags of options.FALSE_BY_DEFAULT whose parser default is None in this version (vLLM decides when
    #: unset, 0.33): ``--no-X`` / ``--disable-X`` is then a setting vLLM records as non-default, not the default.
    none_default_flags: frozenset[str] = frozenset()
    #: The seed the engine takes when ``--seed`` is not given, where the parser default (None) does not say it:
    #: the V1 engine's ModelConfig.__post_init__ sets 0 (0.10-0.11; from 0.12 the parser default is 0 itself).
    seed_unset: int | None = None
    #: How the OpenAI server sizes its batches where ``--max-num-seqs`` / ``--max-num-batched-tokens`` are not given
    #: (sizes.batch_sizes): "clamped" (chunked prefill as given, the token budget clamped by the model length,
    #: 0.11.1-0.12.0: get_batch_defaults and what follows it; "tiered": as "clamped" with 0.33.0's 160 GiB tier,
    #: its GB10 exception and --performance-mode throughput doubling the unset sizes); None: not read from this
    #: version's code, or one whose V0 engine (VLLM_USE_V1=0, or a feature V1 lacks) sizes them otherwise (up to
    #: 0.11.0).
    batch_defaults: str | None = None
    #: ``--tokenizer-mode`` values the parser takes (ModelConfig's TokenizerMode Literal, so argparse has choices, up
    #: to 0.11.1); empty: any string, which ModelConfig lower-cases (``TokenizerMode | str``, 0.12+).
    tokenizer_modes: frozenset[str] = frozenset()
    #: Options this version's engine parses and never acts on, each with why.
    unused_options: Mapping[str, str] = field(default_factory=dict)
    #: How a ``--config`` YAML file becomes arguments (configfile.py): "str" (nested mappings written with str(),
    #: false keys dropped; up to 0.12) or "json" (json.dumps, false keys as ``--no-<key>`` where the parser has it).
    config_file_style: str = "str"
    #: SpeculativeConfig detects dflash/dspark draft models by name too (0.33; eagle/eagle3 in every version).
    spec_detects_new_names: bool = False
    #: Where ``--no-enable-chunked-prefill`` is kept, so that SchedulerConfig refuses max_num_batched_tokens below
    #: max_model_len: "all" models (0.11.1+), "pooling" ones only (0.11.0 turns it back on for generative models), or
    #: "" (not checked).
    chunked_prefill_off_checked: str = ""
    #: A generative decoder model runs with chunked prefill when the flag is not given (EngineArgs: 0.11.0
    #: _set_default_args, 0.12.0 _set_default_chunked_prefill_and_prefix_caching_args), so ``--enable-chunked-prefill``
    #: is its default; and 0.11.0 turns it on for such a model whatever is given (``chunked_prefill_forced``).
    chunked_prefill_default_on: bool = False
    chunked_prefill_forced: bool = False
    #: A generative model that is neither hybrid nor attention-free runs with prefix caching when the flag is not
    #: given (the parser default is None), so ``--enable-prefix-caching`` is its default (EngineArgs: 0.10.2
    #: _set_default_args_v1, 0.11.0 _set_default_args, 0.11.1 get_chunked_prefill_prefix_caching_defaults,
    #: 0.12.0 and 0.33.0 _set_default_chunked_prefill_and_prefix_caching_args with is_prefix_caching_supported).
    prefix_caching_default_on: bool = False
    #: The EngineArgs method that sets those defaults, cited in the reasons.
    engine_defaults_at: str = ""
    #: Those defaults are set only on the V1 engine (0.10.2: ``_set_default_args_v1``; the V0 engine's
    #: ``_set_default_args_v0`` keeps what is given), so they apply only where the V1 engine surely runs: none of
    #: the features ``_is_v1_supported_oracle`` falls back to V0 for, and no architecture listed here (model classes
    #: marked SupportsV0Only, which fail ``ModelConfig.is_v1_compatible``).
    defaults_v1_only: bool = False
    v0_only_architectures: frozenset[str] = frozenset()
    #: ``-O3`` builds the same configuration as ``-O2``, the default (0.12.0 vllm/config/vllm.py: "O3: Currently the
    #: same as -O2"; OPTIMIZATION_LEVEL_03 is OPTIMIZATION_LEVEL_02 and nothing else reads the level; 0.33.0's
    #: OPTIMIZATION_LEVEL_03 dict is OPTIMIZATION_LEVEL_02's, key for key, and VllmConfig.__post_init__ reads the
    #: level otherwise only as ``> OptimizationLevel.O0``).
    o3_same_as_o2: bool = False
    #: ``--enforce-eager`` turns any optimization level into O0 before the level's defaults are applied, so ``-O<n>``
    #: next to it builds the configuration of no ``-O`` (VllmConfig.__post_init__, vllm/config/vllm.py of 0.12.0:
    #: "Enforce eager set, overriding optimization level to -O0"). 0.33 keeps the level (its defaults still set
    #: ``kernel_config.enable_flashinfer_autotune``) and only turns compilation and graphs off.
    eager_overrides_opt_level: bool = False
    #: ``--async-scheduling`` left unset is turned on by VllmConfig.__post_init__ unless the model is a pooling one, the
    #: executor does not support it (only uni, mp and external_launcher do), ROCm's DeepEP DBO, or Model Runner V1
    #: with a speculative method it lacks or pipeline parallelism (vllm/config/vllm.py of 0.33.0:
    #: ``elif self.scheduler_config.async_scheduling is None``); up to 0.12.0 its parser default is False.
    async_scheduling_unset_on: bool = False
    #: ``--kv-cache-dtype`` choices (CacheDType); empty: not checked (not recorded for the version).
    kv_cache_dtypes: frozenset[str] = frozenset()
    #: Speculative methods whose draft model refuses pipeline parallelism (no SupportsPP), and the target model
    #: types EAGLE-3 drafts for (substrings of model_type); empty: not checked.
    spec_pp_refused_methods: frozenset[str] = frozenset()
    eagle3_targets: tuple[str, ...] = ()
    #: ``--quantization`` methods the version knows (QUANTIZATION_METHODS); empty: not checked.
    quantization_methods: frozenset[str] = frozenset()
    #: A 16-bit ``--kv-cache-dtype`` must be the model's dtype (0.33's VllmConfig).
    kv_dtype_matches_model: bool = False
    #: ``--quantization`` methods refused as deprecated unless --allow-deprecated-quantization (0.33).
    deprecated_quantization: frozenset[str] = frozenset()
    #: compilation_config's mode and level are checked as vLLM's CompilationConfig checks them (read from 0.10.2 on):
    #: a ``mode`` string must name a CompilationMode member in any case (validate_mode_before, 0.11.1+: ``"3"`` and
    #: the old CompilationLevel names such as PIECEWISE are refused); ``level`` is an int field, so pydantic refuses a
    #: string that is not a number.
    compilation_mode_checked: bool = False
    #: The KV cache block size CudaPlatform.check_and_update_config takes when ``--block-size`` is not given
    #: (vllm/platforms/cuda.py of 0.10.2-0.12.0: None becomes 16 before any backend adjusts it); hybrid models size it
    #: in HybridAttentionMambaModelConfig and MLA backends force their own. None: not read (0.33 records whether it
    #: was given, CacheConfig.user_specified_block_size).
    block_size_unset: int | None = None
    #: With no ``--distributed-executor-backend`` and a world size (TP x PP x PCP) above 1, ParallelConfig takes mp
    #: on a CUDA host unless data parallel uses Ray or the process runs in a Ray placement group
    #: (vllm/config/parallel.py __post_init__, 0.11.1 and 0.12.0).
    executor_mp_unset: bool = False
    #: The multiprocessing executor sets OMP_NUM_THREADS=1 in its process, before it starts the workers, where the
    #: variable is unset (set_multiprocessing_worker_envs: vllm/executor/multiproc_worker_utils.py in 0.10.2,
    #: vllm/v1/executor/multiproc_executor.py in 0.11.0-0.12.0); 0.33 decides elsewhere (v1/engine/utils.py).
    omp_one_under_mp: bool = False
    #: Concurrent partial prefills (max_num_partial_prefills / max_long_partial_prefills other than 1) refused (0.12).
    partial_prefills_refused: bool = False
    #: How vLLM sizes its CUDA graph captures where no size is given, read by sizes.capture_sizes: "single"
    #: (SchedulerConfig.__post_init__ fills an empty cuda_graph_sizes with [min(max_num_seqs x 2, 512)], and
    #: VllmConfig._set_cudagraph_sizes expands one value N to [1, 2, 4] + range(8, N + 1, 8), several sorted; 0.10.2
    #: and 0.11.0), "ladder" (VllmConfig._set_cudagraph_sizes takes max_cudagraph_capture_size = min(max_num_seqs x 2,
    #: 512) when none is given and captures 1, 2, 4, the multiples of 8 below 256, then of 16 up to it; 0.11.1 and
    #: 0.12.0), or None: not read, or sized from more than max_num_seqs (0.33 adds uniform-decode sizes, and 1024 on
    #: compute capability 10.0).
    capture_sizes_unset: str | None = None
    #: Architectures whose model config (vllm/model_executor/models/config.py, MODELS_CONFIG_MAP, applied by
    #: VllmConfig.try_verify_and_update_config before the sizes are set) changes the capture sizes: GptOssForCausalLM
    #: replaces one cuda_graph_sizes value below 1024 (0.11.0: 992) by its own ladder (0.10.2, 0.11.0), and takes a
    #: maximum of 1024 where neither sizes nor a maximum is given (0.11.1, 0.12.0). Their sizes are compared as given.
    capture_size_architectures: frozenset[str] = frozenset()
    #: Integer options the parser reads with human_readable_int (``8k`` = 8000, ``8K`` = 8192): EngineArgs
    #: ``get_kwargs`` ``human_readable_ints`` (vllm/engine/arg_utils.py, 0.10.2-0.12.0) and ``_compute_kwargs``
    #: ``human_readable_int_args`` (0.33.0: also the scheduler's token limits and the safetensors prefetch block size);
    #: ``--max-model-len`` has its own type (options.MAXLEN). Every other integer option is argparse's plain ``int``.
    human_int_options: frozenset[str] = frozenset({"max_num_batched_tokens", "kv_cache_memory_bytes"})
    #: human_readable_int multiplies ``t`` (10**12) and ``T`` (2**40) too (vllm/utils/argparse_utils.py of 0.33.0, also
    #: for ``--max-model-len``); before, its pattern matches them but no multiplier does, so ``int()`` refuses them
    #: (human_readable_int in vllm/engine/arg_utils.py of 0.10.2-0.12.0).
    human_int_tera: bool = False
    #: A dotted value (``-cc.max_cudagraph_capture_size=1k``) that is not JSON is tried as a human-readable int before
    #: it is kept as a string (FlexibleArgumentParser.parse_args, vllm/utils/argparse_utils.py ~478-486 of 0.33.0); up
    #: to 0.12.0 it stays a string (0.12.0 ~340-344), which an int field of the config refuses (compilation_int_keys).
    #: In no version are the items of ``key+ a,b`` read so: they are JSON-dumped as strings, a list of strings.
    dotted_human_ints: bool = False
    #: Options whose JSON value has its bare (unquoted) human-readable numbers expanded before pydantic reads it
    #: (``_expand_json_human_readable_numbers`` in the ``parse_dataclass`` type of a dataclass-typed option,
    #: vllm/engine/arg_utils.py ~302-320 and ~369-374 of 0.33.0): ``{"max_cudagraph_capture_size": 1k}`` is 1000
    #: there; elsewhere, and for ``--speculative-config`` (``json.loads``), it is invalid JSON.
    json_human_ints: frozenset[str] = frozenset()
    #: ``--all2all-backend`` choices: ParallelConfig's Literal, which literal_to_kwargs turns into argparse choices.
    #: Where the field admits None (0.11.1, 0.12.0) vLLM appends the string "None" to them, but optional_type returns
    #: None for "None" and "", which is not among them, so both are refused as well (as ``--quantization None`` up to
    #: 0.12.0); 0.33.0's field takes no None (type str). Empty: not checked.
    all2all_backends: frozenset[str] = frozenset()
    #: compilation_config keys (``pass_config.x`` for PassConfig's) typed int or a list of ints in the version's
    #: CompilationConfig, ``level`` aside (compilation_mode_checked): a pydantic dataclass in lax mode, so a string
    #: that is not an integer (``"1k"``) is refused, a numeric one (``"1000"``) read as the number. Empty: not checked.
    compilation_int_keys: frozenset[str] = frozenset()
    #: EngineArgs.create_speculative_config writes each ``--speculative-config`` key's dashes as underscores before
    #: it builds SpeculativeConfig (``{k.replace("-", "_"): v ...}``, vllm/engine/arg_utils.py of 0.33.0), so
    #: ``num-speculative-tokens`` is ``num_speculative_tokens``; before, a dashed key is no field (ignored).
    spec_keys_dashed: bool = False


_ALIASES_010 = {"-tp": "tensor_parallel_size", "-pp": "pipeline_parallel_size", "-dp": "data_parallel_size",
                "-q": "quantization", "-O": "compilation_config"}
_ALIASES_012 = {**{k: v for k, v in _ALIASES_010.items() if k != "-O"}, "-dcp": "decode_context_parallel_size",
                "-O": "optimization_level", "-cc": "compilation_config",
                "-pcp": "prefill_context_parallel_size", "-asc": "api_server_count", "-dpl": "data_parallel_size_local",
                "-dpa": "data_parallel_address", "-dpp": "data_parallel_rpc_port", "-dpb": "data_parallel_backend",
                "-dph": "data_parallel_hybrid_lb", "-dpe": "data_parallel_external_lb",
                "-dpr": "data_parallel_start_rank", "-dpn": "data_parallel_rank", "-n": "nnodes", "-r": "node_rank"}
_ALIASES_033 = {**_ALIASES_012, "-ac": "attention_config", "-sc": "speculative_config", "-ep": "enable_expert_parallel",
                "-dc": "diffusion_config", "-dpm": "data_parallel_multi_port_external_lb",
                "--device-memory-utilization": "gpu_memory_utilization"}
#: 0.33's speculative methods (vllm/config/speculative.py: EagleModelTypes with its MTP kinds, then the rest).
_EAGLE_033 = frozenset({
    "eagle", "eagle3", "extract_hidden_states", "dflash", "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp",
    "glm4_moe_mtp", "glm4_moe_lite_mtp", "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp",
    "exaone4_5_mtp", "qwen3_next_mtp", "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp", "bailing_hybrid_v3_mtp",
    "minimax_m3_mtp", "bailing_hybrid_mtp", "mtp", "kimi_k3_mtp", "pangu_ultra_moe_mtp", "step3p5_mtp", "step5_mtp",
    "hy_v3_mtp", "hy_v4_mtp", "gemma4_mtp", "inkling_mtp", "glm5_next_mtp"})
_SPEC_METHODS_033 = _EAGLE_033 | {"ngram", "draft_model", "suffix", "custom_class", "ngram_gpu", "dspark"}
#: Options of older versions that 0.33's parser no longer has.
_MISSING_033 = frozenset({"cuda_graph_sizes", "task", "swap_space", "calculate_kv_scales", "rope_scaling",
                          "disable_log_requests", "disable_frontend_multiprocessing", "guided_decoding_backend",
                          "enable_multimodal_encoder_data_parallel", "max_num_partial_prefills",
                          "max_seq_len_to_capture", "num_scheduler_steps", "override_pooler_config"})
#: Architectures 0.33 runs with breakable CUDA graphs unless VLLM_USE_BREAKABLE_CUDAGRAPH is set
#: (vllm/config/vllm.py, DEFAULT_BREAKABLE_CUDAGRAPH_ARCHITECTURES, CUDA platforms).
_BREAKABLE_033 = frozenset({
    "AliceAIForCausalLM", "BeamForCausalLM", "DeepseekV32MTPModel", "DeepseekV32ForCausalLM", "DeepseekV4ForCausalLM",
    "DeepseekV4ForConditionalGeneration", "DeepSeekV4MTPModel", "DeepseekV41ForCausalLM", "Dots3NoteForCausalLM",
    "Dots3NoteMTPModel", "Glm5NextForCausalLM", "Glm5NextForConditionalGeneration", "Glm5NextMTPModel",
    "GlmMoeDsaForCausalLM", "HYV4ForCausalLM", "HYV4MTPModel", "InklingForCausalLM", "InklingForConditionalGeneration",
    "KimiK3ForConditionalGeneration", "KimiK3MTPModel", "KimiLinearForCausalLM", "MiniMaxM3SparseForCausalLM",
    "MiniMaxM3SparseForConditionalGeneration", "MuseSpark1xForCausalLM", "MuseSparkForConditionalGeneration",
    "Qwen4ExpForCausalLM", "Qwen4ExpForConditionalGeneration", "Qwen4ExpMTP", "Step5ForCausalLM",
    "Step5ForConditionalGeneration"})
_ALIASES_0102 = {**_ALIASES_010, "-dcp": "decode_context_parallel_size", "-asc": "api_server_count",
                 "-dpn": "data_parallel_rank", "-dpr": "data_parallel_start_rank", "-dpl": "data_parallel_size_local",
                 "-dpa": "data_parallel_address", "-dpp": "data_parallel_rpc_port", "-dpb": "data_parallel_backend"}
_O_0_3 = frozenset("0123")
_SPEC_METHODS_0110 = frozenset({"ngram", "eagle", "eagle3", "medusa", "mlp_speculator", "draft_model", "deepseek_mtp",
                                "ernie_mtp", "qwen3_next_mtp", "mimo_mtp", "longcat_flash_mtp", "mtp"})
#: 0.11.0's MTP_MODEL_TYPES: each is read as method "mtp".
_MTP_0110 = frozenset({"deepseek_mtp", "mimo_mtp", "glm4_moe_mtp", "ernie_mtp", "qwen3_next_mtp", "longcat_flash_mtp"})
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

#: 0.10.2's architectures whose model class is SupportsV0Only (vllm/model_executor/models: Bart, Donut, Florence-2,
#: mBART, Mllama, Motif, Phi-4-flash), which ModelConfig.is_v1_compatible sends to the V0 engine.
_V0_ONLY_0102 = frozenset({"BartForConditionalGeneration", "BartModel", "DonutForConditionalGeneration",
                           "Florence2ForConditionalGeneration", "MBartForConditionalGeneration",
                           "MllamaForConditionalGeneration", "MotifForCausalLM", "Phi4FlashForCausalLM"})

#: 0.10.2 options later parsers dropped (each list from that version's own parser).
_V0_OPTIONS = frozenset({"disable_async_output_proc", "preemption_mode", "scheduler_delay_factor"})
_GONE_0111 = _V0_OPTIONS | {"enable_lora_bias", "rope_theta"}
_GONE_0120 = _GONE_0111 | {"eplb_log_balancedness", "eplb_step_interval", "eplb_window_size", "lora_extra_vocab_size",
                           "guided_decoding_disable_additional_properties", "guided_decoding_disable_any_whitespace",
                           "guided_decoding_disable_fallback", "num_lookahead_slots", "num_redundant_experts"}
_GONE_033 = _GONE_0120 | {"disable_mm_preprocessor_cache", "logits_processor_pattern", "max_long_partial_prefills",
                          "override_attention_dtype"}

#: Options that first appear in a version's parser (dests), each list from that version's own parser.
_NEW_0110 = frozenset({"allowed_media_domains", "dbo_decode_token_threshold", "dbo_prefill_token_threshold",
    "expert_placement_strategy", "mm_processor_cache_type", "mm_shm_cache_max_object_size_mb",
    "trust_request_chat_template", "video_pruning_rate"})
_NEW_0111 = frozenset({"aggregate_engine_logging", "dcp_kv_cache_interleave_size",
    "disable_nccl_for_dp_synchronization", "ec_transfer_config", "enable_mm_embeds", "kv_offloading_backend",
    "kv_offloading_size", "mamba_block_size", "master_addr", "master_port", "mm_encoder_attn_backend", "nnodes",
    "node_rank", "reasoning_parser_plugin", "stream_interval", "tokens_only"})
_NEW_0120 = frozenset({"cp_kv_cache_interleave_size", "kv_cache_metrics", "kv_cache_metrics_sample"})
_NEW_033 = frozenset({"allow_deprecated_quantization", "anthropic_disabled_thinking_effort", "aux_output_config",
    "cohere_format", "cohere_is_reasoning_model", "cpu_distributed_timeout_seconds", "cpu_offload_params",
    "cudagraph_metrics", "custom_histogram_buckets", "data_parallel_multi_port_external_lb",
    "data_parallel_supervisor_port", "dcp_comm_backend", "dcp_q_replicate", "default_chat_template_kwargs",
    "device_ids", "diffusion_config", "disable_access_log_for_endpoints", "distributed_timeout_seconds",
    "dp_supervisor_probe_failure_threshold", "dp_supervisor_probe_interval_s", "dp_supervisor_probe_timeout_s",
    "dp_sync_interval", "ec_manager_config", "elastic_ep_max_dp_size", "enable_batch_sharded_sampling",
    "enable_cumem_allocator", "enable_elastic_ep", "enable_ep_weight_filter", "enable_fault_tolerance",
    "enable_flash_late_interaction", "enable_flashinfer_autotune", "enable_hc_sp", "enable_layerwise_nvtx_tracing",
    "enable_log_deltas", "enable_logging_iteration_details", "enable_mamba_cache_stochastic_rounding",
    "enable_mamba_shared_prefix_checkpoint", "enable_mfu_metrics", "enable_mixed_moe_lora_format",
    "enable_moe_shared_loras", "enable_nccl_comm_suspend", "enable_offline_docs", "enable_per_request_metrics",
    "enable_return_routed_experts", "enable_scale_out", "enable_shm_tensor_arena", "enable_tower_connector_lora",
    "enable_trace_replay", "engram_config", "fail_on_environ_validation", "fault_tolerance_config",
    "fingerprint_mode", "fingerprint_value", "gdn_prefill_backend", "grpc", "grpc_port", "ir_op_priority",
    "jit_monitor_mode", "jit_monitor_verbose", "kda_decode_backend", "kda_prefill_backend", "kernel_config",
    "kv_cache_dtype_skip_layers", "language_model_only", "linear_backend", "log_level", "logging_config",
    "long_prefill_token_threshold_adaptive", "lora_target_modules", "mamba_backend", "mamba_cache_mode",
    "mamba_cache_philox_rounds", "mamba_ssu_algorithm", "max_lora_cls_labels", "max_num_active_seqs",
    "max_num_queued_reqs", "max_num_queued_tokens", "max_num_scheduled_tokens", "mm_device_do_normalize",
    "mm_encoder_attn_dtype", "mm_encoder_fp8_scale_path", "mm_encoder_fp8_scale_save_margin",
    "mm_encoder_fp8_scale_save_path", "mm_encoder_only", "mm_hasher_algorithm", "mm_ipc_gpu_memory_gb",
    "mm_processor_device", "mm_tensor_ipc", "model_class_overrides", "moe_backend", "monokernel", "numa_bind",
    "numa_bind_cpus", "numa_bind_nodes", "offload_backend", "offload_group_size", "offload_num_in_group",
    "offload_params", "offload_prefetch_step", "per_request_spec_decode_metrics", "prefill_schedule_interval",
    "prefix_cache_retention_interval", "prefix_match_unit", "profiler_config", "quantization_config",
    "reasoning_config", "reasoning_effort_map", "renderer_num_workers", "replayssm_buffer_len",
    "return_sampling_mask", "safetensors_prefetch_block_size", "safetensors_prefetch_num_threads",
    "scheduler_reserve_full_isl", "shutdown_timeout", "sleep_mode_backend", "sleep_mode_offload_cudagraph",
    "sleep_preserve_parameter_names", "sparse_indexer_topk_backend", "spec_method", "spec_model", "spec_tokens",
    "specialize_active_lora", "sse_keep_alive_interval", "ssl_ciphers", "swa_bounded_replay", "tool_strict_level",
    "trust_request_mm_kwargs", "ubatch_size", "use_fp64_gumbel", "use_replayssm", "video_pruning_method",
    "watchdog_config", "watermark", "watermark_config", "weight_transfer_config"})
_NEW_AFTER_0111 = _NEW_0120 | _NEW_033
_NEW_AFTER_0110 = _NEW_0111 | _NEW_AFTER_0111
_NEW_AFTER_0102 = _NEW_0110 | _NEW_AFTER_0110
#: CompilationConfig's int fields that take a value (vllm/config/compilation.py; level aside): 0.11.1 adds
#: max_cudagraph_capture_size and PassConfig loses fi_allreduce_fusion_max_token_num; 0.33.0 adds the encoder and
#: decoder-replay sizes, the compile range endpoints and PassConfig's rope_kvcache_fusion_max_token_num.
#: 0.33.0's dataclass-typed options (type ``parse_dataclass``, or ``optional_type`` of it: the recorded parser's types
#: and vllm/engine/arg_utils.py's annotations) that hoststate reads as JSON.
#: ``--all2all-backend`` choices: ParallelConfig.all2all_backend's Literal (vllm/config/parallel.py ~125-135 of 0.12.0,
#: the same in 0.11.1) and 0.33.0's All2AllBackend (~45-60).
_ALL2ALL_0111 = frozenset({"naive", "pplx", "deepep_high_throughput", "deepep_low_latency", "allgather_reducescatter",
                           "flashinfer_all2allv"})
_ALL2ALL_033 = _ALL2ALL_0111 | {"deepep_v2", "mori_high_throughput", "mori_low_latency", "moonep", "nixl_ep",
                                "flashinfer_nvlink_two_sided", "flashinfer_nvlink_one_sided", "passthrough"}
_JSON_HUMAN_033 = frozenset({
    "compilation_config", "attention_config", "eplb_config", "structured_outputs_config", "kernel_config",
    "profiler_config", "logging_config", "ir_op_priority", "aux_output_config", "ec_manager_config",
    "fault_tolerance_config", "watchdog_config", "pooler_config", "kv_transfer_config", "kv_events_config"})
_CC_INTS_0102 = frozenset({"cudagraph_num_of_warmups", "cudagraph_capture_sizes",
                           "pass_config.fi_allreduce_fusion_max_token_num"})
_CC_INTS_0111 = frozenset({"cudagraph_num_of_warmups", "cudagraph_capture_sizes", "max_cudagraph_capture_size"})
_CC_INTS_033 = _CC_INTS_0111 | {"encoder_cudagraph_token_budgets", "encoder_cudagraph_max_vision_items_per_batch",
                                "encoder_cudagraph_max_frames_per_batch", "decoder_replay_cudagraph_capture_sizes",
                                "decoder_replay_trim_threshold", "compile_ranges_endpoints",
                                "pass_config.rope_kvcache_fusion_max_token_num"}

#: Boolean flags without a ``--no-`` spelling (store_true), from each version's parser.
_NO_NEGATION_0102 = frozenset({"disable_async_output_proc", "disable_log_stats", "disable_mm_preprocessor_cache",
                               "enable_multimodal_encoder_data_parallel", "headless"})
#: 0.11.x keeps the guided_decoding_disable_* flags as deprecated options that take a value.
_NO_NEGATION_0110 = _NO_NEGATION_0102 - _V0_OPTIONS | {"guided_decoding_disable_additional_properties",
                                                      "guided_decoding_disable_any_whitespace",
                                                      "guided_decoding_disable_fallback"}
#: 0.33's enable/disable pairs (EnableDisableAction): ``--enable-X``/``--disable-X``; the declared spelling's ``--no-``
#: form (``--no-enable-X`` for an enable_X dest, ``--no-disable-X`` for a disable_X dest) is still accepted, only
#: hidden from ``--help``.
_ENABLE_DISABLE_033 = frozenset({
    "disable_cascade_attn", "disable_chunked_mm_input", "disable_custom_all_reduce", "disable_fastapi_docs",
    "disable_hybrid_kv_cache_manager", "disable_nccl_for_dp_synchronization", "disable_sliding_window",
    "disable_uvicorn_access_log", "enable_auto_tool_choice", "enable_batch_sharded_sampling",
    "enable_chunked_prefill", "enable_cumem_allocator", "enable_dbo", "enable_elastic_ep", "enable_ep_weight_filter",
    "enable_eplb", "enable_expert_parallel", "enable_fault_tolerance", "enable_flash_late_interaction",
    "enable_flashinfer_autotune", "enable_force_include_usage", "enable_hc_sp", "enable_layerwise_nvtx_tracing",
    "enable_log_deltas", "enable_log_outputs", "enable_log_requests", "enable_logging_iteration_details",
    "enable_lora", "enable_mamba_cache_stochastic_rounding", "enable_mamba_shared_prefix_checkpoint",
    "enable_mfu_metrics", "enable_mixed_moe_lora_format", "enable_mm_embeds", "enable_moe_shared_loras",
    "enable_nccl_comm_suspend", "enable_offline_docs", "enable_per_request_metrics", "enable_prefix_caching",
    "enable_prompt_embeds", "enable_prompt_tokens_details", "enable_request_id_headers",
    "enable_return_routed_experts", "enable_scale_out", "enable_server_load_tracking", "enable_shm_tensor_arena",
    "enable_sleep_mode", "enable_ssl_refresh", "enable_tokenizer_info_endpoint", "enable_tower_connector_lora",
    "enable_trace_replay"})
_DISABLE_FLAGS_033 = {("--disable-" + d[7:] if d.startswith("enable_") else "--enable-" + d[8:]).replace("_", "-"): d
                      for d in _ENABLE_DISABLE_033}

#: ``--kv-cache-dtype`` choices and ``--quantization`` methods, read from each installed version's own modules
#: (``typing.get_args(vllm.config.cache.CacheDType)``,
#: ``vllm.model_executor.layers.quantization.QUANTIZATION_METHODS``).
_KV_0102 = frozenset({"auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"})
_KV_0110 = _KV_0102 | {"bfloat16"}
_KV_012 = _KV_0110 | {"fp8_ds_mla"}  # from 0.11.1
_QUANT_0102 = frozenset({  # 0.10.2 and 0.11.0
    "auto-round", "awq", "awq_marlin", "bitblas", "bitsandbytes", "compressed-tensors", "deepspeedfp", "experts_int8",
    "fbgemm_fp8", "fp8", "gguf", "gptq", "gptq_bitblas", "gptq_marlin", "gptq_marlin_24", "hqq", "inc", "ipex",
    "modelopt", "modelopt_fp4", "moe_wna16", "mxfp4", "petit_nvfp4", "ptpc_fp8", "quark", "rtn", "torchao", "tpu_int8"})
_QUANT_0111 = _QUANT_0102 | {"fp_quant"}
_KV_033 = frozenset({
    "auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc", "fp8_ds_mla", "nvfp4_ds_mla",
    "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc", "turboquant_3bit_nc", "octave_k3v4", "octave_k3v3",
    "octave_k3v3_compact", "ultraquant_4bit", "int4_per_token_head", "int8_per_token_head", "fp8_per_token_head",
    "nvfp4", "nvfp4_4over6"})
_QUANT_012 = _QUANT_0111 | {"cpu_gptq", "cpu_awq"}
_QUANT_033 = frozenset({
    "awq", "auto_awq", "fp8", "fbgemm_fp8", "fp_quant", "modelopt", "modelopt_fp4", "modelopt_mxfp8", "modelopt_mixed",
    "auto_gptq", "gptq", "gptq_marlin", "awq_marlin", "humming", "compressed-tensors", "experts_int8", "quark",
    "moe_wna16", "torchao", "inc", "mxfp4", "gpt_oss_mxfp4", "deepseek_v4_fp8", "online", "fp8_per_tensor",
    "fp8_per_block", "fp8_per_channel", "int8_per_channel_weight_only", "nvfp4_per_token", "mxfp8"})

#: The rows, oldest first. The first row names every field; each later one only what changed.
ROWS: tuple[dict[str, Any], ...] = (
    {"version": "0.10.0", "family": "v10.0", "o_number": "full", "o_values": frozenset("01234"), "o_any_int": False,
     "o_dotted": "ok", "seed_unset": 0, "tokenizer_modes": frozenset({"auto", "slow", "mistral", "custom"}),
     "mode_key": "level", "level_accepted": True, "aliases": _ALIASES_010, "graphs_without_compile": "refused",
     "empty_splitting_ops": "piecewise-to-full", "legacy_graph_flags": True, "legacy_flags_in_config": False,
     "context_parallel_piecewise": False, "torch_compile_disable": False, "all2all_env": True,
     "all2all_moe_only": False, "all2all_ht_mode": "NONE", "model_runner_v2": False,
     "v2_unsupported_spec_methods": frozenset(), "breakable_cudagraph": False,
     "breakable_architectures": frozenset(), "all2all_needs_compile": False, "moonep_all2all": False,
     "dbo_all2all_backends": frozenset(), "dynamic_spec_v1_methods": frozenset(),
     "piecewise_kv_connectors": {}, "convert_makes_pooling": True,
     "encoder_decoder_mode": "PIECEWISE", "serve_model_option": "option", "max_model_len_auto": False,
     "spec_methods": _SPEC_METHODS_0110, "spec_refused_methods": frozenset(), "attn_fusion_keys": (),
     "pass_config_renamed": False, "pass_old_spellings_dropped": False, "unknown_compilation_keys": "ignored",
     "inductor_partition": False, "model_rules_default_only": True, "async_spec_methods": frozenset(),
     "dcp_head_check": False, "v0_env": True, "v1_attention_backends": frozenset(), "fp8_kv_v1_backends": {},
     "capture_size_checks": False, "capture_options_exclusive": False, "scheduler_sizes_checked": False,
     "spec_draft_target_types": frozenset({"deepseek_v3", "mimo", "ernie4_5_moe", "qwen3_next"}),
     "missing_options": frozenset({"optimization_level", "cudagraph_capture_sizes", "max_cudagraph_capture_size",
                                   "performance_mode", "all2all_backend", "attention_config",
                                   "decode_context_parallel_size"}) | _NEW_AFTER_0102},
    {"version": "0.10.1", "family": "v10"},
    {"version": "0.10.2", "o_number": "dotted-level", "o_values": _O_0_3, "o_any_int": True, "omp_one_under_mp": True,
     "kv_cache_dtypes": _KV_0102, "quantization_methods": _QUANT_0102, "chunked_prefill_off_checked": "pooling",
     "chunked_prefill_forced": True, "prefix_caching_default_on": True, "engine_defaults_at": "_set_default_args_v1",
     "defaults_v1_only": True, "v0_only_architectures": _V0_ONLY_0102, "compilation_mode_checked": True,
     "compilation_int_keys": _CC_INTS_0102,
     "block_size_unset": 16, "capture_sizes_unset": "single",
     "capture_size_architectures": frozenset({"GptOssForCausalLM"}),
     "spec_pp_refused_methods": frozenset({"eagle", "eagle3"}), "eagle3_targets": ("llama", "qwen"),
     "aliases": _ALIASES_0102, "serve_model_option": "refused",
     "legacy_flags_in_config": True, "all2all_ht_mode": "PIECEWISE", "spec_methods": _SPEC_METHODS_0102,
     "spec_refused_methods": frozenset({"draft_model"}), "v1_attention_backends": _V1_BACKENDS_0102,
     "fp8_kv_v1_backends": {"other": frozenset({"FLASH_ATTN_VLLM_V1", "FLASHINFER", "TRITON_ATTN_VLLM_V1"}),
                            "mla": frozenset({"FLASHMLA", "CUTLASS_MLA"})},
     "missing_options": _MISSING_0102 | _NEW_AFTER_0102, "no_negation": _NO_NEGATION_0102},
    {"version": "0.11.0", "family": "v11", "convert_makes_pooling": False, "all2all_ht_mode": "NONE",
     "chunked_prefill_default_on": True, "chunked_prefill_forced": True, "engine_defaults_at": "_set_default_args",
     "defaults_v1_only": False, "v0_only_architectures": frozenset(),
     "unused_options": {"swap_space": "only the V1 engine remains, and it allocates no CPU swap blocks "
                                      "(v1/engine/core.py: num_cpu_blocks = 0; CacheConfig only checks the size "
                                      "against host memory)"},
     "kv_cache_dtypes": _KV_0110, "quantization_methods": _QUANT_0102,
     "eagle3_targets": ("llama", "qwen", "minicpm", "gpt_oss"),
     "inductor_partition": True, "spec_draft_target_types": frozenset(),
     "spec_self_drafting": frozenset({"ngram", "mtp"}) | _MTP_0110,
     "spec_methods": _SPEC_METHODS_0110, "v1_attention_backends": frozenset(), "fp8_kv_v1_backends": {},
     "missing_options": _MISSING_0102 - {"enable_dbo", "pooler_config", "structured_outputs_config"}
     | {"max_seq_len_to_capture"} | _V0_OPTIONS | _NEW_AFTER_0110, "no_negation": _NO_NEGATION_0110},
    {"version": "0.11.1", "o_number": "dotted-mode", "o_values": _O_0_3, "o_any_int": False, "mode_key": "mode",
     "v0_env": False,
     "empty_splitting_ops": "split", "legacy_graph_flags": False, "context_parallel_piecewise": True,
     "spec_methods": _SPEC_METHODS, "serve_model_option": "moved", "attn_fusion_keys": ("enable_attn_fusion",),
     "model_rules_default_only": False, "capture_size_checks": True, "async_spec_methods": _EAGLE_MTP,
     "dcp_head_check": True, "capture_options_exclusive": True, "scheduler_sizes_checked": True,
     "world_size_checked": True, "lora_spec_budget": True, "chunked_prefill_off_checked": "all",
     "chunked_prefill_forced": False, "batch_defaults": "clamped", "capture_sizes_unset": "ladder",
     "engine_defaults_at": "get_chunked_prefill_prefix_caching_defaults", "executor_mp_unset": True,
     "kv_cache_dtypes": _KV_012, "quantization_methods": _QUANT_0111, "partial_prefills_refused": True,
     "compilation_int_keys": _CC_INTS_0111, "all2all_backends": _ALL2ALL_0111,
     "spec_self_drafting": frozenset({"ngram", "suffix"}) | (_EAGLE_MTP - {"eagle", "eagle3"}),
     "aliases": {**_ALIASES_0102, "-dph": "data_parallel_hybrid_lb", "-dpe": "data_parallel_external_lb",
                 "-n": "nnodes", "-r": "node_rank"},
     "missing_options": frozenset({"optimization_level", "performance_mode", "attention_config", "attention_backend",
                                   "max_seq_len_to_capture", "num_scheduler_steps", "prefill_context_parallel_size",
                                   "rope_scaling"}) | _GONE_0111 | _NEW_AFTER_0111,
     "no_negation": _NO_NEGATION_0110 | {"aggregate_engine_logging"}},
    {"version": "0.12.0", "family": "opt", "o_number": "optimization_level", "o_dotted": "deprecated",
     "o3_same_as_o2": True, "eager_overrides_opt_level": True,
     "engine_defaults_at": "_set_default_chunked_prefill_and_prefix_caching_args",
     "tokenizer_modes": frozenset(),
     "seed_unset": None, "quantization_methods": _QUANT_012,
     "aliases": _ALIASES_012, "graphs_without_compile": "none", "pcp_refused": True,
     "attn_fusion_keys": ("fuse_attn_quant", "enable_attn_fusion"), "pass_config_renamed": True,
     "missing_options": frozenset({"performance_mode", "attention_config", "attention_backend",
                                   "max_seq_len_to_capture", "num_scheduler_steps", "rope_scaling",
                                   "guided_decoding_backend", "override_pooler_config"}) | _GONE_0120 | _NEW_033},
    {"version": "0.33.0", "o_dotted": "error", "level_accepted": False, "aliases": _ALIASES_033,
     "batch_defaults": "tiered",
     "block_size_unset": None, "executor_mp_unset": False,  # not read from this version's code
     "capture_sizes_unset": None, "capture_size_architectures": frozenset(),  # 0.33 sizes by more than max_num_seqs
     "omp_one_under_mp": False, "eager_overrides_opt_level": False, "async_scheduling_unset_on": True,
     "graphs_without_compile": "downgrade", "context_parallel_piecewise": False, "torch_compile_disable": True,
     "pcp_refused": False, "partition_keeps_splitting_ops": False, "kv_refuses_expandable_segments": True,
     "rope_unscaled_types": frozenset({"su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling"}),
     "rope_yarn_from_original": False,
     "spec_self_drafting": frozenset({"ngram", "ngram_gpu", "suffix", "dspark", "extract_hidden_states"})
     | (_EAGLE_033 - {"eagle", "eagle3", "extract_hidden_states", "dflash"}),
     "all2all_env": False, "all2all_moe_only": True, "model_runner_v2": True,
     "v2_unsupported_spec_methods": frozenset({"suffix", "custom_class"}), "breakable_cudagraph": True,
     "breakable_architectures": _BREAKABLE_033, "all2all_needs_compile": True, "moonep_all2all": True,
     "dynamic_spec_v1_methods": frozenset({"ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash"}),
     "piecewise_kv_connectors": {"LMCacheConnectorV1": "use_layerwise"},
     "dbo_all2all_backends": frozenset({"deepep_low_latency", "deepep_high_throughput", "nixl_ep"}),
     "encoder_decoder_mode": "FULL_DECODE_ONLY", "max_model_len_auto": True, "convert_makes_pooling": True,
     "disable_flags": _DISABLE_FLAGS_033, "no_negation": frozenset({
         "aggregate_engine_logging", "data_parallel_multi_port_external_lb", "disable_log_stats", "grpc", "headless"}),
     "spec_methods": _SPEC_METHODS_033, "spec_refused_methods": frozenset(),
     "async_spec_methods": _EAGLE_033 | {"ngram_gpu", "draft_model", "dspark"},
     "attn_fusion_keys": ("fuse_attn_quant",), "pass_old_spellings_dropped": True,
     "unknown_compilation_keys": "refused", "missing_options": _MISSING_033 | _GONE_033, "config_file_style": "json",
     "spec_detects_new_names": True, "kv_cache_dtypes": _KV_033, "quantization_methods": _QUANT_033,
     "kv_dtype_matches_model": True, "spec_pp_refused_methods": frozenset(), "eagle3_targets": (),
     "deprecated_quantization": frozenset({"fbgemm_fp8", "fp_quant"}),
     "human_int_tera": True, "dotted_human_ints": True, "compilation_int_keys": _CC_INTS_033,
     "json_human_ints": _JSON_HUMAN_033, "all2all_backends": _ALL2ALL_033, "spec_keys_dashed": True,
     "human_int_options": frozenset({"max_num_batched_tokens", "kv_cache_memory_bytes", "max_num_scheduled_tokens",
                                     "max_num_queued_tokens", "safetensors_prefetch_block_size"}),
     "none_default_flags": frozenset({"async_scheduling", "disable_cascade_attn", "disable_hybrid_kv_cache_manager",
                                      "disable_nccl_for_dp_synchronization"})},
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
