"""Each recorded vLLM version's parser defaults, and the arguments as the engine resolves them.

vLLM calls an argument "non-default" when it differs from its parser's default (``log_non_default_args``), so
``--seed 0`` on 0.12, ``--dtype auto`` or ``--port 8000`` is the server vLLM would start with no argument at all.
The defaults come from hoststate/data/vllm_defaults.json, derived by scripts/vllm_defaults.py from what each
version's own parser recorded (fixtures/vllm/oracle/options). A version without a recording has no known
defaults: its arguments are kept as spelled, and ``DefaultsFor.source`` says so.

Beyond the parser, a few arguments resolve against the model or the engine (``resolve``): a ``--dtype`` that names
the checkpoint's own dtype, a ``--max-model-len`` at the length derived from config.json (``model.derived_max_len``, the
same derivation the refusal of a longer one uses), ``--served-model-name`` equal to the model,
``--trust-remote-code`` for a model whose config.json names no remote code, ``--seed 0`` where the V1 engine seeds 0
when none is given (0.10-0.11).
And a value vLLM rewrites before it uses it (``--dtype half`` is ``float16``, ``--load-format AUTO`` is ``auto``,
capture sizes in any order are sorted: NORMAL_FORMS) is written as vLLM rewrites it, so two spellings of one server
compare equal, and a rewrite that lands on the parser default leaves the argument out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from hoststate.collectors.vllm.model import ModelFacts, derived_max_len, generative
from hoststate.collectors.vllm.sizes import batch, capture_sizes
from hoststate.collectors.vllm.speculative import SPEC_FLAGS, as_built, fold_flags
from hoststate.collectors.vllm.versions import Rules, version_key
from hoststate.collectors.vllm_release import load_data, recorded_for

DATA = "vllm_defaults.json"
CHOICES_DATA = "vllm_choices.json"


def _table() -> dict[str, dict[str, Any]]:
    return load_data(DATA)["versions"]


def none_is_unset(version: str | None) -> frozenset[str]:
    """The dests of exactly ``version`` whose value ``None`` or ``""`` vLLM's optional_type parses as None, their
    parser default (vllm/engine/arg_utils.py; scripts/vllm_defaults.py ``none_is_unset``); empty for a version
    not recorded."""
    found = recorded_for(load_data(DATA).get("none_is_unset", {}), version)
    return frozenset(found[1]) if found else frozenset()


def choices_for(version: str | None) -> dict[str, list[Any]]:
    """The argparse ``choices`` of exactly ``version``'s options by dest (hoststate/data/vllm_choices.json, derived
    by scripts/vllm_choices.py from vLLM's source): None in a list is the None object 0.33 appends for an optional
    Literal (so "None" and "" are accepted there), "None" the string earlier versions append (which the None that
    optional_type returns never equals). Empty for a version not recorded."""
    found = recorded_for(load_data(CHOICES_DATA)["versions"], version)
    return found[1] if found else {}


@dataclass(frozen=True)
class DefaultsFor:
    """One version's parser defaults (None: not recorded) and where they come from, in words."""

    defaults: Mapping[str, Any] | None
    source: str


