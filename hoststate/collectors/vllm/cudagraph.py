"""The CUDA graph mode a vLLM command line declares, or vLLM's reason for refusing it.

Resolution is a list of steps in the order vLLM's ``VllmConfig.__post_init__`` applies them; each
step reads one field (an argument, an environment variable or a model fact), may change the mode,
says why, and may refuse. What a step does in a given version is a column of the version table
(versions.py). Runtime downgrades after the attention backend is chosen are not derivable from
arguments: the log's observed mode records those.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from hoststate.collectors.vllm.defaults import DTYPE_NAMES
from hoststate.collectors.vllm.fields import forbids
from hoststate.collectors.vllm.model import UNKNOWN, ModelFacts, derived_max_len
from hoststate.collectors.vllm.modes import COMP_NAMES, has_full, has_piecewise, parse_cg_mode, parse_comp_mode
from hoststate.collectors.vllm.speculative import MTP_LAYER_KEYS, as_built, detect, fold_flags, is_mtp
from hoststate.collectors.vllm.versions import DEFAULT_OPT_LEVEL, OPT_LEVEL_CUDAGRAPH, Rules, rules_for

VLLM_COMPILE = 3
_TRUE = ("1", "true", "yes", "on")
_POOLING_TASKS = ("embed", "embedding", "classify", "score", "reward", "pooling")


@dataclass
class Declared:
    """The declared CUDA graph mode (None when vLLM refuses), why, and the rules used."""

    mode: str | None
    because: str
    rules_version: str
    compilation_mode: str | None = None
    problems: list[str] = field(default_factory=list)
    #: vLLM's reason for refusing the command line, in words; then ``mode`` is None.
    refused: str | None = None
    #: Model facts the mode depends on that were unknown, and what was assumed.
    assumes: list[str] = field(default_factory=list)


class Refused(Exception):
    """A step found that vLLM refuses the command line."""


@dataclass
class Resolution:
    """What the steps read and write."""

    rules: Rules
    args: Mapping[str, Any]
    env: Mapping[str, str]
    model: ModelFacts
    cc: Mapping[str, Any]
    #: GPUs of the host (the gpu section, or ``--gpus``); None: unknown.
    gpus: int | None = None
    mode: str = "NONE"
    comp: int | None = None
    opt: int = DEFAULT_OPT_LEVEL
    eager: bool = False
    #: The graph mode was given (cudagraph_mode, or a flag 0.11.0 converts), not a default.
    explicit: bool = False
    #: Model Runner V2 (True) or V1 (False); None where the version has one runner.
    runner_v2: bool | None = None
    #: Breakable CUDA graphs (0.33): piecewise graphs without VLLM_COMPILE.
    breakable: bool = False
    #: splitting_ops do not split the graph as given: Inductor partitions it ("inductor"), or attention
    #: fusion decides them ("attn_fusion"); None: splitting_ops as given (or the default).
    splitting_by: str | None = None
    why: list[str] = field(default_factory=list)
    assumes: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def tag(self) -> str:
        return f"vLLM {self.rules.version}"

    def set(self, mode: str, because: str) -> None:
        if mode != self.mode:
            because = f"{because}: {self.mode} -> {mode}" if self.why else because
        self.mode = mode
        self.why.append(because)

    def fact(self, name: str, value: bool | None, assumed: bool) -> bool:
        """A model fact; an unknown one takes ``assumed`` and the assumption is recorded."""
        if value is not None:
            return value
        self.assumes.append(f"{name}={'yes' if assumed else 'no'} assumed ({self.model.source})")
        return assumed


Step = Callable[[Resolution], None]


def _int(value: Any, default: int = 1) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _spec_method(r: Resolution) -> str | None:
    """The speculative method vLLM runs: the one given, else the one it detects from the draft model's name."""
    spec = r.args.get("speculative_config")
    return detect(spec, r.rules.spec_detects_new_names)[0] if isinstance(spec, Mapping) else None


# -- steps that refuse ------------------------------------------------------------------------


def _expert_parallel(r: Resolution) -> None:
    """``--enable-expert-parallel`` needs experts: vLLM refuses it on a dense model."""
    if r.args.get("enable_expert_parallel") and not r.fact("moe", r.model.moe, assumed=True):
        raise Refused("Number of experts in the model must be greater than 0 when expert parallelism is enabled")


def _memory_fraction(r: Resolution) -> None:
    """``--gpu-memory-utilization`` is a fraction in (0, 1]."""
    value = r.args.get("gpu_memory_utilization")
    if isinstance(value, float | int) and not 0 < value <= 1:
        raise Refused(f"gpu_memory_utilization {value}: input should be greater than 0 and at most 1")


def _speculative_method(r: Resolution) -> None:
    """A speculative method the version does not know, or knows and does not run, is refused; one detected from a
    draft model given without a method is checked alike (speculative.detect)."""
    spec = r.args.get("speculative_config")
    if isinstance(spec, Mapping) and (assumed := detect(spec, r.rules.spec_detects_new_names)[1]):
        r.assumes.append(assumed)
    method = _spec_method(r)
    if method is not None and method not in r.rules.spec_methods:
        raise Refused(f"speculative_config.method {method!r} is not a method of {r.tag}")
    if method in r.rules.spec_refused_methods:
        raise Refused(f"speculative decoding with {method} is not supported yet")


def _ngram_window(r: Resolution) -> None:
    """The ngram method's lookup window as SpeculativeConfig.__post_init__ validates it once a missing end takes the
    other's value (vllm/config/speculative.py of 0.11.0-0.33.0, vllm/config/__init__.py of 0.10.2): an end below 1
    ("must be > 0"; 0.12+ refuses it in the field, ``ge=1``) or ``prompt_lookup_min`` above ``prompt_lookup_max``."""
    spec = r.args.get("speculative_config")
    if not isinstance(spec, Mapping) or _spec_method(r) not in ("ngram", "[ngram]", "ngram_gpu"):
        return
    low, high = spec.get("prompt_lookup_min"), spec.get("prompt_lookup_max")
    low, high = (high if low is None else low), (low if high is None else high)
    ends = {"prompt_lookup_min": low, "prompt_lookup_max": high}
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in ends.values()):
        return  # neither given (5 and 5), or a value the JSON parser or pydantic judges, not read here
    for name, value in ends.items():
        if value < 1:
            raise Refused(f"{name}={value} must be > 0")
    if low > high:
        raise Refused(f"prompt_lookup_min={low} must be <= prompt_lookup_max={high}")


def _lora_cpu_slots(r: Resolution) -> None:
    """With ``--enable-lora``, a ``--max-cpu-loras`` above 0 and below ``--max-loras`` is refused
    (LoRAConfig.__post_init__, vllm/config/lora.py 0.10.2-0.33.0: "max_cpu_loras (N) must be >= max_loras (M)"; a
    value not above 0 is passed as None by EngineArgs.create_engine_config, which LoRAConfig makes max_loras)."""
    cpu, loras = r.args.get("max_cpu_loras"), r.args.get("max_loras", 1)
    if not r.args.get("enable_lora") or not all(isinstance(v, int) and not isinstance(v, bool) for v in (cpu, loras)):
        return
    if 0 < cpu < loras:
        raise Refused(f"max_cpu_loras ({cpu}) must be >= max_loras ({loras})")


