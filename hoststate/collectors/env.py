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
from hoststate.collectors.env_reads import settle
from hoststate.redact import redact_env

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
#: And these by name: the dynamic loader's library path and preloads (another libnccl or allocator runs), and
#: switches of the Hugging Face stack and extension builds.
ALLOW_NAMES: frozenset[str] = frozenset(
    {
        "TORCH_COMPILE_DISABLE", "TORCH_CUDA_ARCH_LIST", "OMP_NUM_THREADS", "PYTORCH_CUDA_ALLOC_CONF",
        "CUDA_VISIBLE_DEVICES", "CUDA_MODULE_LOADING", "ARCTIC_INFERENCE_ENABLED", "VLLM_PLUGINS",
        "TOKENIZERS_PARALLELISM", "LD_PRELOAD", "LD_LIBRARY_PATH", "MALLOC_CONF", "HF_HUB_OFFLINE",
        "TRANSFORMERS_OFFLINE", "HF_HUB_ENABLE_HF_TRANSFER", "MAX_JOBS",
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
    return Section(data=data)