def defaults_for(version: str | None) -> DefaultsFor:
    """The parser defaults of exactly ``version`` (major.minor.patch); another version's are never borrowed."""
    found = recorded_for(_table(), version)
    if found is not None:
        return DefaultsFor(found[1], f"vLLM {found[0]}'s parser defaults (hoststate/data/{DATA}, recorded from "
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


def _lower(value: Any) -> Any:
    return value.lower() if isinstance(value, str) else value


def _sorted(value: Any) -> Any:
    ints = isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    return sorted(value) if ints else value


def _dtype_name(value: Any) -> Any:
    return DTYPE_NAMES.get(value, value) if isinstance(value, str) else value


#: The n-gram lookup window SpeculativeConfig.__post_init__ takes when neither end is given (vllm/config/speculative.py
#: of 0.11.0-0.33.0, vllm/config/__init__.py of 0.10.2: "Set default values if not provided").
NGRAM_LOOKUP_UNSET = 5
_LOOKUP = ("prompt_lookup_min", "prompt_lookup_max")
#: The methods that read the window (the ngram ones) or keep it (suffix validates its own settings).
_WINDOW_METHODS = ("ngram", "[ngram]", "ngram_gpu", "suffix")


#: The draft "model" names SpeculativeConfig.__post_init__ reads as the ngram method (vllm/config/speculative.py of
#: 0.11.0-0.33.0, vllm/config/__init__.py of 0.10.2).
NGRAM_MODELS = ("ngram", "[ngram]")


def _ngram_named(value: Any) -> Any:
    """A speculative config that names the ngram method by its draft ``model``, as the method: __post_init__ sets
    ``method`` "ngram" where none is given and ``model`` is ngram / [ngram], and ``model`` "ngram" where none is given
    and the method is ngram ("Automatically configure the method for ngram when model is used instead of method",
    0.10.2-0.33.0); the ngram proposer reads neither name again (draft_model_config is the target's). So
    ``{"model": "ngram"}`` and ``{"method": "ngram"}`` are one setting, written as the method alone. ``method``
    "[ngram]" is not rewritten: pydantic refuses it (not in SpeculativeMethod)."""
    if not isinstance(value, Mapping) or value.get("model") not in NGRAM_MODELS:
        return value
    if value.get("method") not in (None, "ngram"):
        return value
    out = {k: v for k, v in value.items() if k not in ("model", "method")}
    return {"method": "ngram", **out}


def _speculative_normal(value: Any) -> Any:
    return _ngram_lookup(_ngram_named(value))


def _ngram_lookup(value: Any) -> Any:
    """A speculative config with its n-gram lookup window as SpeculativeConfig.__post_init__ fills it in: for the ngram
    method (``method`` ngram / [ngram] / 0.33's ngram_gpu, or no method and ``model`` ngram / [ngram]), a missing end
    takes the other end's value, and neither given is 5 and 5; so the window is written out as both ends, and left out
    where it is 5 and 5. Any other method named (not suffix) has both ends set to 0 in __post_init__, so a window
    given to it is left out. A window vLLM refuses (an end below 1 or not an integer, min above max) is kept as
    given."""
    if not isinstance(value, Mapping):
        return value
    method, model = value.get("method"), value.get("model")
    low, high = value.get("prompt_lookup_min"), value.get("prompt_lookup_max")
    if (low is None and high is None) or not all(
            v is None or (isinstance(v, int) and not isinstance(v, bool) and v >= 1) for v in (low, high)):
        return value
    if isinstance(method, str) and method not in _WINDOW_METHODS:
        # every other method named: __post_init__'s last branch sets both ends to 0 (0.10.2-0.33.0)
        return {k: v for k, v in value.items() if k not in _LOOKUP}
    if not (method in _WINDOW_METHODS[:3] or (method is None and model in ("ngram", "[ngram]"))):
        return value
    low, high = (high if low is None else low), (low if high is None else high)
    if low > high:
        return value
    out = {k: v for k, v in value.items() if k not in _LOOKUP}
    if (low, high) != (NGRAM_LOOKUP_UNSET, NGRAM_LOOKUP_UNSET):
        out.update(prompt_lookup_min=low, prompt_lookup_max=high)
    return out


#: Values vLLM rewrites before it uses them, by dest (``compilation_config.KEY`` for a key of that table): the
#: rewrite and where vLLM makes it. Two spellings with one rewrite are one setting. ``--kv-cache-dtype fp8`` is not
#: here: vLLM's help says fp8 is fp8_e4m3 on CUDA, but an attention backend may take one and not the other (a
#: sparse MLA backend takes fp8 for fp8_ds_mla), so the backend can differ. Neither is ``--tokenizer-mode``, which
#: 0.12 lower-cases and 0.11's parser refuses in capitals.
NORMAL_FORMS: dict[str, tuple[Callable[[Any], Any], str]] = {
    "dtype": (_dtype_name, "the same torch dtype (vLLM's _STR_DTYPE_TO_TORCH_DTYPE, vllm/config/model.py)"),
    "load_format": (_lower, "LoadConfig lower-cases it (vllm/config/load.py)"),
    "cuda_graph_sizes": (_sorted, "vLLM sorts the sizes it captures (vllm/config: batch_size_capture_list, "
                                  "cudagraph_capture_sizes)"),
    "cudagraph_capture_sizes": (_sorted, "vLLM sorts the sizes it captures (vllm/config/vllm.py)"),
    "compilation_config.cudagraph_capture_sizes": (_sorted, "vLLM sorts the sizes it captures (vllm/config)"),
    "speculative_config": (_speculative_normal, "the ngram method as SpeculativeConfig.__post_init__ names it (a draft "
                                                "model ngram / [ngram] is the method ngram) and its lookup window as "
                                                "it fills it in (a missing end is the other end, neither given is 5 "
                                                "and 5; another method's window is set to 0, left out)"),
}


#: Rewrites one version makes and another refuses: ModelConfig lower-cases ``--tokenizer-mode`` from 0.12, where
#: the option takes any string; before, its parser refuses capitals (versions.Rules.tokenizer_modes).
LOWERED_WHERE_FREE = {"tokenizer_mode": (_lower, "ModelConfig lower-cases it (vllm/config/model.py, 0.12+)")}


def canonical(args: Mapping[str, Any], more: Mapping[str, tuple[Callable[[Any], Any], str]] | None = None,
              ) -> tuple[dict[str, Any], dict[str, str]]:
    """``args`` with each value in NORMAL_FORMS (and ``more``: the version's own) written as vLLM rewrites it, and
    why, by dest."""
    out, spelled = dict(args), {}
    for where, (rewrite, source) in {**NORMAL_FORMS, **(more or {})}.items():
        dest, _, key = where.partition(".")
        table = out.get(dest) if key else out
        if not isinstance(table, Mapping) or (key or dest) not in table:
            continue
        value = table[key or dest]
        normal = rewrite(value)
        if normal == value and type(normal) is type(value):
            continue
        if key:
            table = out[dest] = {**table, key: normal}
        else:
            out[dest] = normal
        spelled[where] = f"{value} is {normal}: {source}"
    return out, spelled


@dataclass
class Resolved:
    """The arguments as the engine resolves them, why each argument left out was left out, and which values were
    written as vLLM rewrites them (``spelled``)."""

    args: dict[str, Any]
    same_as_unset: dict[str, str] = field(default_factory=dict)
    spelled: dict[str, str] = field(default_factory=dict)


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


#: Options that only fill LoRAConfig, which vLLM builds only with ``--enable-lora`` (EngineArgs.create_engine_config,
#: vllm/engine/arg_utils.py of 0.11.0 and 0.12.0: ``LoRAConfig(...) if self.enable_lora else None``).
LORA_ONLY = ("max_lora_rank", "max_loras", "fully_sharded_loras", "lora_dtype", "max_cpu_loras", "enable_lora_bias",
             "lora_extra_vocab_size")


def _lora_count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _max_cpu_loras(args: Mapping[str, Any], defaults: Mapping[str, Any] | None) -> str | None:
    """``--max-cpu-loras`` with ``--enable-lora`` where LoRAConfig ends with what it takes unset: EngineArgs passes None
    for a value not above 0 (``max_cpu_loras if self.max_cpu_loras and self.max_cpu_loras > 0 else None``), and
    LoRAConfig.__post_init__ makes None ``max_loras`` (vllm/engine/arg_utils.py create_engine_config and
    vllm/config/lora.py, 0.10.2-0.33.0). An unset max_loras is the version's recorded parser default; a version whose
    defaults are not recorded (``defaults`` None) compares the value as given."""
    given = _lora_count(args.get("max_cpu_loras"))
    loras = _lora_count(args["max_loras"] if "max_loras" in args else (defaults or {}).get("max_loras"))
    if args.get("enable_lora") is not True or given is None or defaults is None:
        return None
    if given <= 0:
        return (f"{given}: EngineArgs passes no max_cpu_loras for a value not above 0, and LoRAConfig then takes "
                "max_loras, as when none is given (create_engine_config, LoRAConfig.__post_init__)")
    if loras is not None and given == loras:
        return (f"{given}: max_loras, what LoRAConfig.__post_init__ takes for max_cpu_loras when none is given "
                "(vllm/config/lora.py)")
    return None


def _size(args: Mapping[str, Any], dest: str) -> int | None:
    """An integer parallel size as given (1 when not given); None for a value that is not one."""
    value = args.get(dest, 1)
    try:
        return int(value) if not isinstance(value, bool) else None
    except (TypeError, ValueError):
        return None


def _engine_unused(args: Mapping[str, Any], rules: Rules) -> dict[str, str]:
    """What the engine never acts on for this command line, by dest, and why (vLLM 0.11.0 and 0.12.0 code)."""
    why = dict(rules.unused_options)
    if args.get("enable_lora") is False:
        why["enable_lora"] = "LoRA is built only when enable_lora is true (EngineArgs.create_engine_config)"
    if not args.get("enable_lora"):
        for dest in LORA_ONLY:
            why[dest] = "without --enable-lora vLLM builds no LoRAConfig (EngineArgs.create_engine_config)"
    tp, pp, pcp = (_size(args, d) for d in ("tensor_parallel_size", "pipeline_parallel_size",
                                            "prefill_context_parallel_size"))
    if tp == 1:
        why["disable_custom_all_reduce"] = ("one GPU per tensor-parallel group: the custom all-reduce is created only "
                                            "for a group of more than one (CudaCommunicator)")
    if (tp, pp, pcp, _size(args, "data_parallel_size")) == (1, 1, 1, 1) \
            and args.get("distributed_executor_backend") == "uni" and not args.get("async_scheduling"):
        why["distributed_executor_backend"] = ("uni: what ParallelConfig takes for a world size of 1 when no backend "
                                               "is given (vllm/config/parallel.py; 0.33 counts data parallel in)")
    if args.get("enforce_eager") is True:
        for dest in ("cuda_graph_sizes", "cudagraph_capture_sizes", "max_cudagraph_capture_size"):
            why[dest] = ("no CUDA graphs under --enforce-eager: vLLM builds an empty capture list "
                         "(VllmConfig, vllm/config of 0.10.2 to 0.12.0)")
    if not rules.v0_env and args.get("worker_cls") == "vllm.v1.worker.gpu_worker.Worker":
        why["worker_cls"] = "what auto resolves to on CUDA with the V1 engine (CudaPlatform.check_and_update_config)"
    return why


#: RoPE types for which vLLM, given no length, takes ``original_max_position_embeddings`` rather than the derived
#: length (``_get_and_verify_max_len``, 0.12 and 0.33: "to avoid performance degradation for shorter sequences").
SHORT_UNSET_ROPE = ("longrope", "su")


def _max_len(args: Mapping[str, Any], model: ModelFacts, rules: Rules) -> str | None:
    """Why ``--max-model-len`` is the length vLLM takes without it (the derived one), or None: a model whose
    config.json was not read, another length, none derived, or a model whose unset length is not the derived one
    (a LongRoPE model's, a pooling model's capped by files beside config.json, a RoPE table read no scaling from)."""
    given = args.get("max_model_len")
    limits = model.limits
    if not model.known or model.pooling is not False or not isinstance(given, int) or isinstance(given, bool) \
            or limits.rope_type in SHORT_UNSET_ROPE or limits.rope_unread \
            or args.get("runner", "generate") != "generate" or args.get("convert", "none") != "none":
        return None
    derived = derived_max_len(model, args, rules)
    if derived is None or given != int(derived):
        return None
    return (f"the length vLLM derives from the model's config.json ({given}; {model.source}): what it takes when "
            "none is given (_get_and_verify_max_len)")


def _engine_defaults(args: Mapping[str, Any], model: ModelFacts, rules: Rules, v1_engine: bool) -> bool:
    """Whether vLLM sets its generative defaults (chunked prefill, prefix caching) for this command line: a
    generative decoder model, and on 0.10.2 only where the V1 engine surely runs (``rules.defaults_v1_only``,
    ``v1_engine``: cudagraph.v1_engine_sure)."""
    return generative(args, model) and (v1_engine or not rules.defaults_v1_only)


def _chunked_prefill(args: Mapping[str, Any], model: ModelFacts, rules: Rules, v1_engine: bool) -> str | None:
    given = args.get("enable_chunked_prefill")
    if not isinstance(given, bool) or not _engine_defaults(args, model, rules, v1_engine):
        return None
    if rules.chunked_prefill_forced:
        v1 = " on the V1 engine" if rules.defaults_v1_only else ""
        return (f"vLLM {rules.version} turns chunked prefill on for a generative model{v1} whatever is given "
                f"(EngineArgs.{rules.engine_defaults_at}; {model.source})")
    if given and rules.chunked_prefill_default_on:
        return (f"on: what vLLM takes for a generative decoder model when the flag is not given "
                f"(EngineArgs.{rules.engine_defaults_at}; {model.source})")
    return None


def _prefix_caching(args: Mapping[str, Any], model: ModelFacts, rules: Rules, v1_engine: bool) -> str | None:
    """``--enable-prefix-caching`` where vLLM turns it on unset: a generative model that is neither hybrid nor
    attention-free (``--no-enable-prefix-caching`` turns it off there, so it stays a setting)."""
    if args.get("enable_prefix_caching") is not True or not rules.prefix_caching_default_on \
            or model.hybrid is not False or not _engine_defaults(args, model, rules, v1_engine):
        return None
    return ("on: what vLLM takes for a generative model that is neither hybrid nor attention-free when the flag is "
            f"not given (EngineArgs.{rules.engine_defaults_at}; {model.source})")


def _block_size(args: Mapping[str, Any], model: ModelFacts, rules: Rules) -> str | None:
    """``--block-size`` at what CudaPlatform.check_and_update_config takes unset, for a model known to use neither
    MLA (whose backends force their own size) nor hybrid layers (HybridAttentionMambaModelConfig sizes those)."""
    given = args.get("block_size")
    if rules.block_size_unset is None or given != rules.block_size_unset or isinstance(given, bool) \
            or not model.known or model.mla is not False or model.hybrid is not False:
        return None
    return (f"{given}: the KV cache block size vLLM {rules.version} takes when none is given, for a model without MLA "
            f"or hybrid layers (CudaPlatform.check_and_update_config, vllm/platforms/cuda.py; {model.source})")


def _local_world(args: Mapping[str, Any], gpus: int | None) -> int | None:
    """The world size (TP x PP x PCP) where it is above 1 and fits this host's ``gpus`` and data parallel does not
    use Ray: then, with no backend given, ParallelConfig takes the multiprocessing executor (more GPUs than the
    host has is Ray in 0.10.2, an error later; vllm/config/parallel.py __post_init__). None otherwise."""
    sizes = [_size(args, d) for d in ("tensor_parallel_size", "pipeline_parallel_size",
                                      "prefill_context_parallel_size")]
    if None in sizes or gpus is None or args.get("data_parallel_backend") == "ray":
        return None
    world = sizes[0] * sizes[1] * sizes[2]  # type: ignore[operator]
    return world if 1 < world <= gpus else None


def _executor(args: Mapping[str, Any], rules: Rules, gpus: int | None) -> str | None:
    """``--distributed-executor-backend mp`` where ParallelConfig picks mp itself (_local_world; a ``vllm serve``
    process is in no Ray placement group)."""
    if not rules.executor_mp_unset or args.get("distributed_executor_backend") != "mp":
        return None
    world = _local_world(args, gpus)
    if world is None:
        return None
    return (f"mp: what ParallelConfig takes for a world size of {world} on a CUDA host of {gpus} GPUs when no "
            "backend is given and data parallel does not use Ray (vllm/config/parallel.py __post_init__)")


def omp_threads_as_unset(args: Mapping[str, Any], env: Mapping[str, str], rules: Rules,
                         gpus: int | None) -> str | None:
    """Why the server's ``OMP_NUM_THREADS=1`` runs as without it, or None: the multiprocessing executor sets 1
    itself where the variable is unset (Rules.omp_one_under_mp), and it is the executor that runs where no other
    backend is given, the world size (TP x PP x PCP) is above 1 and fits this host's ``gpus`` (more would be Ray,
    across nodes), and data parallel does not use Ray."""
    if not rules.omp_one_under_mp or env.get("OMP_NUM_THREADS") != "1" \
            or args.get("distributed_executor_backend", "mp") != "mp":
        return None
    world = _local_world(args, gpus)
    if world is None:
        return None
    return (f"1 is what vLLM {rules.version}'s multiprocessing executor, which runs a world size of {world} on one "
            "host, sets itself where OMP_NUM_THREADS is unset, before it starts the workers "
            "(set_multiprocessing_worker_envs)")


#: The levels OptimizationLevel takes (any other is refused before anything is resolved: cudagraph._optimization_level).
OPT_LEVELS = ("0", "1", "2", "3")


def _opt_level(args: Mapping[str, Any], rules: Rules) -> str | None:
    level = args.get("optimization_level")
    if rules.eager_overrides_opt_level and args.get("enforce_eager") is True and not isinstance(level, bool) \
            and str(level).strip() in OPT_LEVELS:
        return (f"-O{str(level).strip()} under --enforce-eager: vLLM {rules.version} overrides any optimization level "
                "to -O0 when eager execution is enforced, before the level's defaults are applied "
                "(VllmConfig.__post_init__, vllm/config/vllm.py), as without -O")
    if rules.o3_same_as_o2 and str(level) == "3":  # -O3 is read as the text "3"
        return ("-O3 builds the configuration of -O2, the default (vllm/config/vllm.py: OPTIMIZATION_LEVEL_03 is "
                "OPTIMIZATION_LEVEL_02)")
    return None


#: Executors whose ``supports_async_scheduling`` is true (vllm/v1/executor of 0.33.0: UniProcExecutor, its
#: ExecutorWithExternalLauncher, MultiprocExecutor; the Ray executor keeps the base class's False).
ASYNC_EXECUTORS = ("uni", "mp", "external_launcher")


def _async_scheduling(args: Mapping[str, Any], model: ModelFacts, rules: Rules) -> str | None:
    """``--async-scheduling`` where vLLM turns it on unset (rules.async_scheduling_unset_on): a generative decoder
    model known from its config.json, an executor that supports it (given as one, or picked by ParallelConfig without
    Ray: a ``vllm serve`` process is in no Ray placement group), no speculative decoding and no pipeline parallelism
    (Model Runner V1's incompatibilities; the ROCm-only DeepEP DBO case does not arise on CUDA)."""
    if args.get("async_scheduling") is not True or not rules.async_scheduling_unset_on or not generative(args, model):
        return None
    backend = args.get("distributed_executor_backend")
    if (backend is not None and backend not in ASYNC_EXECUTORS) or (backend is None
                                                                    and args.get("data_parallel_backend") == "ray"):
        return None
    if any(args.get(d) is not None for d in ("speculative_config", "spec_method", "spec_model", "spec_tokens")) \
            or _size(args, "pipeline_parallel_size") != 1:
        return None
    return (f"on: what vLLM {rules.version} takes when the flag is not given, for a generative model on an executor "
            f"that supports it, without speculative decoding or pipeline parallelism (VllmConfig.__post_init__, "
            f"vllm/config/vllm.py; {model.source})")


#: Quantization methods a checkpoint names that vLLM runs as named when none is given (no override to another
#: method, as AWQ and GPTQ checkpoints get Marlin): ModelConfig._verify_quantization, 0.11.0 and 0.12.0.
OWN_QUANTIZATION = ("fp8",)


def _quantization(args: Mapping[str, Any], model: ModelFacts) -> str | None:
    given, own = args.get("quantization"), model.limits.quant_method
    if given in OWN_QUANTIZATION and isinstance(own, str) and own.lower() == given:
        return (f"the checkpoint's own quantization ({given}; {model.source}): what ModelConfig takes when none is "
                "given (_verify_quantization)")
    return None


def _speculative_built(args: Mapping[str, Any], rules: Rules) -> tuple[Mapping[str, Any], str | None]:
    """``args`` with ``--speculative-config`` as EngineArgs.create_speculative_config builds SpeculativeConfig from
    it: 0.33's ``--spec-*`` flags folded in (speculative.fold_flags; left as given where vLLM refuses them), then
    speculative.as_built; and why where that changed it."""
    spec, refusal = fold_flags(args)
    if refusal or not isinstance(spec, Mapping):
        return args, None
    flags = [dest for dest, _key in SPEC_FLAGS if dest in args]
    built, unknown = as_built(spec, rules)
    if built == args.get("speculative_config") and not flags:
        return args, None
    why = (f"as vLLM {rules.version} builds SpeculativeConfig from it"
           + (f", {', '.join('--' + f.replace('_', '-') for f in flags)} folded in" if flags else "")
           + ("; key dashes as underscores" if rules.spec_keys_dashed else "")
           + (f"; {', '.join(unknown)} no field of it, ignored" if unknown and len(built) < len(spec) else "")
           + " (EngineArgs.create_speculative_config)")
    out = {k: v for k, v in args.items() if k not in flags}
    out["speculative_config"] = built
    return out, why


def resolve(args: Mapping[str, Any], facts: ModelFacts, env: Mapping[str, str], rules: Rules,
            defaults: Mapping[str, Any] | None = None, gpus: Sequence[tuple[Any, Any]] | None = None,
            v1_engine: bool = False) -> Resolved:
    """``args`` written as vLLM rewrites them (``canonical``), less what resolves to the same engine setting as
    leaving it out: a rewrite that lands on the version's parser default (``defaults``, None where not recorded),
    what the engine never acts on (the version's unused options; with no V0 engine to fall back to, the V1 worker),
    and the model's and engine's own choices (the checkpoint's dtype and derived length, the seed the version's
    engine takes when none is given, the batch sizes the server takes on ``gpus``: the host's GPUs as (name, memory
    total bytes), capture sizes at what vLLM captures without them: capture_sizes). A version that takes any
    tokenizer mode lower-cases it. ``v1_engine``: the V1 engine surely runs (cudagraph.v1_engine_sure), read only
    where the version sets its defaults on V1 alone (0.10.2)."""
    args, built = _speculative_built(args, rules)
    normal, spelled = canonical(args, None if rules.tokenizer_modes else LOWERED_WHERE_FREE)
    if built and "speculative_config" not in spelled:
        spelled["speculative_config"] = built
    same, expanded = capture_sizes(normal, facts, rules, gpus)
    spelled.update(expanded)
    for where, why in spelled.items():
        dest = where.partition(".")[0]
        if defaults is not None and dest != "model" and dest in normal and at_default(dest, normal[dest], defaults):
            same[dest] = f"its parser default, as vLLM rewrites it ({why})"
    reasons = {"dtype": _dtype(normal, facts), "served_model_name": _served_name(normal),
               "trust_remote_code": _remote_code(normal, facts), "seed": _seed(normal, env, rules.seed_unset),
               "tokenizer": _tokenizer(normal), "revision": _revision(normal),
               "max_model_len": _max_len(normal, facts, rules),
               "enable_chunked_prefill": _chunked_prefill(normal, facts, rules, v1_engine),
               "enable_prefix_caching": _prefix_caching(normal, facts, rules, v1_engine),
               "optimization_level": _opt_level(normal, rules), "quantization": _quantization(normal, facts),
               "async_scheduling": _async_scheduling(normal, facts, rules),
               "max_cpu_loras": _max_cpu_loras(normal, defaults),
               "block_size": _block_size(normal, facts, rules),
               "distributed_executor_backend": _executor(normal, rules, len(gpus) if gpus is not None else None),
               **_engine_unused(normal, rules), **batch(normal, facts, rules, gpus)}
    same.update({dest: why for dest, why in reasons.items() if why is not None and dest in normal and dest not in same})
    kept = {k: v for k, v in normal.items() if k not in same}
    return Resolved(kept, same, {w: why for w, why in spelled.items() if w.partition(".")[0] in kept})
