"""vLLM's server options: dest name -> value type, and how one value is converted.

The long spelling of a dest is ``--`` + the dest with dashes; booleans also take ``--no-``. Which
options a given version lacks is a column of the version table (versions.py), not of this table.
"""

from __future__ import annotations

import json
import re
from typing import Any

BOOL, INT, FLOAT, STR, JSON, LIST, INTLIST, MAXLEN = "bool", "int", "float", "str", "json", "list", "intlist", "maxlen"
#: A value vLLM parses with ``json.loads`` itself: any JSON value (``--allowed-origins '["*"]'``), not only an object.
JSONVAL = "jsonval"
#: vLLM's ``union_dict_and_str``: text in braces is JSON (refused when it is not), any other text a plain string.
DICTSTR = "dictstr"

OPTIONS: dict[str, str] = {
    # model and loading
    "model": STR, "tokenizer": STR, "revision": STR, "tokenizer_mode": STR, "dtype": STR, "quantization": STR,
    "load_format": STR, "download_dir": STR, "served_model_name": LIST, "trust_remote_code": BOOL, "seed": INT,
    "runner": STR, "convert": STR, "task": STR, "hf_token": STR, "hf_overrides": DICTSTR, "max_model_len": MAXLEN,
    "skip_tokenizer_init": BOOL, "generation_config": STR, "override_generation_config": JSON,
    "model_loader_extra_config": DICTSTR, "max_logprobs": INT, "enable_sleep_mode": BOOL, "config_format": STR,
    "kv_cache_dtype": STR, "calculate_kv_scales": BOOL, "rope_scaling": JSON, "limit_mm_per_prompt": JSON,
    "mm_processor_kwargs": JSON, "mm_processor_cache_gb": FLOAT, "pooler_config": JSON,
    "override_pooler_config": JSON, "logits_processors": LIST, "enable_lora": BOOL, "max_loras": INT,
    "max_lora_rank": INT, "lora_modules": LIST, "fully_sharded_loras": BOOL, "ignore_patterns": LIST,
    # parallelism
    "tensor_parallel_size": INT, "pipeline_parallel_size": INT, "data_parallel_size": INT,
    "data_parallel_size_local": INT, "data_parallel_rank": INT,
    "decode_context_parallel_size": INT, "prefill_context_parallel_size": INT,
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
    "enforce_eager": BOOL, "compilation_config": JSON, "optimization_level": STR, "max_seq_len_to_capture": INT,
    "cuda_graph_sizes": INTLIST, "cudagraph_capture_sizes": INTLIST, "max_cudagraph_capture_size": INT,
    "attention_backend": STR, "attention_config": JSON,
    # speculative decoding, KV transfer, structured outputs
    "speculative_config": JSON, "kv_transfer_config": JSON, "kv_events_config": JSON,
    "structured_outputs_config": JSON, "additional_config": DICTSTR, "guided_decoding_backend": STR,
    # observability
    "disable_log_stats": BOOL, "disable_log_requests": BOOL, "enable_log_requests": BOOL, "enable_log_outputs": BOOL,
    "otlp_traces_endpoint": STR, "collect_detailed_traces": STR, "use_tqdm_on_load": BOOL,
    # server
    "host": STR, "port": INT, "uds": STR, "api_key": LIST, "root_path": STR, "ssl_keyfile": STR, "ssl_certfile": STR,
    "ssl_ca_certs": STR, "allowed_origins": JSONVAL, "allow_credentials": BOOL, "middleware": LIST,
    "uvicorn_log_level": STR, "disable_uvicorn_access_log": BOOL, "disable_fastapi_docs": BOOL,
    "api_server_count": INT, "disable_frontend_multiprocessing": BOOL, "enable_auto_tool_choice": BOOL,
    "tool_call_parser": STR, "reasoning_parser": STR, "chat_template": STR, "response_role": STR,
    "enable_request_id_headers": BOOL, "enable_prompt_tokens_details": BOOL, "enable_force_include_usage": BOOL,
    "enable_server_load_tracking": BOOL, "return_tokens_as_token_ids": BOOL, "max_log_len": INT,
    "config": STR,
    # accepted by 0.10.2's parser (later versions drop some: the version table's missing_options)
    "allowed_headers": JSONVAL, "allowed_methods": JSONVAL, "allowed_local_media_path": STR,
    "chat_template_content_format": STR, "code_revision": STR, "default_mm_loras": JSON,
    "disable_async_output_proc": BOOL, "disable_mm_preprocessor_cache": BOOL, "enable_lora_bias": BOOL,
    "enable_prompt_embeds": BOOL, "enable_ssl_refresh": BOOL, "enable_tokenizer_info_endpoint": BOOL,
    "eplb_log_balancedness": BOOL, "eplb_step_interval": INT, "eplb_window_size": INT,
    "exclude_tools_when_tool_choice_none": BOOL, "guided_decoding_disable_additional_properties": BOOL,
    "guided_decoding_disable_any_whitespace": BOOL, "guided_decoding_disable_fallback": BOOL,
    "h11_max_header_count": INT, "h11_max_incomplete_event_size": INT, "hf_config_path": STR,
    "interleave_mm_strings": BOOL, "io_processor_plugin": STR, "kv_sharing_fast_prefill": BOOL,
    "log_config_file": STR, "log_error_stack": BOOL, "logits_processor_pattern": STR, "logprobs_mode": STR,
    "lora_dtype": STR, "lora_extra_vocab_size": INT, "mamba_cache_dtype": STR, "mamba_ssm_cache_dtype": STR,
    "max_cpu_loras": INT, "max_long_partial_prefills": INT, "max_parallel_loading_workers": INT,
    "media_io_kwargs": JSON, "mm_encoder_tp_mode": STR, "model_impl": STR, "num_lookahead_slots": INT,
    "num_redundant_experts": INT, "override_attention_dtype": STR, "preemption_mode": STR,
    "pt_load_map_location": STR, "ray_workers_use_nsight": BOOL, "rope_theta": FLOAT,
    "safetensors_load_strategy": STR, "scheduler_cls": STR, "scheduler_delay_factor": FLOAT,
    "show_hidden_metrics_for_version": STR, "skip_mm_profiling": BOOL, "ssl_cert_reqs": INT,
    "tokenizer_revision": STR, "tool_parser_plugin": STR, "tool_server": STR, "worker_extension_cls": STR,
    # the rest of 0.11.0-0.33.0's parsers (fixtures/vllm/oracle/options): none of them changes the graph mode;
    # a value vLLM checks by a type not named here (an optional int...) is read as a string
    "aggregate_engine_logging": BOOL, "allow_deprecated_quantization": BOOL, "allowed_media_domains": LIST,
    "anthropic_disabled_thinking_effort": STR, "aux_output_config": JSON, "cohere_format": STR,
    "cohere_is_reasoning_model": BOOL, "cp_kv_cache_interleave_size": INT, "cpu_distributed_timeout_seconds": STR,
    "cpu_offload_params": LIST, "cudagraph_metrics": BOOL, "custom_histogram_buckets": STR,
    "data_parallel_multi_port_external_lb": BOOL, "data_parallel_supervisor_port": INT,
    "dbo_decode_token_threshold": INT, "dbo_prefill_token_threshold": INT, "dcp_comm_backend": STR,
    "dcp_kv_cache_interleave_size": INT, "dcp_q_replicate": BOOL, "default_chat_template_kwargs": JSONVAL,
    "device_ids": STR, "diffusion_config": STR, "disable_access_log_for_endpoints": STR,
    "disable_nccl_for_dp_synchronization": BOOL, "distributed_timeout_seconds": STR,
    "dp_supervisor_probe_failure_threshold": INT, "dp_supervisor_probe_interval_s": FLOAT,
    "dp_supervisor_probe_timeout_s": FLOAT, "dp_sync_interval": INT, "ec_manager_config": JSON,
    "ec_transfer_config": STR, "elastic_ep_max_dp_size": INT, "enable_batch_sharded_sampling": BOOL,
    "enable_cumem_allocator": BOOL, "enable_elastic_ep": BOOL, "enable_ep_weight_filter": BOOL,
    "enable_fault_tolerance": BOOL, "enable_flash_late_interaction": BOOL, "enable_flashinfer_autotune": BOOL,
    "enable_hc_sp": BOOL, "enable_layerwise_nvtx_tracing": BOOL, "enable_log_deltas": BOOL,
    "enable_logging_iteration_details": BOOL, "enable_mamba_cache_stochastic_rounding": BOOL,
    "enable_mamba_shared_prefix_checkpoint": BOOL, "enable_mfu_metrics": BOOL, "enable_mixed_moe_lora_format": BOOL,
    "enable_mm_embeds": BOOL, "enable_moe_shared_loras": BOOL, "enable_nccl_comm_suspend": BOOL,
    "enable_offline_docs": BOOL, "enable_per_request_metrics": BOOL, "enable_return_routed_experts": BOOL,
    "enable_scale_out": BOOL, "enable_shm_tensor_arena": BOOL, "enable_tower_connector_lora": BOOL,
    "enable_trace_replay": BOOL, "engram_config": STR, "expert_placement_strategy": STR,
    "fail_on_environ_validation": BOOL, "fault_tolerance_config": JSON, "fingerprint_mode": STR,
    "fingerprint_value": STR, "gdn_prefill_backend": STR, "grpc": BOOL, "grpc_port": STR, "ir_op_priority": JSON,
    "jit_monitor_mode": STR, "jit_monitor_verbose": BOOL, "kda_decode_backend": STR, "kda_prefill_backend": STR,
    "kernel_config": JSON, "kv_cache_dtype_skip_layers": LIST, "kv_cache_metrics": BOOL,
    "kv_cache_metrics_sample": FLOAT, "kv_offloading_backend": STR, "kv_offloading_size": STR,
    "language_model_only": BOOL, "linear_backend": STR, "log_level": STR, "logging_config": JSON,
    "long_prefill_token_threshold_adaptive": BOOL, "lora_target_modules": LIST, "mamba_backend": STR,
    "mamba_block_size": STR, "mamba_cache_mode": STR, "mamba_cache_philox_rounds": INT, "mamba_ssu_algorithm": STR,
    "master_addr": STR, "master_port": INT, "max_lora_cls_labels": STR, "max_num_active_seqs": STR,
    "max_num_queued_reqs": STR, "max_num_queued_tokens": INT, "max_num_scheduled_tokens": INT,
    "mm_device_do_normalize": BOOL, "mm_encoder_attn_backend": STR, "mm_encoder_attn_dtype": STR,
    "mm_encoder_fp8_scale_path": STR, "mm_encoder_fp8_scale_save_margin": FLOAT,
    "mm_encoder_fp8_scale_save_path": STR, "mm_encoder_only": BOOL, "mm_hasher_algorithm": STR,
    "mm_ipc_gpu_memory_gb": FLOAT, "mm_processor_cache_type": STR, "mm_processor_device": STR,
    "mm_shm_cache_max_object_size_mb": INT, "mm_tensor_ipc": STR, "model_class_overrides": JSON, "moe_backend": STR,
    "monokernel": BOOL, "nnodes": INT, "node_rank": INT, "numa_bind": BOOL, "numa_bind_cpus": LIST,
    "numa_bind_nodes": LIST, "offload_backend": STR, "offload_group_size": INT, "offload_num_in_group": INT,
    "offload_params": LIST, "offload_prefetch_step": INT, "per_request_spec_decode_metrics": STR,
    "prefill_schedule_interval": INT, "prefix_cache_retention_interval": STR, "prefix_match_unit": STR,
    "profiler_config": JSON, "quantization_config": STR, "reasoning_config": STR, "reasoning_effort_map": JSONVAL,
    "reasoning_parser_plugin": STR, "renderer_num_workers": INT, "replayssm_buffer_len": INT,
    "return_sampling_mask": BOOL, "safetensors_prefetch_block_size": INT, "safetensors_prefetch_num_threads": INT,
    "scheduler_reserve_full_isl": BOOL, "shutdown_timeout": INT, "sleep_mode_backend": STR,
    "sleep_mode_offload_cudagraph": BOOL, "sleep_preserve_parameter_names": LIST, "sparse_indexer_topk_backend": STR,
    "spec_method": STR, "spec_model": STR, "spec_tokens": INT, "specialize_active_lora": BOOL,
    "sse_keep_alive_interval": INT, "ssl_ciphers": STR, "stream_interval": INT, "swa_bounded_replay": BOOL,
    "tokens_only": BOOL, "tool_strict_level": STR, "trust_request_chat_template": BOOL,
    "trust_request_mm_kwargs": BOOL, "ubatch_size": INT, "use_fp64_gumbel": BOOL, "use_replayssm": BOOL,
    "video_pruning_method": STR, "video_pruning_rate": STR, "watchdog_config": JSON, "watermark": FLOAT,
    "watermark_config": STR, "weight_transfer_config": STR,
}