def _v1_required(r: Resolution) -> None:
    """``VLLM_USE_V1=1`` with a feature only the V0 engine has is refused (0.10.2)."""
    if _use_v1_env(r) is True and (feature := _v0_feature(r)):
        raise Refused(f"VLLM_USE_V1=1 is not supported with {feature}")


def _speculative_on_v0(r: Resolution) -> None:
    """The V0 engine refuses speculative decoding."""
    if r.args.get("speculative_config") is not None and _v0_engine(r):
        raise Refused("speculative decoding is not supported on vLLM V0")


def _decode_context_parallel(r: Resolution) -> None:
    """DCP > 1 without MLA splits the KV heads: TP must exceed them and DCP fit in TP // heads."""
    dcp = _int(r.args.get("decode_context_parallel_size"))
    if dcp <= 1 or not r.rules.dcp_head_check or r.fact("mla", r.model.mla, assumed=False):
        return
    tp = _int(r.args.get("tensor_parallel_size"))
    heads = r.model.kv_heads
    if heads is None:
        r.assumes.append(f"kv_heads unknown: decode context parallel {dcp} assumed to fit ({r.model.source})")
        return
    if tp <= heads:
        raise Refused(f"tensor parallel size {tp} must be greater than total num kv heads {heads} "
                      "when enable decode context parallel for GQA/MQA")
    if dcp > tp // heads:
        raise Refused(f"decode context parallel size must be at most tensor parallel size {tp} // "
                      f"total num kv heads {heads} = {tp // heads}")


def _async_scheduling(r: Resolution) -> None:
    """``--async-scheduling`` with pipeline parallelism, a speculative method the version's list lacks or
    ``disable_padded_drafter_batch`` is refused (0.33: by Model Runner V1 only)."""
    if not r.args.get("async_scheduling") or r.runner_v2:
        return  # Model Runner V2 takes async scheduling with any of these
    if _int(r.args.get("pipeline_parallel_size")) > 1:
        raise Refused("Async scheduling is not yet compatible with pipeline_parallel_size > 1")
    method = _spec_method(r)
    if method is not None and method not in r.rules.async_spec_methods:
        allowed = "EAGLE/MTP speculative decoding" if r.rules.async_spec_methods else "no speculative decoding"
        raise Refused(f"async scheduling is only supported with {allowed}, not {method!r}")
    if method is not None and r.args["speculative_config"].get("disable_padded_drafter_batch") is True:
        raise Refused("async scheduling with EAGLE/MTP speculative decoding does not support "
                      "disable_padded_drafter_batch=True")


#: Capture-size options and the compilation_config key each one sets.
_CAPTURE_OPTIONS = (("cuda_graph_sizes", "cudagraph_capture_sizes"),
                    ("cudagraph_capture_sizes", "cudagraph_capture_sizes"),
                    ("max_cudagraph_capture_size", "max_cudagraph_capture_size"))


def _capture_options(r: Resolution) -> None:
    """A capture-size option next to the compilation_config key it sets (or to another option that sets
    it) is refused: vLLM copies each option into compilation_config only while that key is unset."""
    if not r.rules.capture_options_exclusive:
        return
    taken = {key for key in ("cudagraph_capture_sizes", "max_cudagraph_capture_size") if r.cc.get(key) is not None}
    for option, key in _CAPTURE_OPTIONS:
        if r.args.get(option) is None:
            continue
        if key in taken:
            raise Refused(f"{option} and compilation_config.{key} are mutually exclusive")
        taken.add(key)


def _scheduler_sizes(r: Resolution) -> None:
    """``--max-num-seqs`` / ``--max-num-batched-tokens`` must be at least 1."""
    if not r.rules.scheduler_sizes_checked:
        return
    for dest in ("max_num_seqs", "max_num_batched_tokens"):
        value = r.args.get(dest)
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise Refused(f"{dest} {value}: input should be greater than or equal to 1")


def _v2_unsupported(r: Resolution) -> list[str]:
    """What the command uses that Model Runner V2 lacks (vLLM's own words)."""
    method = _spec_method(r)
    if method in r.rules.v2_unsupported_spec_methods:
        return [f"speculative method '{method}'"]
    spec = r.args.get("speculative_config")
    if isinstance(spec, Mapping) and spec.get("parallel_drafting") is True and method not in ("dflash", "dspark"):
        return ["parallel drafting for EAGLE speculative decoding"]
    if r.args.get("enable_dbo") and "VLLM_USE_V2_MODEL_RUNNER" not in r.env:
        return ["dual batch overlap"]
    return []


def _model_runner(r: Resolution) -> None:
    """Which model runner (0.33): ``VLLM_USE_V2_MODEL_RUNNER`` as an integer, else V2 unless the command
    uses something V2 lacks. Each runner refuses what it does not support."""
    if not r.rules.model_runner_v2:
        return
    raw = r.env.get("VLLM_USE_V2_MODEL_RUNNER")
    if raw is None:
        r.runner_v2 = not _v2_unsupported(r)
    else:
        try:
            r.runner_v2 = bool(int(raw))
        except ValueError:
            raise Refused(f"VLLM_USE_V2_MODEL_RUNNER={raw!r} is not an integer") from None
        if r.runner_v2 and _v2_unsupported(r):
            raise Refused(f"Model Runner V2 does not yet support: {', '.join(_v2_unsupported(r))}")
    if not r.runner_v2 and _int(r.args.get("prefill_context_parallel_size")) > 1:
        raise Refused("Model Runner V1 does not support: prefill context parallel")
    r.why.append(f"{r.tag}: Model Runner {'V2' if r.runner_v2 else 'V1'}")


# -- steps that check the arguments against the model and the host ------------------------------

def _speculative_flags(r: Resolution) -> None:
    """The speculative config as EngineArgs.create_speculative_config builds SpeculativeConfig from it, so every
    later step sees that: the ``--spec-*`` flags folded in (a flag next to the same key of ``--speculative-config``
    is refused), then its keys as the version reads them (speculative.as_built: 0.33's dashes as underscores; a
    key that is no field dropped, or refused where the version forbids it)."""
    spec, refusal = fold_flags(r.args)
    if refusal:
        raise Refused(refusal)
    if not isinstance(spec, Mapping):
        return
    built, unknown = as_built(spec, r.rules)
    if unknown and forbids(r.rules.version, "speculative_config"):
        raise Refused(f"speculative_config.{unknown[0]}: extra inputs are not permitted (SpeculativeConfig)")
    if unknown:
        r.why.append(f"speculative_config {', '.join(unknown)}: no field of {r.tag}'s SpeculativeConfig, ignored")
    r.args = {**r.args, "speculative_config": built}


def _visible_gpus(r: Resolution) -> int | None:
    """The GPUs vLLM counts: the host's, limited to those CUDA_VISIBLE_DEVICES lists."""
    listed = r.env.get("CUDA_VISIBLE_DEVICES")
    if listed is None:
        return r.gpus
    count = len([d for d in listed.split(",") if d.strip()])
    return count if r.gpus is None else min(count, r.gpus)


