"""How the program that reads an environment variable reads its value, so that values it reads alike compare alike.

A snapshot records what a variable was set to; a diff compares those strings. Two spellings one program reads the
same (``NCCL_ALGO=ring`` and ``Ring``: NCCL compares names case-insensitively; ``PYTORCH_CUDA_ALLOC_CONF``
settings in another order) or a value that runs as without the variable (``CUDA_LAUNCH_BLOCKING=0``, CUDA's default;
``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False``, the allocator's) would be rated as a change. For a variable
of READERS, settle() keeps, where the snapshot is written (``[env]`` and a server's ``[vllm.env]`` alike):

- the value as its reader spells it (``NCCL_ALGO = "Ring"``), and, where that is not what was given, the value as
  given and why under ``spelled.NAME`` (``value``, ``because``);
- nothing, for a value that runs as without the variable: it moves to ``same_as_unset.NAME`` (``value``,
  ``because``), as vLLM's own variables do (hoststate/collectors/vllm_release.py). Mostly the reader's default; where
  what a value does depends on another variable, a function says (NCCL logs a line per collective only at INFO or
  above with a subsystem such as COLL selected: NCCL_DEBUG and NCCL_DEBUG_SUBSYS each run as unset without the other).

Nothing is lost: the value as given stays in the snapshot. hoststate/variables.toml rates both tables info, and the
variable itself, where it still stands, by what it does. ``diff`` stays a plain comparison.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from types import MappingProxyType
from typing import Any, NamedTuple

from hoststate.redact import REDACTED, Own

SPELLED, SAME_AS_UNSET = "spelled", "same_as_unset"
_NONE: Mapping[str, Any] = MappingProxyType({})


class Reader(NamedTuple):
    """What the program that reads one variable makes of its value; ``how`` says so, with where it is written."""

    how: str
    #: Names compared case-insensitively, each written as here; a list value is split at the characters of ``split``.
    names: tuple[str, ...] = ()
    split: str = ""
    #: A switch: value as written -> the lower-cased spellings read as it; any other spelling reads as ``other``.
    forms: Mapping[str, frozenset[str]] = _NONE
    other: str | None = None
    #: Values (as written) that run as without the variable -> why.
    unset: Mapping[str, str] = _NONE
    #: Of those, a value that acts after all where another variable is set too -> that variable.
    unless: Mapping[str, str] = _NONE
    #: Where what a value does depends on other variables: (value, environment) -> why it runs as unset, or None.
    inert: Callable[[str, Mapping[str, str]], str | None] | None = None
    #: A value written in a grammar of its own: value as given -> as read (settings in one order, defaults left out).
    parse: Callable[[str], str] | None = None

    def read(self, value: str) -> str:
        """``value`` as this reader spells it."""
        if self.parse:
            return self.parse(value)
        if self.names:
            known = {n.lower(): n for n in self.names}
            parts = re.split(f"([{re.escape(self.split)}])", value) if self.split else [value]
            return "".join(known.get(p.lower(), p) for p in parts)
        low = value.lower()
        for written, spellings in self.forms.items():
            if low in spellings:
                return written
        return self.other if self.other is not None else value

    def runs_as_unset(self, value: str, env: Mapping[str, str]) -> str | None:
        """Why ``value`` (as read) runs as without the variable in ``env``, or None."""
        if value in self.unset and self.unless.get(value) not in env:
            return self.unset[value]
        return self.inert(value, env) if self.inert else None


#: NCCL subsystems that log a line per call at INFO: COLL every collective (src/enqueue.cc), TUNING every kernel
#: plan on rank 0 (src/enqueue.cc), CALL every API call at TRACE (src/include/debug.h TRACE_CALL).
_PER_CALL = frozenset({"COLL", "TUNING", "CALL"})
_NCCL_SUBSYS = ("INIT", "COLL", "P2P", "SHM", "NET", "GRAPH", "TUNING", "ENV", "ALLOC", "CALL", "PROXY", "NVLS",
                "BOOTSTRAP", "REG", "PROFILE", "RAS", "DESTROY", "ALLOC_HOST", "ALL")


def _per_call(subsys: str | None) -> bool:
    """Whether NCCL_DEBUG_SUBSYS selects a subsystem that logs per call (the default INIT, BOOTSTRAP, ENV does not);
    a ``^`` list selects all but those listed."""
    if subsys is None:
        return False
    words = {w.strip().upper() for w in subsys.lstrip("^").split(",")}
    if subsys.startswith("^"):
        return "ALL" not in words and not words >= _PER_CALL
    return "ALL" in words or bool(words & _PER_CALL)


def _nccl_level_inert(level: str, env: Mapping[str, str]) -> str | None:
    """INFO and ABORT log at set-up only unless NCCL_DEBUG_SUBSYS selects a subsystem that logs per call."""
    subsys = env.get("NCCL_DEBUG_SUBSYS")
    if level in ("INFO", "ABORT") and not _per_call(subsys):
        shown = f"NCCL_DEBUG_SUBSYS={subsys}" if subsys is not None else "the default subsystems (INIT, BOOTSTRAP, ENV)"
        return (f"with {shown} NCCL logs at communicator set-up and on errors only, no line per collective "
                "(nccl src/debug.cc, src/enqueue.cc)")
    return None


def _nccl_subsys_inert(subsys: str, env: Mapping[str, str]) -> str | None:
    """The subsystems filter INFO lines: nothing to filter below INFO, nothing per call without COLL, TUNING, CALL."""
    level = env.get("NCCL_DEBUG")
    if level is None or level.upper() in ("VERSION", "WARN"):
        return f"NCCL writes no INFO line with NCCL_DEBUG {level or 'unset'}, whatever it selects (nccl src/debug.cc)"
    if not _per_call(subsys):
        return ("it selects no subsystem that logs per call (COLL, TUNING, CALL): NCCL logs at set-up only "
                "(nccl src/enqueue.cc)")
    return None


#: PyTorch's caching allocator settings (PYTORCH_CUDA_ALLOC_CONF, PYTORCH_ALLOC_CONF), as every torch that the
#: recorded vLLM versions pin reads them (2.8.0: vLLM 0.10.2, 0.11.0; 2.9.0: 0.11.1, 0.12.0; 2.14.0: 0.33.0): per key,
#: the values read alike by all three, and the one that is the allocator's default where all three start from it and
#: take it (else None). From each release's own parser: c10/cuda/CUDAAllocatorConfig.cpp (2.8, 2.9; the CUDA
#: allocator's own config, c10/cuda/CUDAAllocatorConfig.h), c10/core/AllocatorConfig.{h,cpp} with the CUDA keys in
#: c10/cuda/CUDAAllocatorConfig.cpp (2.14; ConfigTokenizer). Keys and values are case-sensitive, an unknown key is
#: an error, spaces are dropped; max_non_split_rounding_mb:20 (2.14's default) is refused by 2.8 and 2.9 (must be
#: > 20), garbage_collection_threshold:0 by all (it must lie in (0, 1)); keys newer than 2.8 are an error there.
_BOOL, _COUNT = r"True|False", r"[1-9][0-9]*"
_ALLOC_KEYS: dict[str, tuple[str, str | None]] = {
    "backend": (r"native|cudaMallocAsync", "native"),
    "expandable_segments": (_BOOL, "False"),
    "release_lock_on_cudamalloc": (_BOOL, "False"),
    "pinned_use_cuda_host_register": (_BOOL, "False"),
    "pinned_use_background_threads": (_BOOL, "False"),
    "pinned_num_register_threads": (_COUNT, "1"),
    "max_split_size_mb": (_COUNT, None),
    "max_non_split_rounding_mb": (_COUNT, None),
    "garbage_collection_threshold": (r"0?\.[0-9]+", None),
    "roundup_power2_divisions": (_COUNT, None),
}
#: vLLM looks for this text in PYTORCH_CUDA_ALLOC_CONF as given (0.10.2-0.12.0 vllm/device_allocator/cumem.py, sleep
#: mode; 0.33.0 vllm/config/vllm.py, a KV connector without the cumem allocator).
_VLLM_EXPANDABLE = "expandable_segments:True"


def _alloc_conf(value: str) -> str:
    """``key:value`` settings joined by commas, as torch reads them: spaces around a key or value dropped, one trailing
    comma taken, a key left out where it is set to its default, the rest in key order (each key sets its own
    setting). Anything else is left as given: a key or value not read alike by every torch in play (a list, a tab,
    another case), a key given twice (torch takes the last, vLLM 0.33's alloc_conf.py the first), or where vLLM's
    look for ``expandable_segments:True`` in the text as given would not find what torch reads."""
    fields = value.split(",")
    if fields[-1].strip(" ") == "":
        fields.pop()
    read: dict[str, str] = {}
    for field in fields:
        key, colon, setting = (part.strip(" ") for part in field.partition(":"))
        if not colon or key in read or key not in _ALLOC_KEYS or not re.fullmatch(_ALLOC_KEYS[key][0], setting):
            return value
        read[key] = setting
    if (_VLLM_EXPANDABLE in value) != (read.get("expandable_segments") == "True"):
        return value
    return ",".join(f"{key}:{setting}" for key, setting in sorted(read.items()) if setting != _ALLOC_KEYS[key][1])


_ALLOC_HOW = ("torch drops spaces, takes one trailing comma and reads each key:value on its own, so the order does "
              "not matter (c10/cuda/CUDAAllocatorConfig.cpp parseArgs in torch 2.8 and 2.9, c10/core/AllocatorConfig.h "
              "ConfigTokenizer in 2.14); a setting at the allocator's default (expandable_segments:False, "
              "backend:native, release_lock_on_cudamalloc:False, pinned_use_cuda_host_register:False, "
              "pinned_use_background_threads:False, pinned_num_register_threads:1) is left out")
_ALLOC_UNSET = ("every setting it makes is the caching allocator's default in torch 2.8, 2.9 and 2.14 (the CUDA "
                "allocator's config starts from them), and vLLM finds no expandable_segments:True in it")
_NCCL_PARSE = "nccl src/graph/tuning.cc parseList: strcasecmp on every function, algorithm and protocol name"
# NCCL_P2P_DISABLE=0, NCCL_IB_DISABLE=0 and NCCL_SHM_DISABLE=0 are NCCL's defaults, but not settled here: NCCL also
# reads /etc/nccl.conf and ~/.nccl.conf (or NCCL_CONF_FILE) without overriding the environment, so 0 turns a
# transport back on where a file disables it, and which files the process reads is not known to this table.
_HF_TRUE = frozenset({"1", "on", "yes", "true"})
_HF = "huggingface_hub constants.py _is_true: the value upper-cased, 1, ON, YES and TRUE are on, any other value off"

READERS: dict[str, Reader] = {
    "NCCL_ALGO": Reader(
        f"NCCL reads algorithm and function names case-insensitively ({_NCCL_PARSE})",
        names=("Tree", "Ring", "CollNet", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT", "Broadcast",
               "Reduce", "AllGather", "ReduceScatter", "AllReduce"), split=",;:^"),
    "NCCL_PROTO": Reader(
        f"NCCL reads protocol and function names case-insensitively ({_NCCL_PARSE})",
        names=("LL", "LL128", "Simple", "Broadcast", "Reduce", "AllGather", "ReduceScatter", "AllReduce"),
        split=",;:^"),
    "NCCL_DEBUG": Reader(
        "NCCL reads its log level case-insensitively (nccl src/debug.cc: strcasecmp, iequals since 2.28)",
        names=("VERSION", "WARN", "INFO", "ABORT", "TRACE"),
        unset={"VERSION": "it prints NCCL's version once", "WARN": "it prints NCCL's warnings, on errors only"},
        inert=_nccl_level_inert),
    "NCCL_DEBUG_SUBSYS": Reader(
        "NCCL reads subsystem names case-insensitively (nccl src/debug.cc)", names=_NCCL_SUBSYS, split=",^",
        inert=_nccl_subsys_inert),
    "TORCH_DISTRIBUTED_DEBUG": Reader(
        "torch upper-cases it and knows OFF, INFO and DETAIL (torch/csrc/distributed/c10d/debug.cpp)",
        names=("OFF", "INFO", "DETAIL"),
        unset={"OFF": "OFF is what torch reads when it is unset (torch/csrc/distributed/c10d/debug.cpp)",
               "INFO": "INFO adds logging, mostly where a DistributedDataParallel model is set up, which vLLM "
                       "does not use; only DETAIL wraps process groups (torch/distributed/distributed_c10d.py) and "
                       "turns on ProcessGroupNCCL's desync and collective-hash checks"}),
    "TOKENIZERS_PARALLELISM": Reader(
        "tokenizers lower-cases it: '', off, false, f, no, n and 0 turn parallelism off, any other value on "
        "(tokenizers src/utils/parallelism.rs); unset is neither: a forked process then turns it off",
        forms={"false": frozenset({"", "off", "false", "f", "no", "n", "0"})}, other="true"),
    "HF_HUB_OFFLINE": Reader(
        f"{_HF}; an empty value is not read (TRANSFORMERS_OFFLINE is)",
        forms={"1": _HF_TRUE, "": frozenset({""})}, other="0",
        unset={"0": "off is what huggingface_hub reads when it is unset"}, unless={"0": "TRANSFORMERS_OFFLINE"}),
    "TRANSFORMERS_OFFLINE": Reader(
        f"{_HF} (read where HF_HUB_OFFLINE is unset or empty; transformers' own check uses the same values)",
        forms={"1": _HF_TRUE}, other="0", unset={"0": "off is what huggingface_hub reads when it is unset"}),
    # Where both are set, neither runs as unset: torch 2.14 reads PYTORCH_CUDA_ALLOC_CONF, even empty, before
    # PYTORCH_ALLOC_CONF (c10/cuda/CUDAAllocatorConfig.h instance()); 2.9's accelerator config (the pinned host
    # allocator) reads PYTORCH_ALLOC_CONF first, and so does vLLM 0.33 (vllm/device_allocator/alloc_conf.py).
    "PYTORCH_CUDA_ALLOC_CONF": Reader(
        _ALLOC_HOW, parse=_alloc_conf, unset={"": _ALLOC_UNSET}, unless={"": "PYTORCH_ALLOC_CONF"}),
    "PYTORCH_ALLOC_CONF": Reader(
        f"{_ALLOC_HOW} (torch 2.8 reads PYTORCH_CUDA_ALLOC_CONF only; 2.9's CUDA allocator too)", parse=_alloc_conf,
        unset={"": _ALLOC_UNSET}, unless={"": "PYTORCH_CUDA_ALLOC_CONF"}),
    "CUDA_LAUNCH_BLOCKING": Reader(
        "CUDA reads 0 or 1 (CUDA C++ Programming Guide, CUDA Environment Variables)",
        unset={"0": "0 is CUDA's default (CUDA C++ Programming Guide, CUDA Environment Variables: default 0)"}),
}


def settle(env: dict[str, str], context: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``env`` (allow-listed and redacted) with each variable of READERS as its reader spells it, or moved apart
    where it runs as without it: the values as given are kept under ``spelled`` and ``same_as_unset``, with why.

    ``context``: the whole environment the reader sees, where ``env`` is only part of it (an NCCL config file's
    settings, which NCCL sets beside the process's own variables); ``env`` itself by default."""
    context = env if context is None else context
    out: dict[str, Any] = dict(env)
    apart: dict[str, dict[str, dict[str, str]]] = {SPELLED: {}, SAME_AS_UNSET: {}}
    for name, reader in READERS.items():
        given = env.get(name)
        if given is None or REDACTED in given:
            continue
        read = reader.read(given)
        spelled = f"{given!r} is {read!r}: {reader.how}" if read != given else ""
        if unset := reader.runs_as_unset(read, context):
            why = f"{spelled}. " if spelled else ""
            apart[SAME_AS_UNSET][name] = {"value": given, "because": Own(f"{why}It runs as without {name}: {unset}")}
            del out[name]
        elif spelled:
            out[name] = read
            apart[SPELLED][name] = {"value": given, "because": Own(spelled)}
    out.update({table: found for table, found in apart.items() if found})
    return out
