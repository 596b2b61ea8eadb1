"""``[packages]``: installed versions of the inference stack, read with importlib.metadata.

Never ``pip list`` and never ``import torch``: one pass over the installed distributions' metadata.
The same selection runs inside a vLLM server's own interpreter (``SCRIPT``), so a server in another
virtual environment reports its own stack.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from hoststate.collectors import Context, Section
from hoststate.io import run

#: Distributions recorded by name (PEP 503 normalised: lower case, ``-``).
STACK: tuple[str, ...] = (
    "vllm", "torch", "triton", "pytorch-triton", "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache",
    "flash-attn", "vllm-flash-attn", "xformers", "arctic-inference", "transformers", "tokenizers",
    "huggingface-hub", "safetensors", "accelerate", "compressed-tensors", "bitsandbytes", "deep-gemm", "deep-ep",
    "xgrammar", "llguidance", "outlines", "lm-format-enforcer", "mistral-common", "ray", "nixl", "lmcache",
    "nvidia-ml-py", "pynvml", "numpy", "cupy-cuda12x", "cupy-cuda13x", "torchvision", "torchaudio", "cuda-python",
    "cuda-bindings", "pyperf", "hoststate",
)
#: Every distribution whose normalised name starts with one of these is recorded too.
PREFIXES: tuple[str, ...] = ("nvidia-", "cuda-", "vllm-", "flashinfer-", "triton-")

#: The selection, as source: run here through exec (no subprocess) and inside a server's interpreter.
#: Names and versions come from the ``name-version.dist-info`` directory names on sys.path (what
#: importlib.metadata itself matches on), so no metadata file is opened unless a legacy directory
#: name carries no version; the first directory of a name on sys.path wins, as import would.
_SCAN = (
    "import os, re, sys\n"
    "def scan(stack, prefixes):\n"
    "    out = {}\n"
    "    for base in sys.path:\n"
    "        try:\n"
    "            entries = sorted(os.listdir(base or '.'))\n"
    "        except OSError:\n"
    "            continue\n"
    "        for entry in entries:\n"
    "            if not entry.endswith(('.dist-info', '.egg-info')):\n"
    "                continue\n"
    "            name, _, version = entry.rsplit('.', 1)[0].partition('-')\n"
    "            name = re.sub(r'[-_.]+', '-', name).lower()\n"
    "            if name in out or not (name in stack or name.startswith(prefixes)):\n"
    "                continue\n"
    "            version = version.split('-')[0]\n"
    "            if not version:\n"
    "                try:\n"
    "                    from importlib import metadata\n"
    "                    version = metadata.Distribution.at(os.path.join(base, entry)).version\n"
    "                except Exception:\n"
    "                    continue\n"
    "            if version:\n"
    "                out[name] = version\n"
    "    return out\n"
)
#: Run by another interpreter: prints {"python": version, "executable": path, "packages": {name: version}}.
SCRIPT = _SCAN + (
    "import json, sys\n"
    f"print(json.dumps({{'python': '.'.join(map(str, sys.version_info[:3])), 'executable': sys.executable,"
    f" 'packages': scan(set({list(STACK)!r}), {PREFIXES!r})}}))\n"
)
_scope: dict[str, Any] = {}
exec(_SCAN, _scope)  # our own constant source; defines scan()


def installed() -> dict[str, str]:
    """The stack's versions in this interpreter (first distribution of a name wins, as import would)."""
    return dict(sorted(_scope["scan"](set(STACK), PREFIXES).items()))


def of_interpreter(executable: str, env: dict[str, str] | None = None, timeout: float = 5.0) -> tuple[dict, str | None]:
    """(report, error) from running SCRIPT under another interpreter, under a timeout."""
    done = run([executable, "-c", SCRIPT], timeout=timeout, env=env)
    if not done.ok:
        return {}, done.describe()
    try:
        report = json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {}, "interpreter printed no package report"
    if not isinstance(report, dict) or not isinstance(report.get("packages"), dict):
        return {}, "interpreter printed no package report"
    return report, None


def collect(ctx: Context) -> Section:
    if not ctx.live:
        return Section(status="skipped", reason="installed packages belong to this interpreter, not the --root tree")
    packages = installed()
    if not packages:
        return Section(status="absent", reason=f"none of the inference stack is installed for {sys.executable}")
    return Section(data=packages)