def _world_size(r: Resolution) -> None:
    """A world size (TP x PP x PCP) above the GPUs vLLM sees, when it picks the executor itself on one node."""
    if not r.rules.world_size_checked or r.args.get("distributed_executor_backend") is not None:
        return
    world = (_int(r.args.get("tensor_parallel_size")) * _int(r.args.get("pipeline_parallel_size"))
             * _int(r.args.get("prefill_context_parallel_size")))
    if world <= 1 or _int(r.args.get("nnodes")) > 1:
        return
    gpus = _visible_gpus(r)
    if gpus is None:
        r.assumes.append(f"world size {world} assumed to fit the host's GPUs (GPU count unknown)")
    elif gpus < world:
        raise Refused(f"World size ({world}) is larger than the number of available GPUs ({gpus})")


def _attention_heads(r: Resolution) -> None:
    """Tensor parallel size must divide the model's attention heads (ModelConfig.verify_with_parallel_config)."""
    tp = _int(r.args.get("tensor_parallel_size"))
    heads = r.model.limits.attention_heads
    if tp <= 1:
        return
    if heads is None:
        r.assumes.append(f"tensor parallel size {tp} assumed to divide the attention heads ({r.model.source})")
    elif heads % tp:
        raise Refused(f"Total number of attention heads ({heads}) must be divisible by tensor parallel size ({tp})")


def _max_model_len(r: Resolution) -> None:
    """``--max-model-len`` above the model's derived maximum is refused without VLLM_ALLOW_LONG_MAX_MODEL_LEN."""
    value = r.args.get("max_model_len")
    allowed = r.env.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "0").strip().lower() in ("1", "true")
    if not isinstance(value, int) or value <= 0 or allowed:
        return
    if not r.model.known:
        r.assumes.append(f"max_model_len {value} assumed within the model's maximum length ({r.model.source})")
        return
    derived = derived_max_len(r.model, r.args, r.rules)
    longest = r.model.limits.model_max_length
    if derived is not None and value > derived and (longest is None or value > longest):
        raise Refused(f"User-specified max_model_len ({value}) is greater than the derived max_model_len "
                      f"({int(derived)} in model's config.json); set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 to allow it")


#: The server defaults vLLM picks on a GPU of 70-160 GiB (H100, H200): max_num_batched_tokens, max_num_seqs.
_DEFAULT_BATCH = (8192, 1024)


def _batch_sizes(r: Resolution, why: str) -> tuple[int, int]:
    """max_num_batched_tokens and max_num_seqs as vLLM resolves them; a default used is recorded as assumed."""
    batched, seqs = r.args.get("max_num_batched_tokens"), r.args.get("max_num_seqs")
    if not isinstance(batched, int) or not isinstance(seqs, int):
        r.assumes.append(f"{why}: vLLM's defaults for a 70-160 GiB GPU assumed (max_num_batched_tokens "
                         f"{_DEFAULT_BATCH[0]}, max_num_seqs {_DEFAULT_BATCH[1]})")
    batched = batched if isinstance(batched, int) else _DEFAULT_BATCH[0]
    return batched, seqs if isinstance(seqs, int) else min(_DEFAULT_BATCH[1], batched)


def _batched_tokens(r: Resolution) -> None:
    """max_num_batched_tokens must be at least max_num_seqs (SchedulerConfig); a default max_num_seqs is lowered to
    fit, so only both given can clash."""
    batched, seqs = r.args.get("max_num_batched_tokens"), r.args.get("max_num_seqs")
    if isinstance(batched, int) and isinstance(seqs, int) and batched < seqs:
        raise Refused(f"max_num_batched_tokens ({batched}) must be greater than or equal to max_num_seqs ({seqs})")


def _lora_speculative(r: Resolution) -> None:
    """LoRA with speculative decoding needs max_num_batched_tokens >= max_num_seqs x (num_speculative_tokens + 1)."""
    spec = r.args.get("speculative_config")
    if not (r.rules.lora_spec_budget and r.args.get("enable_lora") and isinstance(spec, Mapping)):
        return
    tokens = spec.get("num_speculative_tokens")
    if not isinstance(tokens, int):
        return
    batched, seqs = _batch_sizes(r, "LoRA with speculative decoding")
    if batched < seqs * (tokens + 1):
        raise Refused(f"LoRA with {tokens} speculative tokens: max_num_batched_tokens {batched} < max_num_seqs {seqs}"
                      f" x {tokens + 1}; consider increasing max_num_batched_tokens or decreasing "
                      "num_speculative_tokens")


def _draft_model(r: Resolution) -> None:
    """num_speculative_tokens without a draft model, for a method that needs one (SpeculativeConfig)."""
    spec = r.args.get("speculative_config")
    if not isinstance(spec, Mapping) or spec.get("model") is not None or spec.get("num_speculative_tokens") is None:
        return
    if spec.get("method") in r.rules.spec_self_drafting:
        return
    if r.rules.spec_draft_target_types:  # 0.10.2: the target model drafts for itself when its type is listed
        model_type = r.model.limits.model_type
        if model_type is None:
            r.assumes.append(f"the model type assumed to draft for itself ({r.model.source})")
            return
        if model_type in r.rules.spec_draft_target_types:
            return
    raise Refused(f"num_speculative_tokens was provided but without speculative model "
                  f"(method {spec.get('method')!r} needs one)")


#: Checkpoint formats no other method claims: another ``--quantization`` for them is refused. Names vLLM checks as
#: overrides of a checkpoint's method (``_verify_quantization``, every version) are left to vLLM and assumed.
_PLAIN_CHECKPOINTS = frozenset({"fp8", "compressed-tensors", "bitsandbytes", "fbgemm_fp8"})
_QUANT_OVERRIDES = frozenset({
    "bitblas", "gptq_marlin_24", "gptq_marlin", "gptq_bitblas", "awq_marlin", "ipex", "moe_wna16", "modelopt",
    "modelopt_fp4", "petit_nvfp4", "mxfp4", "cpu_gptq", "cpu_awq", "auto_gptq", "gptq", "auto_awq", "awq", "inc",
    "modelopt_mxfp8", "mxfp8", "modelopt_mixed", "gpt_oss_mxfp4", "deepseek_v4_fp8", "humming"})
#: The checkpoint formats an override method takes over (its ``override_quantization_method`` returns its own name
#: only for a checkpoint whose quant_method is one of these): any other checkpoint keeps its own method, which then
#: does not match the argument, and ModelConfig._verify_quantization refuses.
QUANT_TAKES_OVER: dict[str, frozenset[str]] = {
    "awq_marlin": frozenset({"awq"}), "gptq_marlin": frozenset({"gptq"}), "gptq_marlin_24": frozenset({"gptq"}),
    "gptq_bitblas": frozenset({"gptq"}), "moe_wna16": frozenset({"awq", "gptq"}),
    "awq": frozenset(), "gptq": frozenset(),  # no takeover: only a checkpoint of their own format
}
#: Methods that read their settings from the checkpoint: with no quantization_config in config.json vLLM looks for
#: these files beside it and refuses without one (get_quant_config: "Cannot find the config file for ...").
QUANT_CONFIG_FILES: dict[str, tuple[str, ...]] = {
    "awq": ("quant_config.json", "quantize_config.json"), "gptq": ("quantize_config.json",),
    "awq_marlin": ("quantize_config.json",), "gptq_marlin": ("quantize_config.json",),
    "gptq_marlin_24": ("quantize_config.json",), "gptq_bitblas": ("quantize_config.json",),
    "modelopt": ("hf_quant_config.json",), "modelopt_fp4": ("hf_quant_config.json",),
    "bitblas": ("quantize_config.json",), "hqq": ("quantize_config.json",), "moe_wna16": ("quantize_config.json",),
    "cpu_gptq": ("quantize_config.json",), "cpu_awq": ("quantize_config.json",),
    "auto-round": ("quantization_config.json",), "petit_nvfp4": ("hf_quant_config.json",),
    # no file can supply these: built without the checkpoint's quantization_config they fail to start (TypeError)
    "compressed-tensors": (), "torchao": (), "fbgemm_fp8": (),
}
#: Methods CUDA hosts cannot run (their config refuses any other platform).
QUANT_ROCM_ONLY = frozenset({"ptpc_fp8"})


