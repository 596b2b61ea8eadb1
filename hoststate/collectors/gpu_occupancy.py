"""What occupies a GPU when the snapshot is taken: memory in use and compute processes that are not the
benchmark's.

A leftover process that still holds a CUDA context and memory shares the GPU's memory and SMs with the benchmark;
it is recorded per GPU under ``occupancy`` and rated invalidating (default_policy.toml). The benchmark's own
processes are the vLLM server named by ``--vllm-pid`` and its descendants, and a process whose name says vLLM
(its workers set titles such as ``VLLM::Worker_TP0``) run by the user hoststate runs for (filetrust.invoking_uid)
or root: another user's process named ``vllm`` is foreign; their memory is taken out of ``memory_used_bytes``.

Measured on one H200 (fixtures/real/h200-occupancy.json): idle, NVML's v1 ``used`` is the driver's reservation
(644939776 B, nvidia-smi's "reserved 616 MiB"); a process holding only a bare CUDA context adds 552402944 B
(usedGpuMemory 543162368 B), one holding 1 GiB more adds 1626144768 B.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

#: A process name that says it is vLLM's (the server, its engine core and workers).
VLLM_NAME = re.compile(r"vllm|EngineCore", re.IGNORECASE)
#: How many parents are followed from a GPU process towards the server (workers are children or grandchildren).
MAX_DEPTH = 8


def is_own(pid: int, name: str | None, server_pid: int | None, parent_of: Callable[[int], int | None],
           owner_of: Callable[[int], tuple[int | None, int | None]] | None = None,
           trusted: Callable[[tuple[int | None, int | None]], bool] | None = None) -> bool:
    """Whether a GPU process is the benchmark's: the server, a descendant of it, or named as vLLM's and run by a
    ``trusted`` owner (its real and effective uid, ``owner_of``; filetrust.run_by_invoker): any user can name a
    process ``vllm`` (``exec -a``), and another user's must not pass for the benchmark's."""
    if name and VLLM_NAME.search(name) and owner_of is not None and trusted is not None and trusted(owner_of(pid)):
        return True
    if server_pid is None:
        return False
    current: int | None = pid
    for _ in range(MAX_DEPTH):
        if current is None or current <= 1:
            return False
        if current == server_pid:
            return True
        current = parent_of(current)
    return False


def occupancy(used_bytes: int | None, processes: Iterable[dict[str, Any]], own: Callable[[int, str | None], bool],
              ) -> tuple[dict[str, Any], str | None]:
    """(the ``occupancy`` table, why memory could not be attributed or None). ``processes``: rows of
    ``{pid, used_memory_bytes?, name?}``. The foreign count and names are written only when there is one (a GPU
    nobody else uses reads the same as in snapshots taken before they were recorded)."""
    out: dict[str, Any] = {}
    foreign: list[str] = []
    own_bytes = 0
    unattributed = None
    for proc in processes:
        pid, name = int(proc["pid"]), proc.get("name")
        if own(pid, name):
            used = proc.get("used_memory_bytes")
            if used is None:
                unattributed = f"NotAvailable: NVML gave no memory figure for the server's process {pid}"
            else:
                own_bytes += int(used)
        else:
            foreign.append(str(name) if name else f"pid {pid}")
    if used_bytes is not None and unattributed is None:
        out["memory_used_bytes"] = max(0, int(used_bytes) - own_bytes)
    if foreign:
        out["foreign_compute_processes"] = len(foreign)
        out["foreign_process_names"] = sorted(foreign)
    return out, unattributed


def owner_reader(read: Callable[[str], str | None]) -> Callable[[int], tuple[int | None, int | None]]:
    """(real uid, effective uid) of a pid from ``/proc/PID/status``; (None, None) when it cannot be read."""

    from hoststate.filetrust import status_uids

    def owner_of(pid: int) -> tuple[int | None, int | None]:
        return status_uids(read(f"proc/{pid}/status") or "")

    return owner_of


def parent_reader(read: Callable[[str], str | None]) -> Callable[[int], int | None]:
    """ppid of a pid from ``/proc/PID/stat`` (the field after the parenthesised command, which may hold spaces)."""

    def parent_of(pid: int) -> int | None:
        text = read(f"proc/{pid}/stat")
        if not text or ")" not in text:
            return None
        fields = text.rsplit(")", 1)[1].split()
        return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None

    return parent_of
