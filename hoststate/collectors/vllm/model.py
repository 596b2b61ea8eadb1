"""What the model is, as far as the CUDA graph mode depends on it: MoE or dense, pooling or
generative, encoder-decoder or not.

vLLM decides these from the model's Hugging Face ``config.json`` (and a Sentence Transformers
``modules.json``). hoststate reads the same files when it can: the model argument as a local
directory, else the server's Hugging Face cache (``HF_HUB_CACHE``, ``HF_HOME/hub``, ``~/.cache``).
When it cannot, each fact is None (unknown) and the resolution states the assumption it made
(``vllm.cudagraph.declared_assumes``) instead of guessing silently.

Every file goes through the caller's ``Read`` function, which decides whose rights apply: a running
server's cache is another user's, read by a reader holding that process's identity, so the kernel
decides (procfiles.ProcView: mode bits, ACLs, LSMs; a setuid-style process gets no root rights); a
captured tree is read confined to ``--root``; the user's own ``--vllm-cmd`` model from here,
regular files only. Contents are untrusted input: bounded, JSON only.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from hoststate.collectors.vllm.limits import ConfigLimits, config_limits
from hoststate.collectors.vllm.speculative import has_mtp_layers
from hoststate.collectors.vllm.versions import Rules

#: Largest config file read.
MAX_BYTES = 1 << 20
#: What a Hugging Face cache's ``refs/<revision>`` file holds: the commit its snapshot directory is named after.
_COMMIT = re.compile(r"[0-9a-f]{40}")

#: config.json keys that hold a model's number of routed experts (vLLM's ``get_num_experts``).
EXPERT_KEYS = ("num_experts", "moe_num_experts", "n_routed_experts", "num_local_experts")

#: Architecture name endings and the runner vLLM picks for them when its registry has no entry.
ARCH_SUFFIX_RUNNER: tuple[tuple[str, str], ...] = (
    ("ForCausalLM", "generate"), ("ForConditionalGeneration", "generate"), ("ChatModel", "generate"),
    ("LMHeadModel", "generate"), ("ForTextEncoding", "pooling"), ("EmbeddingModel", "pooling"),
    ("ForSequenceClassification", "pooling"), ("ForAudioClassification", "pooling"),
    ("ForImageClassification", "pooling"), ("ForVideoClassification", "pooling"),
    ("ClassificationModel", "pooling"), ("ForRewardModeling", "pooling"), ("RewardModel", "pooling"),
    ("Model", "pooling"),
)


#: Architectures whose vLLM model class is hybrid (IsHybrid: attention beside Mamba/linear-attention layers) or
#: attention-free (IsAttentionFree), in any of vLLM 0.10.2-0.33.0's registries (vllm/model_executor/models/
#: registry.py, each class's bases in its module; 0.33 also vllm/models/). vLLM decides prefix caching for these
#: otherwise (ModelConfig.is_prefix_caching_supported, attn_type "hybrid" / "attention_free"). An architecture
#: outside the registry runs on the Transformers backend, which is neither.
HYBRID_ARCHITECTURES = frozenset({
    "AliceAIForCausalLM", "BailingMoeV2_5ForCausalLM", "BailingMoeV3ForCausalLM",
    "BailingMoeV3VLForConditionalGeneration", "BambaForCausalLM", "ClefFlashForJointSchema", "ColBERTLfm2Model",
    "ColQwen3_5", "FalconH1ForCausalLM", "FalconMambaForCausalLM", "Glm5NextForCausalLM",
    "Glm5NextForConditionalGeneration", "GraniteMoeHybridForCausalLM", "InternS2MobiusForConditionalGeneration",
    "InternS2PreviewForConditionalGeneration", "JambaForCausalLM", "JambaForSequenceClassification",
    "KimiK3ForConditionalGeneration", "KimiLinearForCausalLM", "Lfm2ForCausalLM", "Lfm2MoeForCausalLM",
    "Lfm2VlForConditionalGeneration", "Mamba2ForCausalLM", "MambaForCausalLM", "MiniCPMOcrForConditionalGeneration",
    "MiniCPMV4_6ForConditionalGeneration", "MiniCPMV4_7ForConditionalGeneration", "MiniMaxForCausalLM",
    "MiniMaxM1ForCausalLM", "MiniMaxText01ForCausalLM", "NemotronHForCausalLM", "NemotronHPuzzleForCausalLM",
    "NemotronH_Nano_Omni_Reasoning_V3", "NemotronH_Nano_VL", "NemotronH_Nano_VL_V2", "NemotronH_Omni_Reasoning_V3",
    "NemotronH_Super_Omni_Reasoning_V3", "OlmoHybridForCausalLM", "Phi4FlashForCausalLM", "Plamo2ForCausalLM",
    "PrithviGeoSpatialMAE", "Qwen3NextForCausalLM", "Qwen3_5ForCausalLM", "Qwen3_5ForConditionalGeneration",
    "Qwen3_5MoeForCausalLM", "Qwen3_5MoeForConditionalGeneration", "Qwen4ExpForCausalLM",
    "Qwen4ExpForConditionalGeneration", "Terratorch", "Zamba2ForCausalLM"})


@dataclass(frozen=True)
class ModelFacts:
    """Facts about the served model; None means unknown (``source`` says why)."""

    moe: bool | None = None
    #: The runner vLLM's ``--runner auto`` picks: True pooling, False generate.
    pooling: bool | None = None
    encoder_decoder: bool | None = None
    #: Total key/value heads, and whether attention is MLA (DeepSeek's latent attention).
    kv_heads: int | None = None
    mla: bool | None = None
    #: Whether an architecture is in HYBRID_ARCHITECTURES; None when config.json names none.
    hybrid: bool | None = None
    architectures: tuple[str, ...] = ()
    #: Attention heads, maximum length, checkpoint quantization: what vLLM checks the arguments against.
    limits: ConfigLimits = ConfigLimits()
    #: The checkpoint's dtype (``torch_dtype``, or ``dtype`` in newer configs), as a torch dtype name.
    dtype: str | None = None
    #: Whether config.json names remote model code (``auto_map``): only then does ``--trust-remote-code`` matter.
    remote_code: bool | None = None
    #: Whether the config names MTP layers vLLM can draft with (speculative.has_mtp_layers).
    mtp_layers: bool | None = None
    #: The quantization config files found beside config.json (QUANT_FILES), None when not looked for.
    quant_files: frozenset[str] | None = None
    source: str = "the model's config.json was not read"

    @property
    def known(self) -> bool:
        return self.moe is not None


UNKNOWN = ModelFacts()


def _text_config(config: Mapping[str, Any]) -> Mapping[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, Mapping) else config


def _num_experts(config: Mapping[str, Any]) -> int:
    for cfg in (config, _text_config(config)):
        for key in EXPERT_KEYS:
            value = cfg.get(key)
            if isinstance(value, list) and value:
                value = value[0]
            if isinstance(value, int) and not isinstance(value, bool) and value:
                return value
    return 0


def _kv_heads(config: Mapping[str, Any]) -> int | None:
    text = _text_config(config)
    if text.get("multi_query"):
        return 1
    for key in ("num_key_value_heads", "num_attention_heads", "n_head"):
        value = text.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def _runner_is_pooling(architectures: tuple[str, ...], sentence_transformers: bool) -> bool:
    if sentence_transformers:
        return True
    for arch in architectures:
        for suffix, runner in ARCH_SUFFIX_RUNNER:
            if arch.endswith(suffix):
                return runner == "pooling"
    return False


def _dtype(config: Mapping[str, Any]) -> str | None:
    """The root config's ``torch_dtype`` (or ``dtype``), else its text_config's: vLLM's order in ``_find_dtype``
    (vllm/config/model.py of 0.11.0-0.12.0, vllm/config/__init__.py of 0.10.2; 0.33's
    transformers_utils/model_arch_config_convertor.py), where the text config is only a fallback for multimodal
    configs whose root names none."""
    for cfg in (config, _text_config(config)):
        for key in ("torch_dtype", "dtype"):
            value = cfg.get(key)
            if isinstance(value, str) and value:
                return value.removeprefix("torch.")
    return None


#: Files vLLM's get_quant_config looks for when config.json holds no quantization_config (each method's
#: get_config_filenames: AWQ quant_config.json or quantize_config.json, GPTQ and the Marlin kernels
#: quantize_config.json, ModelOpt hf_quant_config.json).
QUANT_FILES = ("quant_config.json", "quantize_config.json", "hf_quant_config.json")


def facts_from_config(config: Mapping[str, Any], modules: Any = None, source: str = "config.json",
                      files: frozenset[str] | None = None) -> ModelFacts:
    """Facts from a parsed config.json (and modules.json when the model has one); ``files``: the QUANT_FILES
    beside it, when looked for."""
    archs = tuple(a for a in config.get("architectures") or () if isinstance(a, str))
    st_pooling = isinstance(modules, list) and any(
        isinstance(m, Mapping) and str(m.get("type", "")).endswith("Pooling") for m in modules)
    encdec = bool(config.get("is_encoder_decoder")) or bool(_text_config(config).get("is_encoder_decoder"))
    return ModelFacts(moe=_num_experts(config) > 1, pooling=_runner_is_pooling(archs, st_pooling),
                      encoder_decoder=encdec, kv_heads=_kv_heads(config),
                      mla=_text_config(config).get("kv_lora_rank") is not None,
                      hybrid=bool(set(archs) & HYBRID_ARCHITECTURES) if archs else None, architectures=archs,
                      limits=config_limits(config), dtype=_dtype(config),
                      remote_code=isinstance(config.get("auto_map"), Mapping) and bool(config["auto_map"]),
                      mtp_layers=has_mtp_layers(config), quant_files=files,
                      source=source)


#: Reads one file: (content, None) or (None, reason). Whose rights and which root is the caller's choice.
Read = Callable[[str], tuple[bytes | None, str | None]]


def _read_json(read: Read, path: str) -> tuple[Any, str | None]:
    """A small JSON file: (value, None) or (None, reason)."""
    data, why = read(path)
    if data is None:
        return None, f"{path}: {why or 'unreadable'}"
    if len(data) > MAX_BYTES:
        return None, f"{path}: larger than {MAX_BYTES} bytes"
    try:
        return json.loads(data.decode("utf-8")), None
    except (UnicodeDecodeError, ValueError):
        return None, f"{path}: not JSON"


def _cache_dirs(env: Mapping[str, str]) -> list[str]:
    dirs = []
    if env.get("HF_HUB_CACHE"):
        dirs.append(env["HF_HUB_CACHE"])
    if env.get("HF_HOME"):
        dirs.append(os.path.join(env["HF_HOME"], "hub"))
    if env.get("HOME"):
        dirs.append(os.path.join(env["HOME"], ".cache", "huggingface", "hub"))
    return dirs


def model_dirs(model: str, env: Mapping[str, str], read: Read, revision: str | None = None) -> list[str]:
    """Directories that may hold the model's config.json, in vLLM's order: the model argument as a
    directory (absolute, or relative to the server's working directory), then the snapshot of
    ``revision`` (default main) in each Hugging Face cache the server would use."""
    out = [model]
    if model.startswith(("/", "./", "../")) or model.count("/") > 1 or ".." in model.split("/"):
        return out  # a path, never a hub repo id
    repo = "models--" + model.replace("/", "--")
    for cache in _cache_dirs(env):
        ref = revision or "main"
        data, _ = read(os.path.join(cache, repo, "refs", ref))
        if data is not None:
            commit = data.decode("ascii", "replace").strip()
            # Only a commit hash is taken from the file: anything else it holds never reaches a path or a message.
            ref = commit if _COMMIT.fullmatch(commit) else ""
        if ref and "/" not in ref and ".." not in ref:
            out.append(os.path.join(cache, repo, "snapshots", ref))
    return out


def read_facts(model: str | None, env: Mapping[str, str], read: Read, revision: str | None = None) -> ModelFacts:
    """The model's facts from its files, or UNKNOWN with the reason in ``source``."""
    if not model:
        return ModelFacts(source="no model named")
    reasons = []
    for directory in model_dirs(model, env, read, revision):
        config, why = _read_json(read, os.path.join(directory, "config.json"))
        if isinstance(config, dict):
            modules, _ = _read_json(read, os.path.join(directory, "modules.json"))
            files = None
            if not isinstance(config.get("quantization_config"), Mapping):  # only then does vLLM look for them
                files = frozenset(n for n in QUANT_FILES if read(os.path.join(directory, n))[0] is not None)
            return facts_from_config(config, modules, source=os.path.join(directory, "config.json"), files=files)
        reasons.append(why or f"{directory}/config.json: not a JSON object")
    why = (reasons[1:] or reasons)[0]  # a hub id's cache says more than the same name as a directory
    return ModelFacts(source=f"{model}'s config.json could not be read ({why})")


def derived_max_len(model: ModelFacts, args: Mapping[str, Any], rules: Rules) -> float | None:
    """The maximum length vLLM derives from config.json (``_get_and_verify_max_len``), which it takes when no
    ``--max-model-len`` is given; None when it has none."""
    limits = model.limits
    derived: float | None = limits.max_positions
    if derived is None:
        return None
    window = limits.sliding_window
    if args.get("disable_sliding_window") and window is not None and window < derived:
        derived = window
    rope = limits.rope_type
    if rope and rope not in rules.rope_unscaled_types and "gemma3" not in (limits.model_type or ""):
        if rope == "yarn" and rules.rope_yarn_from_original:
            derived = limits.rope_original
        derived = None if derived is None else derived * (limits.rope_factor or 1.0)
    return derived


def generative(args: Mapping[str, Any], model: ModelFacts) -> bool:
    """A decoder-only model run as a generative one (config.json read, the runner and conversion left as given)."""
    return (model.known and model.pooling is False and model.encoder_decoder is False
            and args.get("runner", "generate") == "generate" and args.get("convert", "none") == "none")