def _quantization_files(r: Resolution) -> None:
    """A --quantization method that needs the checkpoint's settings, on a checkpoint without any, is refused; so is
    one only ROCm runs, and (0.33) a deprecated one without --allow-deprecated-quantization."""
    given = r.args.get("quantization")
    if given in QUANT_ROCM_ONLY:
        raise Refused(f"{given} quantization is supported only on ROCm")
    if given in r.rules.deprecated_quantization and not r.args.get("allow_deprecated_quantization"):
        raise Refused(f"The quantization method {given} is deprecated and will be removed in future versions of "
                      "vLLM; to bypass, set --allow-deprecated-quantization")
    needs = QUANT_CONFIG_FILES.get(given) if isinstance(given, str) else None
    if needs is None or r.model.limits.quant_method is not None or not r.model.known:
        return
    if not needs:
        raise Refused(f"--quantization {given} needs the checkpoint's quantization_config, and config.json has none")
    if r.model.quant_files is None:
        r.assumes.append(f"--quantization {given}: a quantization config file beside config.json assumed "
                         f"({', '.join(needs)})")
    elif not set(needs) & r.model.quant_files:
        raise Refused(f"Cannot find the config file for {given}: the checkpoint is not quantized (no "
                      f"quantization_config in config.json, no {' or '.join(needs)})")


def _quantization(r: Resolution) -> None:
    """A ``--quantization`` other than the checkpoint's quantization method is refused (ModelConfig), unless it is
    an override that takes over a checkpoint of that format (QUANT_TAKES_OVER)."""
    given, checkpoint = r.args.get("quantization"), r.model.limits.quant_method
    if not isinstance(given, str) or checkpoint in (None, "", given):
        return
    takes = QUANT_TAKES_OVER.get(given)
    refused = (checkpoint not in takes) if takes is not None else (
        checkpoint in _PLAIN_CHECKPOINTS and given not in _QUANT_OVERRIDES)
    if refused:
        raise Refused(f"Quantization method specified in the model config ({checkpoint}) does not match the "
                      f"quantization method specified in the `quantization` argument ({given})")
    r.assumes.append(f"--quantization {given} assumed to take over the checkpoint's {checkpoint}" +
                     (" (its kernel's limits on bits and group size are not checked)" if takes else ""))


def _mtp_layers(r: Resolution) -> None:
    """An MTP method with no draft model drafts with the model's own MTP layers: a model naming none is refused
    (0.11.0+; 0.10.2 checks the model type itself, spec_draft_target_types)."""
    spec = r.args.get("speculative_config")
    if not (isinstance(spec, Mapping) and spec.get("model") is None and is_mtp(_spec_method(r))):
        return
    if r.rules.spec_draft_target_types or spec.get("num_speculative_tokens") is None:
        return
    if not r.fact("mtp_layers", r.model.mtp_layers, assumed=True):
        raise Refused(f"speculative method {_spec_method(r)!r} drafts with the model's MTP layers, and its config.json "
                      f"names none ({', '.join(MTP_LAYER_KEYS)}): no MTP draft model can be built from it")


#: Methods whose draft config may give num_speculative_tokens (its n_predict), or that pick one themselves (suffix).
_TOKENS_OPTIONAL = ("suffix", "medusa", "mlp_speculator")


def _speculative_tokens(r: Resolution) -> None:
    """Without num_speculative_tokens only suffix decoding (and a draft config holding n_predict) has a number:
    SpeculativeConfig._verify_args refuses the rest, and a number below 1 for any method ("Expected
    num_speculative_tokens to be greater than zero": vllm/config/speculative.py 0.11.0-0.33.0, vllm/config/__init__.py
    0.10.2)."""
    spec = r.args.get("speculative_config")
    tokens = spec.get("num_speculative_tokens") if isinstance(spec, Mapping) else None
    if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens <= 0:
        raise Refused(f"Expected num_speculative_tokens to be greater than zero ({tokens})")
    if not isinstance(spec, Mapping) or tokens is not None:
        return
    method = _spec_method(r)
    if method in _TOKENS_OPTIONAL:
        return
    if spec.get("model") is not None:
        r.assumes.append("the draft model's config.json assumed without n_predict (it is not read)")
    raise Refused("num_speculative_tokens must be provided with speculative model unless the draft model config "
                  "contains an n_predict parameter")


def _eagle_targets(r: Resolution) -> None:
    """EAGLE-3 drafts only for the target model types the version lists (a substring of the text config's
    model_type: SpeculativeConfig._verify_args), and an EAGLE draft model has no pipeline-parallel support
    (ModelConfig.verify_with_parallel_config of the draft: it does not implement SupportsPP)."""
    method = _spec_method(r)
    if method in r.rules.spec_pp_refused_methods and _int(r.args.get("pipeline_parallel_size")) > 1:
        raise Refused(f"Pipeline parallelism is not supported for this model (the {method} draft model): supported "
                      "models implement the `SupportsPP` interface")
    targets = r.rules.eagle3_targets
    if method != "eagle3" or not targets:
        return
    model_type = r.model.limits.model_type
    if model_type is None:
        r.assumes.append(f"the target model type assumed one EAGLE-3 supports ({r.model.source})")
    elif not any(t in model_type for t in targets):
        raise Refused(f"Eagle3 is only supported for {list(targets)} models; got model_type {model_type!r}")


def _partial_prefills(r: Resolution) -> None:
    """max_long_partial_prefills must lie in [1, max_num_partial_prefills] (SchedulerConfig); concurrent partial
    prefills (either count other than 1) are refused outright from 0.11.1 (EngineArgs._check_feature_supported)."""
    most, long = _int(r.args.get("max_num_partial_prefills")), _int(r.args.get("max_long_partial_prefills"))
    if not 1 <= long <= most:
        raise Refused(f"max_long_partial_prefills ({long}) must be greater than or equal to 1 and less than or equal "
                      f"to max_num_partial_prefills ({most})")
    if not r.rules.partial_prefills_refused:
        return
    if _int(r.args.get("max_num_partial_prefills")) != 1 or _int(r.args.get("max_long_partial_prefills")) != 1:
        raise Refused("Concurrent Partial Prefill is not supported. We recommend to remove Concurrent Partial Prefill "
                      "from your config.")


