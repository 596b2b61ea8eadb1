"""What vLLM sizes by the GPU it runs on and by max_num_seqs: the batch sizes the OpenAI server takes where none is
given, and the CUDA graph capture sizes it takes where none is given. defaults.resolve leaves out an argument that
lands on either (with why), so that a size spelled at what vLLM takes anyway is the server without it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from hoststate.collectors.vllm.model import ModelFacts, derived_max_len, generative
from hoststate.collectors.vllm.versions import Rules

#: The OpenAI server's (max_num_seqs, max_num_batched_tokens) where neither is given, by whether vLLM's device 0
#: holds 70 GiB or more (NVML's memory total) and its lower-cased name has no "a100" (vllm/engine/arg_utils.py:
#: get_batch_defaults, 0.11.1-0.12.0).
BATCH_SIZES = {True: (1024, 8192), False: (256, 2048)}
LARGE_GPU_BYTES = 70 * 2**30
#: 0.33.0's get_batch_defaults adds a tier: a device of 160 GiB or more (B200, B300) takes (1024, 16384), and a GB10
#: (DGX Spark, capability 12.1) stays on the small one whatever its memory (rules.batch_defaults "tiered").
HUGE_GPU_BYTES = 160 * 2**30
HUGE = "160 GiB or more"
TIERED_BATCH_SIZES = {HUGE: (1024, 16384), **BATCH_SIZES}
BATCH_DESTS = ("max_num_seqs", "max_num_batched_tokens")


def large_gpu(gpus: Sequence[tuple[Any, Any]] | None, tiered: bool = False) -> bool | str | None:
    """Whether vLLM's device 0 counts as a large GPU (``tiered``: or HUGE, 0.33.0), from the host's GPUs as (name,
    memory total bytes); None unless every GPU answers alike (which is device 0 is CUDA_VISIBLE_DEVICES's choice) and
    each is readable, and for a GB10 under ``tiered`` (vLLM reads its compute capability, not recorded here)."""
    answers: set[bool | str] = set()
    for name, total in gpus or ():
        if not isinstance(name, str) or not isinstance(total, int) or isinstance(total, bool) or total <= 0:
            return None
        if tiered and "gb10" in name.lower():
            return None
        if tiered and total >= HUGE_GPU_BYTES:
            answers.add(HUGE)
        else:
            answers.add(total >= LARGE_GPU_BYTES and "a100" not in name.lower())
    return answers.pop() if len(answers) == 1 else None


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def _model_len(args: Mapping[str, Any], model: ModelFacts, rules: Rules) -> int | None:
    """The model length the batch sizes are clamped by: as given, or derived from config.json where no RoPE scaling
    can make vLLM take another length when none is given; None otherwise."""
    given = args.get("max_model_len")
    if given is not None:
        return given if _count(given) else None
    derived = derived_max_len(model, args, rules) if model.limits.rope_type is None else None
    return int(derived) if derived and derived > 0 else None


#: Architectures 0.33.0 may read as multimodal prefix LMs, whose unset token budget it raises to hold one multimodal
#: item (_set_default_max_num_seqs_and_batched_tokens_args; MM_PREFIX_LM_MODELS of
#: transformers_utils/model_arch_config_convertor.py), and the multimodal architecture suffix: not sized here.
MM_PREFIX_NAMES = ("bagel", "gemma3", "molmo", "moondream", "paligemma")


def _tiered_unknown(args: Mapping[str, Any], model: ModelFacts) -> bool:
    """What 0.33.0's sizing reads that is not read here: batched data-parallel MoE (expert parallel over DP ranks
    with a deepep_low_latency / nixl_ep all2all: a fixed token budget), a performance mode not among its three, a
    multimodal (prefix-LM) architecture."""
    if args.get("enable_expert_parallel") and args.get("data_parallel_size", 1) != 1:
        return True
    if args.get("performance_mode", "balanced") not in ("balanced", "interactivity", "throughput"):
        return True
    names = [a.lower() for a in model.architectures]
    return not names or any(a.endswith("forconditionalgeneration") or any(m in a for m in MM_PREFIX_NAMES)
                            for a in names)


def batch_sizes(args: Mapping[str, Any], model: ModelFacts, rules: Rules,
                large: bool | str | None) -> tuple[int, int] | None:
    """(max_num_seqs, max_num_batched_tokens) the OpenAI server takes for ``args`` on a GPU that is ``large`` or not
    (or HUGE: large_gpu) (vllm/engine/arg_utils.py of the version, rules.batch_defaults: "clamped" 0.11.1-0.12.0,
    "tiered" 0.33.0, which also doubles an unset size under ``--performance-mode throughput``); None where that is
    not known here: another version, a model not known to be a generative decoder, prefill context parallel, a
    length or size that is not a count, what _tiered_unknown lists."""
    if rules.batch_defaults is None or large is None or not generative(args, model):
        return None
    tiered = rules.batch_defaults == "tiered"
    if (large == HUGE and not tiered) or (tiered and _tiered_unknown(args, model)):
        return None
    seqs, tokens = args.get("max_num_seqs"), args.get("max_num_batched_tokens")
    pcp = args.get("prefill_context_parallel_size", 1)
    if any(v is not None and not _count(v) for v in (seqs, tokens)) or pcp not in (1, None):
        return None
    seqs_default, tokens_default = TIERED_BATCH_SIZES[large]
    if tiered and args.get("performance_mode") == "throughput":
        seqs_default, tokens_default = seqs_default * 2, tokens_default * 2
    max_len = _model_len(args, model, rules)
    chunked = args.get("enable_chunked_prefill")
    if max_len is None or not isinstance(chunked, bool | None):
        return None
    seqs_out = seqs if seqs is not None else seqs_default
    tokens_out = tokens if tokens is not None else tokens_default
    if tokens is None:
        if chunked is False:
            tokens_out = max(max_len, tokens_out)
        tokens_out = min(seqs_out * max_len, tokens_out)
    if seqs is None:
        seqs_out = min(seqs_out, tokens_out)
    return seqs_out, tokens_out


def batch(args: Mapping[str, Any], model: ModelFacts, rules: Rules,
           gpus: Sequence[tuple[Any, Any]] | None) -> dict[str, str]:
    """``--max-num-seqs`` / ``--max-num-batched-tokens`` at what the server takes without them (both sizes the same
    either way, and with all such left out together), each with why."""
    given = [dest for dest in BATCH_DESTS if dest in args]
    large = large_gpu(gpus, rules.batch_defaults == "tiered") if given else None
    sizes = batch_sizes(args, model, rules, large)
    if sizes is None:
        return {}
    same = [d for d in given if batch_sizes({k: v for k, v in args.items() if k != d}, model, rules, large) == sizes]
    if not same or batch_sizes({k: v for k, v in args.items() if k not in same}, model, rules, large) != sizes:
        return {}
    names = sorted({str(name) for name, _total in gpus or ()})
    kind = HUGE if large == HUGE else "70 GiB or more and not an A100" if large else "under 70 GiB or an A100"
    return {dest: (f"{args[dest]}: what the OpenAI server of vLLM {rules.version} takes when it is not given, with "
                   f"the rest of this command line, on this host's GPUs ({', '.join(names)}: {kind}; "
                   "vllm/engine/arg_utils.py get_batch_defaults)") for dest in same}


#: The largest batch vLLM captures a CUDA graph for where no size is given: min(max_num_seqs x 2, 512)
#: (vllm/config/scheduler.py of 0.10.2-0.11.0, VllmConfig._set_cudagraph_sizes of 0.11.1-0.12.0).
CAPTURE_CEILING = 512
#: The options and compilation_config keys that set capture sizes (read with the host's GPUs: capture_sizes).
CAPTURE_DESTS = ("cuda_graph_sizes", "cudagraph_capture_sizes", "max_cudagraph_capture_size")


def capture_given(args: Mapping[str, Any]) -> bool:
    """Whether ``args`` set a capture size, as an option or a compilation_config key."""
    cc = args.get("compilation_config")
    return any(d in args or (isinstance(cc, Mapping) and d in cc) for d in CAPTURE_DESTS)


def _sizes(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, int) and not isinstance(v, bool)
                                                           for v in value)


def expanded_sizes(sizes: Sequence[int]) -> list[int]:
    """The batch sizes 0.10.2 and 0.11.0 capture for ``cuda_graph_sizes`` (VllmConfig._set_cudagraph_sizes: one value
    N is [1, 2, 4] + range(8, N + 1, 8), several are sorted)."""
    if len(sizes) == 1:
        return [1, 2, 4] + list(range(8, sizes[0] + 1, 8))
    return sorted(sizes)


def size_ladder(largest: int) -> list[int]:
    """The batch sizes 0.11.1 and 0.12.0 capture up to ``largest`` where no list is given
    (VllmConfig._set_cudagraph_sizes): 1, 2, 4, the multiples of 8 below 256, then the multiples of 16."""
    return ([n for n in (1, 2, 4) if n <= largest] + list(range(8, min(largest + 1, 256), 8))
            + list(range(256, largest + 1, 16)))


def _capture_seqs(args: Mapping[str, Any], model: ModelFacts, rules: Rules,
                  gpus: Sequence[tuple[Any, Any]] | None) -> tuple[int, str] | None:
    """max_num_seqs as the engine holds it when the capture sizes are set, and whence: as given (every version keeps
    a given value), else what the OpenAI server takes on these GPUs (batch_sizes); None where not known here."""
    seqs = args.get("max_num_seqs")
    if seqs is not None:
        return (seqs, "as given") if _count(seqs) else None
    sizes = batch_sizes(args, model, rules, large_gpu(gpus, rules.batch_defaults == "tiered"))
    if sizes is None:
        return None
    return sizes[0], "what the OpenAI server takes on this host's GPUs (vllm/engine/arg_utils.py get_batch_defaults)"


def _capture_model(args: Mapping[str, Any], model: ModelFacts, rules: Rules) -> bool:
    """The model is read and no architecture of it sizes its own captures (rules.capture_size_architectures;
    ``--hf-overrides`` could name another architecture)."""
    return (model.known and bool(model.architectures) and "hf_overrides" not in args
            and not set(model.architectures) & rules.capture_size_architectures)


def capture_sizes(normal: dict[str, Any], model: ModelFacts, rules: Rules,
                  gpus: Sequence[tuple[Any, Any]] | None) -> tuple[dict[str, str], dict[str, str]]:
    """Capture sizes that vLLM resolves to the sizes it captures without them, left out of ``normal`` (in place), and
    0.10.2/0.11.0's single ``cuda_graph_sizes`` value written as the list vLLM expands it to: (same_as_unset,
    spelled), each by dest or ``compilation_config.KEY``. Only on the versions whose default is read
    (rules.capture_sizes_unset), for a model read whose architecture keeps vLLM's default, and only where
    max_num_seqs is known (_capture_seqs) for a comparison with the default."""
    if rules.capture_sizes_unset is None or not _capture_model(normal, model, rules) \
            or normal.get("enforce_eager") is True:  # no graphs: _engine_unused says so
        return {}, {}
    if rules.capture_sizes_unset == "single":
        return _single_sizes(normal, model, rules, gpus)
    return _ladder_sizes(normal, model, rules, gpus)


def _single_sizes(normal: dict[str, Any], model: ModelFacts, rules: Rules,
                  gpus: Sequence[tuple[Any, Any]] | None) -> tuple[dict[str, str], dict[str, str]]:
    """0.10.2 and 0.11.0: ``--cuda-graph-sizes`` as the sizes _set_cudagraph_sizes captures. A compilation_config
    with its own cudagraph_capture_sizes overrides them (CompilationConfig.init_with_cudagraph_sizes): kept as given."""
    sizes, cc = normal.get("cuda_graph_sizes"), normal.get("compilation_config")
    if not _sizes(sizes) or (isinstance(cc, Mapping) and cc.get("cudagraph_capture_sizes") is not None):
        return {}, {}
    captured, seqs = expanded_sizes(sizes), _capture_seqs(normal, model, rules, gpus)
    if seqs is not None and captured == expanded_sizes([min(seqs[0] * 2, CAPTURE_CEILING)]):
        return {"cuda_graph_sizes": (
            f"{sizes}: the sizes vLLM {rules.version} captures when none are given, [min(max_num_seqs x 2, "
            f"{CAPTURE_CEILING})] for max_num_seqs {seqs[0]} ({seqs[1]}) expanded to [1, 2, 4, 8, 16, ..., "
            f"{captured[-1]}] (SchedulerConfig.__post_init__, VllmConfig._set_cudagraph_sizes; {model.source})")}, {}
    if captured == sizes:
        return {}, {}
    normal["cuda_graph_sizes"] = captured
    return {}, {"cuda_graph_sizes": f"{sizes} is {captured}: VllmConfig._set_cudagraph_sizes of vLLM {rules.version} "
                                    "captures one value N as [1, 2, 4] + range(8, N + 1, 8)"}


def _ladder_sizes(normal: dict[str, Any], model: ModelFacts, rules: Rules,
                  gpus: Sequence[tuple[Any, Any]] | None) -> tuple[dict[str, str], dict[str, str]]:
    """0.11.1 and 0.12.0: a maximum capture size, or a list of sizes, alone in compilation_config (where the options
    are moved: argv.compilation_held) that _set_cudagraph_sizes resolves to the sizes it captures with neither.
    Both given: the list decides and the maximum must match it (cudagraph._capture_sizes); kept as given."""
    cc = normal.get("compilation_config")
    if not isinstance(cc, Mapping):
        return {}, {}
    sizes, largest = cc.get("cudagraph_capture_sizes"), cc.get("max_cudagraph_capture_size")
    seqs = _capture_seqs(normal, model, rules, gpus) if (sizes is None) != (largest is None) else None
    if seqs is None:
        return {}, {}
    unset = min(seqs[0] * 2, CAPTURE_CEILING)
    if largest is not None:
        key = "max_cudagraph_capture_size"
        same = isinstance(largest, int) and not isinstance(largest, bool) and largest == unset
    else:
        key = "cudagraph_capture_sizes"
        same = _sizes(sizes) and sorted(set(sizes)) == size_ladder(unset)
    if not same:
        return {}, {}
    rest = {k: v for k, v in cc.items() if k != key}
    if rest:
        normal["compilation_config"] = rest
    else:
        del normal["compilation_config"]
    what = (f"{largest}: the largest size" if largest is not None
            else "the sizes given are the sizes (1, 2, 4, multiples of 8 below 256, then of 16)")
    return {f"compilation_config.{key}": (
        f"{what} vLLM {rules.version} captures when neither sizes nor a maximum is given, up to min(max_num_seqs x 2, "
        f"{CAPTURE_CEILING}) = {unset} for max_num_seqs {seqs[0]} ({seqs[1]}) (VllmConfig._set_cudagraph_sizes, "
        f"vllm/config/vllm.py; {model.source})")}, {}