#: Options whose parser takes only these values (others are refused).
CHOICES: dict[str, tuple[str, ...]] = {"performance_mode": ("balanced", "interactivity", "throughput"),
                                       "dtype": ("auto", "bfloat16", "float", "float16", "float32", "half")}

#: Flags whose parser default is False: ``--no-X`` (or a last ``--no-X``) leaves vLLM's value at its
#: default, so, like vLLM's own "non-default args", the normalised arguments do not hold it. A version
#: whose default for one of them is None says so in its row (versions.Rules.none_default_flags).
FALSE_BY_DEFAULT: frozenset[str] = frozenset({
    "enforce_eager", "trust_remote_code", "skip_tokenizer_init", "enable_expert_parallel", "enable_dbo",
    "async_scheduling", "disable_nccl_for_dp_synchronization", "disable_hybrid_kv_cache_manager",
    "enable_eplb", "disable_sliding_window", "disable_cascade_attn", "disable_log_stats", "disable_custom_all_reduce",
    "fully_sharded_loras", "enable_sleep_mode", "calculate_kv_scales",
    "enable_multimodal_encoder_data_parallel", "data_parallel_hybrid_lb", "data_parallel_external_lb",
    "disable_chunked_mm_input", "enable_auto_tool_choice", "disable_uvicorn_access_log", "disable_fastapi_docs",
    "enable_request_id_headers", "enable_log_outputs", "enable_prompt_tokens_details",
    "disable_frontend_multiprocessing", "allow_credentials", "return_tokens_as_token_ids",
    "enable_server_load_tracking", "enable_force_include_usage", "headless", "disable_async_output_proc",
    "disable_mm_preprocessor_cache", "enable_lora_bias", "enable_prompt_embeds", "enable_ssl_refresh",
    "enable_tokenizer_info_endpoint", "exclude_tools_when_tool_choice_none",
    "guided_decoding_disable_additional_properties", "guided_decoding_disable_any_whitespace",
    "guided_decoding_disable_fallback", "interleave_mm_strings", "kv_sharing_fast_prefill", "log_error_stack",
    "ray_workers_use_nsight", "skip_mm_profiling",
    "aggregate_engine_logging", "allow_deprecated_quantization", "cudagraph_metrics",
    "data_parallel_multi_port_external_lb", "enable_cumem_allocator", "enable_elastic_ep", "enable_ep_weight_filter",
    "enable_fault_tolerance", "enable_hc_sp", "enable_layerwise_nvtx_tracing", "enable_log_requests",
    "enable_logging_iteration_details", "enable_mamba_cache_stochastic_rounding",
    "enable_mamba_shared_prefix_checkpoint", "enable_mfu_metrics", "enable_mixed_moe_lora_format",
    "enable_mm_embeds", "enable_moe_shared_loras", "enable_nccl_comm_suspend", "enable_offline_docs",
    "enable_per_request_metrics", "enable_return_routed_experts", "enable_scale_out", "enable_shm_tensor_arena",
    "enable_tower_connector_lora", "enable_trace_replay", "fail_on_environ_validation", "grpc",
    "jit_monitor_verbose", "kv_cache_metrics", "language_model_only", "long_prefill_token_threshold_adaptive",
    "mm_encoder_only", "monokernel", "numa_bind", "return_sampling_mask", "sleep_mode_offload_cudagraph",
    "specialize_active_lora", "tokens_only", "trust_request_chat_template", "trust_request_mm_kwargs",
    "use_fp64_gumbel", "use_replayssm",
})