def _kv_dtype_model(r: Resolution) -> None:
    """0.33: a 16-bit KV cache dtype must be the model's own dtype (VllmConfig: "is incompatible with dtype")."""
    kv = r.args.get("kv_cache_dtype")
    if not r.rules.kv_dtype_matches_model or kv not in ("float16", "bfloat16"):
        return
    given = DTYPE_NAMES.get(str(r.args.get("dtype", "auto")).lower())
    dtype = given or (r.model.dtype if r.model.dtype != "float32" else None)
    if dtype is None:
        r.assumes.append(f"--kv-cache-dtype {kv} assumed to be the model's dtype ({r.model.source})")
    elif dtype != kv:
        raise Refused(f'kv_cache_dtype="{kv}" is incompatible with dtype="{dtype}". Please set `--kv-cache-dtype` to '
                      f"`auto` or `{dtype}`.")


def _chunked_prefill_off(r: Resolution) -> None:
    """Without chunked prefill a step must hold a whole prompt: max_num_batched_tokens below max_model_len is
    refused (SchedulerConfig; 0.11.1+, where an explicit --no-enable-chunked-prefill is kept)."""
    batched = r.args.get("max_num_batched_tokens")
    how = r.rules.chunked_prefill_off_checked
    if not how or r.args.get("enable_chunked_prefill") is not False:
        return
    if how == "pooling" and not _is_pooling(r):
        return
    if not isinstance(batched, int) or isinstance(batched, bool):
        return  # the default is then max(max_model_len, 2048): never below
    given = r.args.get("max_model_len")
    length = given if isinstance(given, int) and given > 0 else derived_max_len(r.model, r.args, r.rules)
    if length is None:
        r.assumes.append(f"max_num_batched_tokens {batched} assumed to hold max_model_len ({r.model.source})")
    elif batched < length:
        raise Refused(f"max_num_batched_tokens ({batched}) is smaller than max_model_len ({int(length)}). This "
                      "effectively limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject "
                      "longer sequences. Please increase max_num_batched_tokens or decrease max_model_len.")


def _prefill_context_parallel(r: Resolution) -> None:
    """Prefill context parallel above 1 (0.12: not fully supported)."""
    if r.rules.pcp_refused and _int(r.args.get("prefill_context_parallel_size")) > 1:
        raise Refused("Prefill context parallelism is not fully supported. Please set prefill_context_parallel_size "
                      "to 1")


def _kv_transfer(r: Resolution) -> None:
    """A ``--kv-transfer-config`` vLLM cannot start with, every recorded version (0.10.2-0.33.0):

    - a ``kv_role`` that is not one of KVRole, or a ``kv_connector`` without a ``kv_role``: refused when the option is
      parsed (vllm/config/kv_transfer.py, KVTransferConfig.__post_init__: "Please specify kv_role when kv_connector is
      set", "Unsupported kv_role");
    - no ``kv_connector`` at all (``{}``, ``{"kv_role": "kv_both"}``): the config is accepted, but the V1 engine core's
      Scheduler creates a connector whenever ``kv_transfer_config is not None`` (vllm/v1/core/sched/scheduler.py,
      Scheduler.__init__) and KVConnectorFactory refuses a missing name (vllm/distributed/kv_transfer/kv_connector/
      factory.py: ``_get_connector_class_with_compat`` "Connector name is not set in KVTransferConfig" from 0.11.1,
      ``get_connector_class`` "Unsupported connector type: None" before). Not where KV offloading fills the connector
      in (VllmConfig: ``--kv-offloading-backend`` 0.11.1-0.12, ``--kv-offloading-size`` 0.33; neither given is
      checked), nor where the V0 engine may run (0.10.2-0.11.0 unless the V1 engine surely runs, config.json read: V0
      only connects for a connector with a role).
    """
    kv = r.args.get("kv_transfer_config")
    if not isinstance(kv, Mapping):
        return
    role, connector = kv.get("kv_role"), kv.get("kv_connector")
    if role is not None and role not in _KV_ROLES:
        raise Refused(f"Unsupported kv_role: {role}. Supported roles are {_KV_ROLES}")
    if connector is not None and role is None:
        raise Refused(f"Please specify kv_role when kv_connector is set, supported roles are {_KV_ROLES}")
    if connector is not None or "kv_offloading_backend" in r.args or "kv_offloading_size" in r.args:
        return
    if r.rules.v0_env and not (r.model.known and v1_engine_sure(r.args, r.env, r.rules, r.model)):
        return  # a V0-only architecture of a model not read could run V0
    raise Refused("Connector name is not set in KVTransferConfig: the engine's Scheduler creates a KV connector for "
                  "any --kv-transfer-config, and this one names no kv_connector")


def _kv_expandable_segments(r: Resolution) -> None:
    """A KV connector under PyTorch's expandable segments is refused unless the cumem allocator is on (0.33)."""
    kv = r.args.get("kv_transfer_config")
    if not (r.rules.kv_refuses_expandable_segments and isinstance(kv, Mapping) and kv.get("kv_connector")):
        return
    if "expandable_segments:True" not in r.env.get("PYTORCH_CUDA_ALLOC_CONF", ""):
        return
    if not (r.args.get("enable_cumem_allocator") or r.args.get("enable_sleep_mode")):
        raise Refused(f"KV connector {kv['kv_connector']} is incompatible with "
                      "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True unless enable_cumem_allocator is also enabled")


# -- steps that decide the mode ---------------------------------------------------------------


def _enforce_eager(r: Resolution) -> None:
    """``--enforce-eager``: no graphs; 0.12+ also optimization level O0 (an explicit mode survives)."""
    if r.args.get("enforce_eager"):
        r.eager = True
        if r.rules.family == "opt":
            r.opt = 0


def _optimization_level(r: Resolution) -> None:
    """``-O<n>`` / ``--optimization-level`` (0.12+): 0-3, anything else is refused at config time."""
    value = r.args.get("optimization_level")
    if value is None or r.rules.family != "opt":
        return
    level = int(value) if str(value).isdigit() else -1
    if level not in OPT_LEVEL_CUDAGRAPH:
        raise Refused(f"optimization_level {value!r}: input should be 0, 1, 2 or 3")
    if not r.eager:
        r.opt = level


def _compilation_mode(r: Resolution) -> None:
    """compilation_config.mode / level; unset: VLLM_COMPILE above O0 (0.12+), level 3 before."""
    raw = r.cc.get(r.rules.mode_key)
    if raw is None and r.rules.level_accepted and r.rules.mode_key == "mode":
        raw = r.cc.get("level")
    r.comp = parse_comp_mode(raw) if raw is not None else None
    if r.comp is None and isinstance(raw, int) and not isinstance(raw, bool):
        r.comp = raw  # a level outside 0-3 (``-O4`` up to 0.11.0) is accepted and compiles nothing
    if r.comp is None and (r.eager or _v0_engine(r)) and r.rules.family != "opt":
        r.comp = 0
    if r.comp is None:
        r.comp = (VLLM_COMPILE if r.opt > 0 else 0) if r.rules.family == "opt" else VLLM_COMPILE


def _torch_compile_disable(r: Resolution) -> None:
    """TORCH_COMPILE_DISABLE=1: compilation mode NONE at config time (0.33 only, which reads exactly "1")."""
    value = r.env.get("TORCH_COMPILE_DISABLE", "")
    if value.lower() not in _TRUE:
        return
    if r.rules.torch_compile_disable and value == "1":
        r.comp = 0
        r.why.append("TORCH_COMPILE_DISABLE=1: compilation mode NONE")
    else:
        r.why.append(f"TORCH_COMPILE_DISABLE=1 has no config-time effect in {r.tag}")


