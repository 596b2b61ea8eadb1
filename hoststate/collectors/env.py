"""``[env]``: the performance-relevant environment of the snapshotting process, secrets redacted.

The allow-list here is shared with ``[vllm.env]`` (a server's own environment). It is read from this
process also under ``--root``: the environment a benchmark started from here will inherit. A value its reader reads
like another spelling, or like the variable unset, is recorded as read, the value as given kept beside it
(env_reads.py: ``spelled``, ``same_as_unset``).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from hoststate.collectors import Context, Section
from hoststate.collectors.env_reads import SAME_AS_UNSET, SPELLED, settle
from hoststate.redact import Own, redact_env

#: It reads this process's own environment (os.environ) and no file: nothing it reads can fail.
SOURCES: tuple = ()

#: Every variable with one of these prefixes: the families vLLM, PyTorch (TORCH_*, PYTORCH_*, TorchDynamo, Inductor),
#: Triton, FlashInfer, NCCL/NVSHMEM, the CUDA runtime and its libraries (CUDA_*, cuBLAS, cuBLASLt, cuDNN), OpenMP, MKL
#: and OpenBLAS read; default_policy.toml rates each family.
ALLOW_PREFIXES: tuple[str, ...] = (
    "VLLM_", "CUDA_", "NCCL_", "PYTORCH_", "TORCH_", "TORCHDYNAMO_", "TORCHINDUCTOR_", "TRITON_", "FLASHINFER_",
    "ARCTIC_", "OMP_", "CUBLAS_", "CUBLASLT_", "CUDNN_", "NVIDIA_", "NVSHMEM_", "KMP_", "MKL_", "OPENBLAS_", "UCX_",
    "GLOO_",
)
#: And these by name: the dynamic loader's library path and preloads (another libnccl or allocator runs), the C
#: library's malloc and tunables (mallopt(3) ENVIRONMENT, tunables(7)), and switches of the Hugging Face stack and
#: extension builds.
ALLOW_NAMES: frozenset[str] = frozenset(
    {
        "TORCH_COMPILE_DISABLE", "TORCH_CUDA_ARCH_LIST", "OMP_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF",
        "CUDA_VISIBLE_DEVICES", "CUDA_MODULE_LOADING", "ARCTIC_INFERENCE_ENABLED", "VLLM_PLUGINS",
        "TOKENIZERS_PARALLELISM", "LD_PRELOAD", "LD_LIBRARY_PATH", "MALLOC_CONF", "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE", "HF_HUB_ENABLE_HF_TRANSFER", "MAX_JOBS",
        "GLIBC_TUNABLES", "MALLOC_ARENA_MAX", "MALLOC_ARENA_TEST", "MALLOC_MMAP_THRESHOLD_", "MALLOC_MMAP_MAX_",
        "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_PERTURB_", "MALLOC_CHECK_",
    }
)


def allowed(name: str) -> bool:
    return name in ALLOW_NAMES or name.startswith(ALLOW_PREFIXES)


def select(env: Mapping[str, str]) -> dict[str, Any]:
    """The allow-listed variables of ``env``, sorted, secrets redacted, each as its reader reads it (settle)."""
    return settle(redact_env({k: env[k] for k in sorted(env) if allowed(k)}))


def collect(ctx: Context) -> Section:
    data = select(os.environ)
    if not data:
        return Section(status="ok", data={}, reason=None)
    settle_vllm(data, *_vllm_here(ctx, data))
    return Section(data=data)


def _vllm_here(ctx: Context, data: Mapping[str, Any]) -> tuple[str | None, str]:
    """The vLLM a command started from here runs, and where that comes from: ``--vllm-version``, else the one
    installed for this interpreter (the packages section, waited for only where a VLLM_* variable is set)."""
    if ctx.vllm_version:
        return ctx.vllm_version, "given with --vllm-version"
    if not any(name.startswith("VLLM_") for name in data):
        return None, ""
    packages = ctx.section("packages")
    found = packages.data.get("vllm") if packages is not None else None
    return (str(found), "the one installed for this interpreter (packages.vllm)") if found else (None, "")


def settle_vllm(data: dict[str, Any], version: str | None, origin: str) -> None:
    """The VLLM_* variables ``version`` reads as if they were not set (collectors/vllm_release.py) move to
    ``same_as_unset`` with why, as a server's own move to ``vllm.env_same_as_unset``: a diff then rates alike what
    this process passes on and what the server it starts reads. A switch spelled another way than vLLM reads it
    (``true`` for ``1``) is recorded as read, the value as given under ``spelled``."""
    if not version:
        return
    from hoststate.collectors.vllm_release import same_as_unset, spelled

    given = {name: value for name, value in data.items() if name.startswith("VLLM_") and isinstance(value, str)}
    try:
        alike = same_as_unset(given, version) if given else {}
        switches = spelled({k: v for k, v in given.items() if k not in alike}, version) if given else {}
    except (OSError, ValueError):  # the shipped table unreadable: nothing is said, the variables stay as they are
        return
    if alike:
        apart = data.setdefault(SAME_AS_UNSET, {})
        for name, why in sorted(alike.items()):
            apart[name] = {"value": data.pop(name), "because": Own(f"{why}; vLLM {version} is {origin}")}
    respell(data, switches, f"; vLLM {version} is {origin}")


def respell(data: dict[str, Any], switches: Mapping[str, tuple[str, str]], note: str = "") -> None:
    """Each switch of ``switches`` (vllm_release.spelled) recorded as vLLM reads it, the value as given kept under
    ``spelled`` with why, as env_reads.settle does for the readers it knows."""
    for name, (read, why) in sorted(switches.items()):
        data.setdefault(SPELLED, {})[name] = {"value": data[name], "because": Own(f"{why}{note}")}
        data[name] = read
