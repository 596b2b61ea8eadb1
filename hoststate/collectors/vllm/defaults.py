"""Each recorded vLLM version's parser defaults, and the arguments as the engine resolves them.

vLLM calls an argument "non-default" when it differs from its parser's default (``log_non_default_args``), so
``--seed 0`` on 0.12, ``--dtype auto`` or ``--port 8000`` is the server vLLM would start with no argument at all.
The defaults come from hoststate/data/vllm_defaults.json, derived by scripts/vllm_defaults.py from what each
version's own parser recorded (fixtures/vllm/oracle/options). A version without a recording has no known
defaults: its arguments are kept as spelled, and ``DefaultsFor.source`` says so.

Beyond the parser, a few arguments resolve against the model or the engine (``resolve``): a ``--dtype`` that names
the checkpoint's own dtype, ``--served-model-name`` equal to the model, ``--trust-remote-code`` for a model whose
config.json names no remote code, ``--seed 0`` where the V1 engine seeds 0 when none is given (0.10-0.11).
And a value vLLM maps to the same setting as another name (``--dtype half`` is ``float16``: SPELLINGS) is written
under that one name, so two spellings of one server compare equal.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from hoststate.collectors.vllm.model import ModelFacts
from hoststate.collectors.vllm.versions import version_key

DATA = "vllm_defaults.json"


@functools.lru_cache(maxsize=1)
def _table() -> dict[str, dict[str, Any]]:
    text = resources.files("hoststate").joinpath("data", DATA).read_text(encoding="utf-8")
    return json.loads(text)["versions"]


@dataclass(frozen=True)
class DefaultsFor:
    """One version's parser defaults (None: not recorded) and where they come from, in words."""

    defaults: Mapping[str, Any] | None
    source: str


def defaults_for(version: str | None) -> DefaultsFor:
    """The parser defaults of exactly ``version`` (major.minor.patch); another version's are never borrowed."""
    key = version_key(version or "")
    for recorded, table in _table().items():
        if key is not None and version_key(recorded) == key:
            return DefaultsFor(table, f"vLLM {recorded}'s parser defaults (hoststate/data/{DATA}, recorded from "
                                      "vLLM's own parser)")
    what = f"vLLM {version}" if version else "an unknown vLLM version"
    recorded_list = ", ".join(sorted(_table(), key=lambda v: version_key(v) or (0, 0, 0)))
    return DefaultsFor(None, f"the parser defaults of {what} are not recorded (recorded: {recorded_list}): "
                             "arguments spelled at their default are compared as given")


def at_default(dest: str, value: Any, defaults: Mapping[str, Any]) -> bool:
    """vLLM's own test: the value equals the parser default (a config object, given as a mapping, never does:
    vLLM compares the built object, hoststate keeps the keys given)."""
    return dest in defaults and not isinstance(value, Mapping) and value == defaults[dest]


def drop_defaults(args: dict[str, Any], defaults: Mapping[str, Any] | None) -> list[str]:
    """Remove the arguments at their version's parser default from ``args``; the dests removed."""
    if defaults is None:
        return []
    dropped = [dest for dest, value in args.items() if dest != "model" and at_default(dest, value, defaults)]
    for dest in dropped:
        del args[dest]
    return dropped


#: ``--dtype`` names and the torch dtype each stands for (vLLM's _STR_DTYPE_TO_TORCH_DTYPE).
DTYPE_NAMES = {"half": "float16", "float16": "float16", "bfloat16": "bfloat16", "float": "float32",
               "float32": "float32"}


#: Values of an argument that vLLM maps to one setting, by dest: each alias, the name written in its place, and the
#: source. ``--kv-cache-dtype fp8`` is not here: vLLM's help says fp8 is fp8_e4m3 on CUDA, but an attention backend
#: may list one and not the other (a sparse MLA backend takes fp8 for fp8_ds_mla), so the backend can differ.
SPELLINGS: dict[str, tuple[dict[str, str], str]] = {
    "dtype": ({name: torch for name, torch in DTYPE_NAMES.items() if name != torch},
              "the same torch dtype (vLLM's _STR_DTYPE_TO_TORCH_DTYPE, vllm/config/model.py)"),
}


@dataclass
class Resolved:
    """The arguments as the engine resolves them, why each argument left out was left out, and which values were
    written under the one name vLLM maps them to (``spelled``)."""

    args: dict[str, Any]
    same_as_unset: dict[str, str] = field(default_factory=dict)
    spelled: dict[str, str] = field(default_factory=dict)


def canonical(args: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """``args`` with each alias in SPELLINGS written as the name vLLM maps it to, and why, by dest."""
    out, spelled = dict(args), {}
    for dest, (aliases, source) in SPELLINGS.items():
        value = out.get(dest)
        if isinstance(value, str) and value in aliases:
            out[dest] = aliases[value]
            spelled[dest] = f"{value} is {aliases[value]}: {source}"
    return out, spelled


def _dtype(args: Mapping[str, Any], facts: ModelFacts) -> str | None:
    given = DTYPE_NAMES.get(str(args.get("dtype", "")).lower())
    own = facts.dtype
    # a float32 checkpoint under ``auto`` runs in a 16-bit dtype vLLM picks: no given dtype is the same then
    if given is None or own is None or own == "float32" or given != own:
        return None
    return f"the checkpoint's own dtype ({own}, {facts.source}): what --dtype auto resolves to"


def _served_name(args: Mapping[str, Any]) -> str | None:
    if args.get("served_model_name") == [args.get("model")] and isinstance(args.get("model"), str):
        return "the model's own name: what vLLM serves it as when no name is given"
    return None


def _remote_code(args: Mapping[str, Any], facts: ModelFacts) -> str | None:
    if args.get("trust_remote_code") is True and facts.remote_code is False:
        return f"config.json names no remote code (no auto_map; {facts.source}): vLLM's own model code runs either way"
    return None


def _tokenizer(args: Mapping[str, Any]) -> str | None:
    if isinstance(args.get("model"), str) and args.get("tokenizer") == args.get("model"):
        return "the model's own tokenizer: what ModelConfig takes when no tokenizer is given"
    return None


def _revision(args: Mapping[str, Any]) -> str | None:
    if args.get("revision") == "main":
        return "the Hub's default branch: what huggingface_hub downloads when no revision is given (DEFAULT_REVISION)"
    return None


def _seed(args: Mapping[str, Any], env: Mapping[str, str], seed_unset: int | None) -> str | None:
    if seed_unset is None or args.get("seed") != seed_unset or isinstance(args.get("seed"), bool):
        return None
    if env.get("VLLM_USE_V1", "1").strip().lower() in ("0", "false"):
        return None  # the V0 engine leaves the seed unset
    return f"the V1 engine seeds {seed_unset} when no seed is given (ModelConfig.__post_init__)"


def resolve(args: Mapping[str, Any], facts: ModelFacts, env: Mapping[str, str],
            seed_unset: int | None) -> Resolved:
    """``args`` less what resolves to the same engine setting as leaving it out (``seed_unset``: the seed the
    version's engine takes when none is given, None where the parser default already says so)."""
    reasons = {"dtype": _dtype(args, facts), "served_model_name": _served_name(args),
               "trust_remote_code": _remote_code(args, facts), "seed": _seed(args, env, seed_unset),
               "tokenizer": _tokenizer(args), "revision": _revision(args)}
    same = {dest: why for dest, why in reasons.items() if why is not None and dest in args}
    kept, spelled = canonical({k: v for k, v in args.items() if k not in same})
    return Resolved(kept, same, spelled)
