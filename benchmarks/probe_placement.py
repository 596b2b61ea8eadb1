"""Read the placement, mapped GPU libraries and NCCL files of a real process that loaded PyTorch's CUDA stack (as a
vLLM server does), on a GPU host: python benchmarks/probe_placement.py > OUT.json. The child imports torch, creates
a CUDA context and waits; hoststate/collectors/vllm/placement.py reads it as it reads a server."""

from __future__ import annotations

import json
import subprocess
import sys
import time

sys.path.insert(0, ".")
from hoststate.collectors.vllm.placement import server_facts  # noqa: E402

CHILD = ("import torch, sys, time; torch.zeros(1, device='cuda'); "
         "import torch.cuda.nccl as n; print('ready', torch.__version__, n.version(), flush=True); time.sleep(60)")


def main() -> int:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        ready = child.stdout.readline().split()
        unreadable: dict[str, str] = {}
        start = time.perf_counter()
        facts = server_facts(child.pid, None, unreadable)
        took = round((time.perf_counter() - start) * 1000, 1)
        json.dump({"child": ready, "took_ms": took, "facts": facts, "unreadable": unreadable}, sys.stdout, indent=1)
        print()
    finally:
        child.kill()
        child.wait()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