#: The integer options vLLM parses with human_readable_int where no version says otherwise (EngineArgs.get_kwargs
#: ``human_readable_ints``, 0.10.2-0.12.0; max_model_len has its own type); every other integer option is argparse's
#: plain ``int``. Each version's own set is versions.Rules.human_int_options (0.33.0 has more).
HUMAN_INTS = frozenset({"max_num_batched_tokens", "kv_cache_memory_bytes"})


#: human_readable_int's multipliers: a lower-case suffix is decimal (a fraction allowed: ``25.6k``), an upper-case one
#: binary (a whole number only: ``1.5K`` is refused). ``t``/``T`` only where the version has them (``tera``).
_DECIMAL = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
_BINARY = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def human_int(text: str, *, tera: bool = False) -> int:
    """vLLM's human_readable_int: ``1k`` = 1000, ``1K`` = 1024, ``25.6k`` = 25600; ValueError otherwise. Its pattern
    takes t and T in every version, but only 0.33's has multipliers for them (``tera``: ``1t`` = 10**12, ``1T`` =
    2**40); before, they fall through to ``int()``, which refuses them (vllm/engine/arg_utils.py of 0.10.2-0.12.0,
    vllm/utils/argparse_utils.py of 0.33.0)."""
    text = text.strip()
    m = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", text)
    if m and (tera or m.group(2) not in "tT"):
        number, suffix = m.groups()
        if suffix in _DECIMAL:
            return int(float(number) * _DECIMAL[suffix])
        return int(number) * _BINARY[suffix]
    return int(text)