def _breakable_cudagraph(r: Resolution) -> None:
    """Breakable CUDA graphs (0.33): ``VLLM_USE_BREAKABLE_CUDAGRAPH=1``, or unset and an architecture vLLM
    lists; the compilation mode becomes NONE and piecewise graphs are kept."""
    if not r.rules.breakable_cudagraph:
        return
    raw = r.env.get("VLLM_USE_BREAKABLE_CUDAGRAPH")
    if raw is None:
        known = bool(set(r.model.architectures) & r.rules.breakable_architectures) if r.model.architectures else None
        on = r.fact("breakable_cudagraph_architecture", known, assumed=False)
    else:
        on = raw == "1"
    if on:
        r.breakable, r.comp = True, 0
        r.why.append("breakable CUDA graphs: compilation mode NONE, piecewise graphs kept")


def _fp8_kv_on_v1(r: Resolution, backend: str | None) -> bool:
    """Whether the V1 attention backend holds an fp8 KV cache (CudaPlatform.is_kv_cache_dtype_supported)."""
    if backend is None:
        r.assumes.append("kv_cache_dtype fp8 assumed held by the default V1 attention backend (FlashAttention 3 "
                         "on capability 9.0, FlashMLA for MLA models); otherwise vLLM falls back to V0")
        return True
    kind = "mla" if r.fact("mla", r.model.mla, assumed=False) else "other"
    return backend in r.rules.fp8_kv_v1_backends.get(kind, ())


#: Options only the V0 engine takes, in the order vLLM checks them, with their parser defaults.
_V0_ONLY_OPTIONS = (("logits_processor_pattern", None), ("preemption_mode", None),
                    ("disable_async_output_proc", False), ("scheduler_delay_factor", 0.0))


def _v0_option(r: Resolution) -> str | None:
    """The first option only the V0 engine takes, given a value other than its default."""
    for dest, default in _V0_ONLY_OPTIONS:
        if r.args.get(dest, default) != default:
            return "--" + dest.replace("_", "-")
    return None


def _v0_feature(r: Resolution) -> str | None:
    """A feature the V1 engine lacks, in vLLM's order (EngineArgs._is_v1_supported_oracle), for versions that
    then fall back to V0 (``v1_attention_backends``)."""
    backends = r.rules.v1_attention_backends
    backend = r.env.get("VLLM_ATTENTION_BACKEND")
    if not backends:
        return None
    if r.args.get("load_format") == "sharded_state":
        return "--load_format sharded_state"
    if option := _v0_option(r):
        return option
    if str(r.args.get("kv_cache_dtype", "auto")) != "auto" and not _fp8_kv_on_v1(r, backend):
        return "--kv-cache-dtype"
    if r.args.get("enable_prompt_embeds"):
        return "--enable-prompt-embeds"
    if _int(r.args.get("max_num_partial_prefills")) != 1 or _int(r.args.get("max_long_partial_prefills")) != 1:
        return "Concurrent Partial Prefill"
    if backend is not None and backend not in backends:
        return f"VLLM_ATTENTION_BACKEND={backend}"
    return None


def _use_v1_env(r: Resolution) -> bool | None:
    """``VLLM_USE_V1`` from the environment: None when unset."""
    value = r.env.get("VLLM_USE_V1")
    return None if value is None else value.strip().lower() not in ("0", "false")


def _v0_engine(r: Resolution) -> str | None:
    """Why the V0 engine runs: ``VLLM_USE_V1=0``, or (``VLLM_USE_V1`` unset) a feature V1 lacks; else None."""
    if not r.rules.v0_env:
        return None
    use_v1 = _use_v1_env(r)
    if use_v1 is None:
        feature = _v0_feature(r)
        return f"{feature} (not in the V1 engine)" if feature else None
    return None if use_v1 else "VLLM_USE_V1=0"


#: Executors 0.10.2 runs pipeline parallelism on with the V1 engine (None: the parser default).
_V1_PP_EXECUTORS = (None, "ray", "mp", "external_launcher")


def v1_engine_sure(args: Mapping[str, Any], env: Mapping[str, str], rules: Rules, model: ModelFacts) -> bool:
    """Whether the V1 engine surely runs this command line: no feature EngineArgs._is_v1_supported_oracle falls back
    to V0 for (as ``_v0_engine`` reads them, with no fact assumed), no SupportsV0Only architecture
    (``rules.v0_only_architectures``) and no pipeline parallelism on another executor (vllm/engine/arg_utils.py of
    0.10.2). Used where vLLM sets defaults only on V1 (``rules.defaults_v1_only``)."""
    cc = args.get("compilation_config")
    r = Resolution(rules, args, env, model, cc if isinstance(cc, Mapping) else {})
    if _v0_engine(r) or r.assumes or set(model.architectures) & rules.v0_only_architectures:
        return False
    return _int(args.get("pipeline_parallel_size")) == 1 or args.get("distributed_executor_backend") in _V1_PP_EXECUTORS


def _default_mode(r: Resolution) -> None:
    """The version's default graph mode."""
    if v0 := _v0_engine(r):
        r.set("NONE", f"{v0}: the V0 engine of {r.tag} captures no graphs by default")
    elif r.rules.family == "opt":
        src = f"optimization level O{r.opt}" + ("" if "optimization_level" in r.args or r.eager else " (default)")
        r.set(OPT_LEVEL_CUDAGRAPH[r.opt], f"{r.tag}: {src} -> {OPT_LEVEL_CUDAGRAPH[r.opt]}")
    elif r.comp != VLLM_COMPILE:
        r.set("NONE", f"{r.tag}: compilation {r.rules.mode_key} {r.comp} (not 3) -> no CUDA graphs by default")
    elif r.rules.family == "v11":
        r.set("FULL_AND_PIECEWISE", f"{r.tag}: default with compilation {r.rules.mode_key} 3 -> FULL_AND_PIECEWISE")
    else:
        r.set("PIECEWISE", f"{r.tag}: default with compilation level 3 on V1 -> PIECEWISE")


def _explicit_mode(r: Resolution) -> None:
    """An explicit compilation_config.cudagraph_mode beats the default."""
    explicit = parse_cg_mode(r.cc.get("cudagraph_mode")) if "cudagraph_mode" in r.cc else None
    if explicit and r.rules.family != "v10.0":
        r.mode, r.explicit = explicit, True
        r.why.append(f"explicit compilation_config.cudagraph_mode={explicit}")


def _legacy_flags(r: Resolution) -> None:
    """``use_cudagraph=false`` / ``full_cuda_graph=true``, converted to NONE / FULL up to 0.11.0 (0.10.2 and
    0.11.0 refuse them next to an explicit cudagraph_mode; 0.10.0 reads full_cuda_graph only with level 3)."""
    if not r.rules.legacy_graph_flags:
        return
    for key, value, mode in (("use_cudagraph", False, "NONE"), ("full_cuda_graph", True, "FULL")):
        if r.cc.get(key) is not value:
            continue
        in_config = r.rules.legacy_flags_in_config
        if r.explicit and in_config:
            raise Refused(f"{key} and cudagraph_mode are mutually exclusive, prefer cudagraph_mode since "
                          f"{key} is deprecated")
        if in_config or mode == "NONE" or r.comp == VLLM_COMPILE:
            r.set(mode, f"compilation_config.{key}={str(value).lower()}")
            r.explicit = in_config


