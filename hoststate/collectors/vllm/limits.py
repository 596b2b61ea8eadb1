"""What a model's config.json says about the limits vLLM checks a command line against.

vLLM refuses ``-tp`` that does not divide the attention heads, a ``--max-model-len`` above the length it derives
from the config, and a ``--quantization`` other than the checkpoint's. These are the raw facts, read from the
same config.json as model.py's; which rule applies in which version is cudagraph.py's and versions.py's.
None means the config does not say (vLLM then has a default; the resolution records what it assumed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: config.json keys vLLM takes the smallest of as the model's maximum length (``_get_and_verify_max_len``).
MAX_LEN_KEYS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
                "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len")


@dataclass(frozen=True)
class ConfigLimits:
    """Limits from config.json (the text config of a multimodal model)."""

    #: ``num_attention_heads``: tensor parallel size must divide it.
    attention_heads: int | None = None
    #: The smallest of MAX_LEN_KEYS (``model_max_length`` wins when set), and the key it came from.
    max_positions: int | None = None
    max_positions_key: str | None = None
    model_max_length: int | None = None
    #: RoPE scaling: type (``rope_type`` or ``type``), ``factor`` and ``original_max_position_embeddings``.
    rope_type: str | None = None
    rope_factor: float | None = None
    rope_original: int | None = None
    #: A RoPE table whose type is not at its top level (per layer type, as newer configs nest it): its scaling is
    #: not known here.
    rope_unread: bool = False
    sliding_window: int | None = None
    model_type: str | None = None
    #: The checkpoint's ``quantization_config.quant_method`` (``compression_config`` for compressed-tensors);
    #: None: not quantized.
    quant_method: str | None = None


def _text(config: Mapping[str, Any]) -> Mapping[str, Any]:
    text = config.get("text_config")
    return text if isinstance(text, Mapping) else config


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _max_positions(text: Mapping[str, Any]) -> tuple[int | None, str | None]:
    found = [(value, key) for key in MAX_LEN_KEYS if (value := _int(text.get(key))) is not None]
    if _int(text.get("model_max_length")):
        return _int(text.get("model_max_length")), "model_max_length"
    return min(found) if found else (None, None)


def _rope(config: Mapping[str, Any], text: Mapping[str, Any]) -> Mapping[str, Any]:
    for cfg in (text, config):
        for key in ("rope_scaling", "rope_parameters"):
            if isinstance(cfg.get(key), Mapping):
                return cfg[key]
    return {}


def _quant_method(config: Mapping[str, Any], text: Mapping[str, Any]) -> str | None:
    for cfg in (config, text):
        for key in ("quantization_config", "compression_config"):
            quant = cfg.get(key)
            if isinstance(quant, Mapping) and isinstance(quant.get("quant_method"), str):
                return quant["quant_method"]
    return None


def config_limits(config: Mapping[str, Any]) -> ConfigLimits:
    """The limits of a parsed config.json."""
    text = _text(config)
    rope = _rope(config, text)
    rope_type = rope.get("rope_type", rope.get("type"))
    factor = rope.get("factor")
    positions, key = _max_positions(text)
    model_type = text.get("model_type", config.get("model_type"))
    return ConfigLimits(
        attention_heads=_int(text.get("num_attention_heads")),
        max_positions=positions, max_positions_key=key, model_max_length=_int(text.get("model_max_length")),
        rope_type=rope_type if isinstance(rope_type, str) else None,
        rope_factor=float(factor) if isinstance(factor, int | float) and not isinstance(factor, bool) else None,
        rope_original=_int(rope.get("original_max_position_embeddings")),
        rope_unread=bool(rope) and not isinstance(rope_type, str),
        sliding_window=_int(text.get("sliding_window")),
        model_type=model_type if isinstance(model_type, str) else None,
        quant_method=_quant_method(config, text),
    )
