"""What the model is, as far as the CUDA graph mode depends on it: MoE or dense, pooling or
generative, encoder-decoder or not.

vLLM decides these from the model's Hugging Face ``config.json`` (and a Sentence Transformers
``modules.json``). hoststate reads the same files when it can: the model argument as a local
directory, else the server's Hugging Face cache (``HF_HUB_CACHE``, ``HF_HOME/hub``, ``~/.cache``).
When it cannot, each fact is None (unknown) and the resolution states the assumption it made
(``vllm.cudagraph.declared_assumes``) instead of guessing silently. Files are read bounded, regular
files only, never blocking on a FIFO: another user's cache is untrusted input.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Largest config file read.
MAX_BYTES = 1 << 20

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
    architectures: tuple[str, ...] = ()
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


def facts_from_config(config: Mapping[str, Any], modules: Any = None, source: str = "config.json") -> ModelFacts:
    """Facts from a parsed config.json (and modules.json when the model has one)."""
    archs = tuple(a for a in config.get("architectures") or () if isinstance(a, str))
    st_pooling = isinstance(modules, list) and any(
        isinstance(m, Mapping) and str(m.get("type", "")).endswith("Pooling") for m in modules)
    encdec = bool(config.get("is_encoder_decoder")) or bool(_text_config(config).get("is_encoder_decoder"))
    return ModelFacts(moe=_num_experts(config) > 1, pooling=_runner_is_pooling(archs, st_pooling),
                      encoder_decoder=encdec, kv_heads=_kv_heads(config),
                      mla=_text_config(config).get("kv_lora_rank") is not None, architectures=archs, source=source)


def _read_json(path: str) -> tuple[Any, str | None]:
    """A small JSON file: (value, None) or (None, reason). Regular files only; never blocks."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as err:
        return None, f"{path}: {os.strerror(err.errno or 0) or type(err).__name__}"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None, f"{path}: not a regular file"
        if st.st_size > MAX_BYTES:
            return None, f"{path}: larger than {MAX_BYTES} bytes"
        data = os.read(fd, MAX_BYTES + 1)
    except OSError as err:
        return None, f"{path}: {os.strerror(err.errno or 0)}"
    finally:
        os.close(fd)
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


def model_dirs(model: str, env: Mapping[str, str], revision: str | None = None) -> list[str]:
    """Directories that may hold the model's config.json: the model itself when it is a path, else
    the snapshot of ``revision`` (default main) in each Hugging Face cache the server would use."""
    if model.startswith(("/", "./", "../")) or os.sep in model and os.path.isdir(model):
        return [model]
    if model.count("/") > 1 or ".." in model.split("/"):
        return []
    repo = "models--" + model.replace("/", "--")
    out = []
    for cache in _cache_dirs(env):
        ref = revision or "main"
        try:
            with open(os.path.join(cache, repo, "refs", ref), encoding="ascii", errors="replace") as fh:
                ref = fh.read(100).strip() or ref
        except OSError:
            pass
        if "/" not in ref and ".." not in ref:
            out.append(os.path.join(cache, repo, "snapshots", ref))
    return out


def read_facts(model: str | None, env: Mapping[str, str], root: str = "/", revision: str | None = None) -> ModelFacts:
    """The model's facts from its files, or UNKNOWN with the reason in ``source``."""
    if not model:
        return ModelFacts(source="no model named")
    reasons = []
    for directory in model_dirs(model, env, revision):
        base = os.path.join(root, directory.lstrip("/")) if root not in ("", "/") else directory
        config, why = _read_json(os.path.join(base, "config.json"))
        if isinstance(config, dict):
            modules, _ = _read_json(os.path.join(base, "modules.json"))
            return facts_from_config(config, modules, source=os.path.join(directory, "config.json"))
        reasons.append(why or f"{directory}/config.json: not a JSON object")
    if not reasons:
        return ModelFacts(source=f"no readable copy of {model}'s config.json (no Hugging Face cache named)")
    return ModelFacts(source=f"{model}'s config.json could not be read ({reasons[0]})")