def _dynamic_speculation(r: Resolution) -> None:
    """Dynamic speculative decoding on Model Runner V1 takes no full graphs (0.33): PIECEWISE. V1 drops the
    dynamic schedule for other methods, and data parallel drops it everywhere."""
    spec = r.args.get("speculative_config")
    dynamic = isinstance(spec, Mapping) and spec.get("num_speculative_tokens_per_batch_size") is not None
    if not dynamic or r.runner_v2 is not False or _int(r.args.get("data_parallel_size")) > 1:
        return
    if _spec_method(r) in r.rules.dynamic_spec_v1_methods and has_full(r.mode):
        r.set("PIECEWISE", "dynamic speculative decoding on Model Runner V1")


def _graphs_without_compile(r: Resolution) -> None:
    """Graphs while the compilation mode is not VLLM_COMPILE, by version."""
    how = r.rules.graphs_without_compile
    if r.comp == VLLM_COMPILE or r.mode == "NONE" or how == "refused" or r.breakable:
        return
    because = f"compilation mode {COMP_NAMES.get(r.comp or 0)} (not VLLM_COMPILE)"
    if how == "none" or r.mode == "PIECEWISE":
        r.set("NONE", because)
    elif r.mode == "FULL_AND_PIECEWISE":
        r.set("FULL_DECODE_ONLY", because)


def _v2_stock_torch_compile(r: Resolution) -> None:
    """Model Runner V2 with stock torch.compile (compilation mode 1) captures no graphs (0.33)."""
    if r.runner_v2 and r.comp == 1 and r.mode != "NONE":
        r.set("NONE", "Model Runner V2 with compilation mode STOCK_TORCH_COMPILE")


def _context_parallel(r: Resolution) -> None:
    """Decode/prefill context parallel > 1 does not take full graphs (0.11.1-0.12)."""
    cp = max(_int(r.args.get("decode_context_parallel_size")), _int(r.args.get("prefill_context_parallel_size")))
    if r.rules.context_parallel_piecewise and cp > 1 and has_full(r.mode):
        r.set("PIECEWISE", f"context parallel size {cp} > 1")


def _is_pooling(r: Resolution) -> bool:
    runner, task = r.args.get("runner"), r.args.get("task")
    if runner in ("pooling", "generate"):
        return runner == "pooling"
    if task in _POOLING_TASKS:
        return True
    if task == "generate":
        return False
    convert = r.args.get("convert")
    if r.rules.convert_makes_pooling and isinstance(convert, str) and convert not in ("none", "auto"):
        return True
    return r.fact("pooling", r.model.pooling, assumed=False)


def _model_rule_applies(r: Resolution) -> bool:
    """Graph modes are replaced for pooling / encoder-decoder models from 0.11: 0.11 only in the default mode."""
    return r.rules.family not in ("v10.0", "v10") and not (r.explicit and r.rules.model_rules_default_only)


def _pooling(r: Resolution) -> None:
    """Pooling runners take no full graphs."""
    if has_full(r.mode) and _model_rule_applies(r) and _is_pooling(r):
        r.set("PIECEWISE", "pooling model")


def _encoder_decoder(r: Resolution) -> None:
    """Encoder-decoder models: every graph mode but NONE becomes the version's one."""
    target = r.rules.encoder_decoder_mode
    if r.mode in ("NONE", target) or not _model_rule_applies(r):
        return
    if r.fact("encoder_decoder", r.model.encoder_decoder, assumed=False):
        r.set(target, "encoder-decoder model")


_KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")


def _kv_needs_piecewise(rules: Rules, kv: Any) -> bool:
    """Whether this KV transfer config's connector (or a MultiConnector child) asks for PIECEWISE graphs."""
    if not isinstance(kv, Mapping):
        return False
    extra = kv.get("kv_connector_extra_config")
    extra = extra if isinstance(extra, Mapping) else {}
    if kv.get("kv_connector") == "MultiConnector":
        children = extra.get("connectors")
        return isinstance(children, list) and any(_kv_needs_piecewise(rules, child) for child in children)
    flag = rules.piecewise_kv_connectors.get(str(kv.get("kv_connector")))
    return flag is not None and extra.get(flag) is True


def _kv_connector(r: Resolution) -> None:
    """A KV transfer connector with layer-by-layer transfers takes no full graphs: PIECEWISE (0.33)."""
    kv = r.args.get("kv_transfer_config")
    active = isinstance(kv, Mapping) and kv.get("kv_connector") is not None and kv.get("kv_role") in _KV_ROLES
    if active and has_full(r.mode) and _kv_needs_piecewise(r.rules, kv):
        r.set("PIECEWISE", f"KV connector {kv.get('kv_connector')} with layer-by-layer transfers")


def _eager_mode(r: Resolution) -> None:
    if r.eager:
        r.set("NONE", "--enforce-eager: no CUDA graphs" + (" (optimization level O0)" if r.rules.family == "opt"
                                                             else ""))


_MOONEP_DTYPES = ("auto", "bfloat16")


def _moonep(r: Resolution) -> None:
    """The MoonEP all2all backend (0.33): refused with quantization, another dtype or EPLB; eager-only, so
    no graphs when it dispatches (data parallel, or expert parallel with prefill context parallel)."""
    if not r.rules.moonep_all2all or r.args.get("all2all_backend") != "moonep":
        return
    if r.args.get("quantization") is not None or r.args.get("dtype", "auto") not in _MOONEP_DTYPES:
        raise Refused("The moonep all2all backend currently supports unquantized BF16 models only")
    if r.args.get("enable_eplb"):
        raise Refused("The moonep all2all backend does not support EPLB yet")
    if r.args.get("dtype", "auto") == "auto":
        r.assumes.append("model dtype bfloat16 and unquantized checkpoint assumed (the MoonEP all2all backend "
                         "refuses others)")
    pcp = _int(r.args.get("prefill_context_parallel_size"))
    dispatches = _int(r.args.get("data_parallel_size")) > 1 or (r.args.get("enable_expert_parallel") and pcp > 1)
    if dispatches and r.mode != "NONE":
        r.set("NONE", "all2all moonep (eager-only) with data parallel")


def _dual_batch_overlap(r: Resolution) -> None:
    """``--enable-dbo`` microbatches only through the all2all backends the version lists (0.33 asserts it)."""
    backends = r.rules.dbo_all2all_backends
    backend = r.args.get("all2all_backend", "allgather_reducescatter")
    if backends and r.args.get("enable_dbo") and backend not in backends:
        raise Refused(f"Microbatching currently only supports the {', '.join(sorted(backends))} all2all backends "
                      f"on this platform. {backend} is not supported")


def _all2all(r: Resolution) -> None:
    """deepep_high_throughput all2all with DP > 1 takes no graphs (0.33: MoE models only; 0.10.2: no full
    graphs, PIECEWISE)."""
    if r.rules.all2all_needs_compile and r.comp != VLLM_COMPILE:
        return
    backend = r.args.get("all2all_backend")
    if backend is None and r.rules.all2all_env:
        backend = r.env.get("VLLM_ALL2ALL_BACKEND")
    if backend != "deepep_high_throughput" or _int(r.args.get("data_parallel_size")) <= 1 or r.mode == "NONE":
        return
    if r.rules.all2all_moe_only and not r.fact("moe", r.model.moe, assumed=True):
        return
    if r.rules.all2all_ht_mode == "PIECEWISE" and r.mode == "PIECEWISE":
        return
    r.set(r.rules.all2all_ht_mode, "all2all deepep_high_throughput with data parallel > 1")


