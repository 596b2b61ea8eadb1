"""The speculative method vLLM runs, and whether the served model can draft for itself (MTP).

SpeculativeConfig.__post_init__ (read in vLLM's vllm/config/speculative.py) decides the method before anything
checks it: a method given is taken (0.33 reads every MTP kind as ``mtp``); with none, a draft ``model`` is detected
by its name ("eagle-" -> eagle, "eagle3" -> eagle3, and from 0.33 "dflash"/"dspark"), ``ngram`` by that model name,
and any other draft model is a plain draft model ("draft_model") unless its own config.json says Medusa, MLP
speculator or MTP, which hoststate does not read (so it records the assumption). Every later rule (the methods a
version refuses, async scheduling, Model Runner V2) sees the detected method, as vLLM's do.

An MTP method with no draft model drafts with the served model's own MTP layers: hf_config_override turns the
model's config into an MTP draft only where it names them (``num_nextn_predict_layers`` and its kin); a model
without any (a Llama) leaves vLLM no MTP draft, and it refuses.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hoststate.collectors.vllm.fields import forbids, unknown_keys
from hoststate.collectors.vllm.versions import Rules

#: config.json keys that count a model's MTP layers (hf_config_override: DeepSeek, GLM, Ernie, Qwen3-Next/3.5,
#: MiMo, Bailing, ExaOne, Nemotron-H, Kimi ...: ``num_nextn_predict_layers``; Qwen3.5/Qwen4: ``mtp_num_hidden_layers``;
#: MiniMax-M3: ``num_mtp_modules``).
MTP_LAYER_KEYS = ("num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")
#: Families hf_config_override gives MTP layers without such a key (a fixed or default count).
MTP_BY_FAMILY = ("dots3_note", "minimax_m3")
MTP_BY_ARCHITECTURE = ("MiMoV2",)


def is_mtp(method: str | None) -> bool:
    return isinstance(method, str) and (method == "mtp" or method.endswith("_mtp"))


def detect(spec: Mapping[str, Any], new_names: bool) -> tuple[str | None, str | None]:
    """(the method vLLM runs, an assumption made) for a speculative config; ``new_names``: 0.33's dflash/dspark."""
    method, model = spec.get("method"), spec.get("model")
    if isinstance(method, str):
        return method, None
    if not isinstance(model, str):
        return None, None
    name = model.lower()
    if model in ("ngram", "[ngram]"):
        return "ngram", None
    for needle, found in (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"), ("dspark", "dspark")):
        if needle in name and (new_names or found in ("eagle", "eagle3")):
            return found, None
    return "draft_model", (f"draft model {model!r} given without a method: a plain draft model assumed (its own "
                           "config.json, which could make it Medusa, an MLP speculator or MTP, is not read)")


def _text(config: Mapping[str, Any]) -> Mapping[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, Mapping) else {}


def has_mtp_layers(config: Mapping[str, Any]) -> bool:
    """Whether vLLM can make an MTP draft of this config.json (see the module docstring)."""
    for cfg in (config, _text(config)):
        for key in MTP_LAYER_KEYS:
            value = cfg.get(key)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return True
    model_type = str(config.get("model_type", ""))
    archs = [a for a in config.get("architectures") or () if isinstance(a, str)]
    return model_type.startswith(MTP_BY_FAMILY) or any(a.startswith(MTP_BY_ARCHITECTURE) for a in archs)


#: 0.33's ``--spec-method`` / ``--spec-model`` / ``--spec-tokens`` and the speculative_config key each sets.
SPEC_FLAGS = (("spec_method", "method"), ("spec_model", "model"), ("spec_tokens", "num_speculative_tokens"))


def fold_flags(args: Mapping[str, Any]) -> tuple[Any, str | None]:
    """The speculative config with the ``--spec-*`` flags folded in as EngineArgs.create_speculative_config does
    (vllm/engine/arg_utils.py of 0.33.0: each flag given sets its key), and vLLM's refusal where a flag meets the same
    key of ``--speculative-config``; the config as given where no flag is."""
    given = {key: args[dest] for dest, key in SPEC_FLAGS if args.get(dest) is not None}
    spec = args.get("speculative_config")
    if not given:
        return spec, None
    spec = dict(spec) if isinstance(spec, Mapping) else {}
    for dest, key in SPEC_FLAGS:
        if key in given and key in spec:
            return spec, f"--{dest.replace('_', '-')} and --speculative-config['{key}'] are mutually exclusive"
    return {**spec, **given}, None


def as_built(spec: Mapping[str, Any], rules: Rules) -> tuple[dict[str, Any], tuple[str, ...]]:
    """The mapping EngineArgs.create_speculative_config builds SpeculativeConfig from, and its keys that are no field
    of the version's SpeculativeConfig (fields.unknown_keys): 0.33 writes each key's dashes as underscores first
    (rules.spec_keys_dashed); a key that is no field is dropped where pydantic ignores it (up to 0.12.0) and kept
    where it forbids it (0.33.0: the config is refused)."""
    built = {(k.replace("-", "_") if rules.spec_keys_dashed and isinstance(k, str) else k): v for k, v in spec.items()}
    unknown = unknown_keys(built, rules.version, "speculative_config")
    if unknown and not forbids(rules.version, "speculative_config"):
        built = {k: v for k, v in built.items() if k not in unknown}
    return built, unknown