#: A JSON string literal, and a bare human-readable number outside one (0.33's JSON config values).
_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BARE_HUMAN = re.compile(r"\b\d+(?:\.\d+)?[kKmMgGtT]\b")


def expand_human_numbers(text: str, *, tera: bool = True) -> str:
    """``text`` (a JSON value) with each bare human-readable number outside a JSON string replaced by its digits, as
    0.33 does before pydantic reads a dataclass-typed option (``{"max_cudagraph_capture_size": 1k}`` -> 1000;
    ``"1k"`` in quotes is left alone). ValueError for one human_readable_int refuses (``1.5K``)."""
    def digits(m: re.Match[str]) -> str:
        try:
            return str(human_int(m.group(), tera=tera))
        except ValueError:
            raise ValueError(f"{m.group()}: decimals are not allowed with a binary suffix") from None
    pieces, last = [], 0
    for m in _JSON_STRING.finditer(text):
        pieces += [_BARE_HUMAN.sub(digits, text[last:m.start()]), m.group()]
        last = m.end()
    pieces.append(_BARE_HUMAN.sub(digits, text[last:]))
    return "".join(pieces)


def loose_value(text: str, *, human: bool = True, tera: bool = False) -> Any:
    """A dotted or unknown option's value as vLLM reads it: JSON, then (``human``: 0.33's dotted keys) a human int with
    or without t/T (``tera``), else the string. Up to 0.12.0 FlexibleArgumentParser keeps a dotted value that is not
    JSON as the string (``human`` False), which an int field of the config then refuses."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    if not human:
        return text
    try:
        return human_int(text, tera=tera)
    except ValueError:
        return text


def convert(dest: str, kind: str, text: str, *, human_ints: frozenset[str] = HUMAN_INTS, tera: bool = False,
            json_human: frozenset[str] = frozenset()) -> Any:
    """One option value converted by its type; raises ValueError with a message for a bad value. ``human_ints``: the
    integer options the version reads with human_readable_int; ``tera``: whether its human_readable_int has t/T;
    ``json_human``: the JSON options whose bare human-readable numbers it expands (expand_human_numbers)."""
    if kind == INT:
        try:
            return human_int(text, tera=tera) if dest in human_ints else int(text)
        except ValueError:
            raise ValueError(f"--{dest.replace('_', '-')}: invalid int value {text!r}") from None
    if kind == MAXLEN:
        if text.strip().lower() == "auto":
            return "auto"
        try:
            return human_int(text, tera=tera) if text.strip() != "-1" else -1
        except ValueError:
            raise ValueError(f"--max-model-len: invalid value {text!r}") from None
    if kind == FLOAT:
        try:
            return float(text)
        except ValueError:
            raise ValueError(f"--{dest.replace('_', '-')}: invalid float value {text!r}") from None
    if kind == JSONVAL:
        try:
            return json.loads(text)
        except ValueError as err:
            raise ValueError(f"--{dest.replace('_', '-')}: invalid JSON ({err.msg} at column {err.colno})") from None
    if kind == DICTSTR and not re.fullmatch(r"(?s)\s*\{.*\}\s*", text):
        return text
    if kind in (JSON, DICTSTR):
        return _json_object(dest, text.strip(), dest in json_human, tera)
    return text


def _json_object(dest: str, text: str, expand: bool, tera: bool) -> dict[str, Any]:
    """A JSON-object option's value; ``expand``: its bare human-readable numbers first (expand_human_numbers)."""
    option = f"--{dest.replace('_', '-')}"
    try:
        value = json.loads(expand_human_numbers(text, tera=tera) if expand else text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{option}: invalid JSON ({err.msg} at column {err.colno})") from None
    except ValueError as err:
        raise ValueError(f"{option}: {err}") from None
    if not isinstance(value, dict):
        raise ValueError(f"{option}: expected a JSON object, got {type(value).__name__}")
    return value