def _inductor_partition(r: Resolution) -> None:
    """use_inductor_graph_partition=true: Inductor partitions the graph, splitting_ops change no mode."""
    if r.rules.inductor_partition and r.cc.get("use_inductor_graph_partition") is True and r.comp == VLLM_COMPILE:
        r.splitting_by = "inductor"
        r.why.append("use_inductor_graph_partition=true: splitting_ops do not change the graph mode")


def _fuse_attn_quant(r: Resolution) -> None:
    """Attention+quant fusion (pass_config.enable_attn_fusion 0.11.1, fuse_attn_quant 0.12+) decides
    splitting_ops: unset, they are emptied and piecewise modes become FULL; given, they stay as given."""
    passes = r.cc.get("pass_config")
    keys = [key for key in r.rules.attn_fusion_keys if isinstance(passes, Mapping) and passes.get(key) is True]
    if not keys or r.comp != VLLM_COMPILE or r.splitting_by:
        return
    r.splitting_by = "attn_fusion"
    if "splitting_ops" not in r.cc and has_piecewise(r.mode):
        r.set("FULL", f"pass_config.{keys[0]}=true (splitting_ops emptied)")


def _empty_splitting_ops(r: Resolution) -> None:
    """``splitting_ops=[]``: no piecewise graphs (unless attention fusion decides, or Inductor partitioning where the
    version keeps splitting_ops then)."""
    keeps = r.splitting_by == "attn_fusion" or (r.splitting_by == "inductor" and r.rules.partition_keeps_splitting_ops)
    if r.cc.get("splitting_ops") != [] or r.comp != VLLM_COMPILE or keeps:
        return
    if r.rules.empty_splitting_ops == "piecewise-to-full":
        if r.mode == "PIECEWISE":
            r.set("FULL", "splitting_ops=[]")
    elif has_piecewise(r.mode):
        r.set("NONE" if r.mode == "PIECEWISE" else "FULL", "splitting_ops=[]")


def _piecewise_needs_compile(r: Resolution) -> None:
    """Before 0.12, piecewise graphs without VLLM_COMPILE fail a startup assertion (the V1 engine's only;
    breakable graphs pass)."""
    if has_piecewise(r.mode) and r.comp != VLLM_COMPILE and not r.breakable and not _v0_engine(r):
        raise Refused(f"piecewise CUDA graphs need compilation {r.rules.mode_key} 3 (VLLM_COMPILE); "
                      f"cudagraph_mode={r.mode}")


#: The smallest default ``max_num_batched_tokens`` of a GPU server: capture sizes up to it are never dropped.
_MIN_DEFAULT_BATCHED_TOKENS = 2048


def _capture_sizes(r: Resolution) -> None:
    """Graphs with a maximum capture size of 0 or no capture sizes fail an assertion; a given maximum that is
    not the largest given capture size (those above max_num_batched_tokens dropped) is refused."""
    if r.mode == "NONE" or not r.rules.capture_size_checks:
        return
    sizes = next((r.args[o] for o in ("cudagraph_capture_sizes", "cuda_graph_sizes") if r.args.get(o) is not None),
                 r.cc.get("cudagraph_capture_sizes"))
    largest = r.args.get("max_cudagraph_capture_size", r.cc.get("max_cudagraph_capture_size"))
    if largest == 0:
        raise Refused("Maximum cudagraph size should be greater than or equal to 1 when using cuda graph")
    if sizes == []:
        raise Refused("cudagraph_capture_sizes should contain at least one element when using cuda graph")
    if isinstance(largest, int) and isinstance(sizes, list) and sizes:
        _capture_max_matches(r, largest, sizes)


def _capture_max_matches(r: Resolution, largest: int, sizes: list[Any]) -> None:
    """A given maximum capture size must equal the largest capture size kept (vLLM's _set_cudagraph_sizes)."""
    limit = r.args.get("max_num_batched_tokens")
    if not isinstance(limit, int):
        if max(sizes) > _MIN_DEFAULT_BATCHED_TOKENS:
            r.assumes.append(f"capture sizes above {_MIN_DEFAULT_BATCHED_TOKENS} assumed within the default "
                             "max_num_batched_tokens")
        limit = max(sizes)
    kept = [size for size in sizes if isinstance(size, int) and size <= limit]
    if largest != (max(kept) if kept else 0):
        raise Refused(f"customized max_cudagraph_capture_size(={largest}) should be consistent with the max value "
                      f"of cudagraph_capture_sizes(={max(kept) if kept else 0})")


#: vLLM normalises graphs without VLLM_COMPILE twice (0.33): before and after the model rules.
STEPS: tuple[Step, ...] = (
    _speculative_flags, _memory_fraction, _scheduler_sizes, _batched_tokens, _capture_options, _speculative_method,
    _ngram_window, _lora_cpu_slots,
    _draft_model, _speculative_tokens, _mtp_layers, _eagle_targets, _kv_dtype_model, _partial_prefills,
    _chunked_prefill_off, _v1_required,
    _speculative_on_v0, _world_size,
    _prefill_context_parallel, _attention_heads, _max_model_len, _quantization, _quantization_files,
    _lora_speculative,
    _kv_transfer, _kv_expandable_segments,
    _expert_parallel, _decode_context_parallel, _model_runner, _async_scheduling, _enforce_eager, _optimization_level,
    _compilation_mode, _torch_compile_disable, _breakable_cudagraph, _default_mode, _explicit_mode, _legacy_flags,
    _dynamic_speculation, _graphs_without_compile, _context_parallel, _pooling, _encoder_decoder, _kv_connector,
    _eager_mode, _capture_sizes, _graphs_without_compile, _v2_stock_torch_compile, _moonep, _all2all,
    _inductor_partition, _fuse_attn_quant, _empty_splitting_ops, _piecewise_needs_compile, _dual_batch_overlap,
)


def declare(args: Mapping[str, Any], env: Mapping[str, str] | None = None, version: str | None = None,
            model: ModelFacts = UNKNOWN, gpus: int | None = None) -> Declared:
    """The declared CUDA graph mode of normalised ``args`` under ``env`` for vLLM ``version`` on a host with
    ``gpus`` GPUs (None: unknown, and what the resolution assumed about them is recorded)."""
    rules, note = rules_for(version)
    cc = args.get("compilation_config")
    r = Resolution(rules, args, env or {}, model, cc if isinstance(cc, Mapping) else {}, gpus)
    if note:
        r.why.append(note)
    refused = None
    try:
        for step in STEPS:
            step(r)
    except Refused as err:
        refused = f"{r.tag} refuses: {err}"
    return Declared(
        mode=None if refused else r.mode,
        because="; ".join(r.why),
        rules_version=rules.version,
        compilation_mode=COMP_NAMES.get(r.comp) if r.comp is not None and not refused else None,
        problems=r.problems,
        refused=refused,
        assumes=sorted(set(r.assumes)),
    )
