"""Where a vLLM server runs on the host: its CPU placement, the GPU libraries it loaded, its NCCL config files.

``[vllm.placement]``: the server's cgroup (v2 ``cpu.max``, ``cpuset.cpus.effective``, ``cpu.stat`` throttling;
v1's ``cpu.cfs_quota_us``), its CPU and NUMA affinity and thread count (``/proc/PID/status``), the CPU budget
that leaves it (the fewer of its allowed CPUs and its quota), and its ``/dev/shm`` (``/proc/PID/mountinfo``:
NCCL's shared-memory transport fails or falls back when a container's default 64 MiB is all there is).
``[vllm.libraries]``: NCCL, the CUDA runtime, cuBLAS(Lt), cuDNN and the driver library as mapped
(``/proc/PID/maps``), with the version the file name or its pip wheel gives. ``[vllm.nccl_conf]``: the files
NCCL reads at init (``$NCCL_CONF_FILE`` else ``~/.nccl.conf``, then ``/etc/nccl.conf``), read in the server's
mount namespace with its user's rights (procfiles.ProcView), never with root's.

The files under /proc and /sys are read through a Reader with a root, so a captured tree (fixtures/hosts/)
reads like the live host; failures are recorded under the file (vllm's SOURCES table says what each hides).
psutil is not used: it reads the same /proc/PID/status and sched_getaffinity of the live host only, and cannot
honour a root.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from hoststate import procfiles
from hoststate.cgroups import cfs_max, cgroup_dirs, parse_cpu_max
from hoststate.collectors.system import parse_cpulist
from hoststate.coverage import source
from hoststate.io import Reader, decode

_P = r"proc/\d+"
_CG = r"sys/fs/cgroup(?:/.*)?"
_ROWS = (
    (rf"{_P}/status", ("placement.cpus_allowed", "placement.mems_allowed", "placement.threads", "placement.cpu_budget"),
     ()),
    (rf"{_P}/cgroup", ("placement.cgroup", "placement.cpu_*", "placement.cpuset_*", "placement.throttling.**"), ()),
    (r"sys/fs/cgroup/cgroup\.controllers", ("placement.cgroup", "placement.cpu_*", "placement.cpuset_*",
                                             "placement.throttling.**"), ("ENOENT",)),  # not cgroup v2: v1 is read
    (rf"{_CG}/cpu\.(?:max|cfs_quota_us|cfs_period_us)", ("placement.cpu_max", "placement.cpu_quota_cpus",
                                                        "placement.cpu_budget"), ("ENOENT",)),  # no cpu controller
    (rf"{_CG}/cpuset\.(?P<k>cpus|mems)\.effective", ("placement.cpuset_{k}",), ("ENOENT",)),  # no cpuset controller
    (rf"{_CG}/cpu\.stat", ("placement.throttling.**",), ()),
    (rf"{_P}/mountinfo", ("placement.dev_shm.**",), ()),
    (rf"{_P}/maps", ("libraries.**", "serving_path"), ()),
    (r".*-packages", ("libraries.*.version",), ()),
    (rf"{_P} nccl (?P<k>user|system)", ("nccl_conf.{k}.**",), ()),
    (rf"{_P} nccl", ("nccl_conf.**",), ()),
)
#: What this module reads -> where it lands in the ``vllm`` table, for one server and for several (``servers.*``).
SOURCES = tuple(source(reads, *lands, *(f"servers.*.{p}" for p in lands), absent=absent)
                for reads, lands, absent in _ROWS)

#: Libraries whose build decides kernels and collectives: snapshot key -> file-name pattern (ld.so soname; a pip
#: wheel's copy may carry a hash: torch/lib/libcudart-9335f6a2.so.12).
LIBRARIES: dict[str, re.Pattern[str]] = {
    "nccl": re.compile(r"libnccl(?:-[0-9a-f]{8})?\.so(?:\.[\d.]+)?"),
    "cudart": re.compile(r"libcudart(?:-[0-9a-f]{8})?\.so(?:\.[\d.]+)?"),
    "cublas": re.compile(r"libcublas(?:-[0-9a-f]{8})?\.so(?:\.[\d.]+)?"),
    "cublaslt": re.compile(r"libcublasLt(?:-[0-9a-f]{8})?\.so(?:\.[\d.]+)?"),
    "cudnn": re.compile(r"libcudnn(?:-[0-9a-f]{8})?\.so(?:\.[\d.]+)?"),
    "cuda_driver": re.compile(r"libcuda(?:-[0-9a-f]{8})?\.so(?:\.[\d.]+)?"),
    "nvshmem": re.compile(r"libnvshmem_host(?:-[0-9a-f]{8})?\.so(?:\.[\d.]+)?"),
}
#: The pip wheel directory a library file sits in: ``site-packages/nvidia/nccl/lib/libnccl.so.2`` (CUDA 12 wheels,
#: one directory per wheel) or ``site-packages/nvidia/cu13/lib/libcublas.so.13`` (CUDA 13, one shared directory).
_WHEEL_LIB = re.compile(r"(?P<site>.*/(?:site|dist)-packages)/nvidia/[\w-]+/lib/[^/]+")
#: The wheel that ships each library (``nvidia_nccl_cu12-2.27.3.dist-info``, ``nvidia_cublas-13.1.0.3.dist-info``).
WHEELS = {"nccl": "nvidia_nccl", "cudart": "nvidia_cuda_runtime", "cublas": "nvidia_cublas",
          "cublaslt": "nvidia_cublas", "cudnn": "nvidia_cudnn", "nvshmem": "nvidia_nvshmem"}
#: Packages vLLM imports at start whatever the model and backends (vllm's requirements/common.txt and cuda.txt:
#: the engine, PyTorch and its Triton, the Hugging Face config/tokenizer stack): always on the serving path, also
#: where their files are read rather than mapped (pure Python).
ALWAYS_SERVING = ("vllm", "torch", "triton", "pytorch-triton", "transformers", "tokenizers", "huggingface-hub",
                  "safetensors", "numpy")
#: Library file stems of NVIDIA's wheels -> the distribution name they start (CUDA 13 wheels share nvidia/cu13/lib).
_NVIDIA_LIBS = {"cudart": "cuda-runtime", "nvrtc": "cuda-nvrtc", "cupti": "cuda-cupti", "nvJitLink": "nvjitlink",
                "nvjitlink": "nvjitlink", "cusparseLt": "cusparselt", "nvshmem_host": "nvshmem", "nvToolsExt": "nvtx",
                "cublasLt": "cublas"}
#: Path components that name no distribution (a namespace or a system directory).
_NOT_NAMES = frozenset({"nvidia", "lib", "lib64", "usr", "opt", "local", "site-packages", "dist-packages", "bin",
                        "python3", "home", "root", "cache", "venv", "x86-64-linux-gnu", "aarch64-linux-gnu", "cuda"})
#: Keys of cpu.stat worth recording: throttling (counters since the cgroup was made).
THROTTLE_KEYS = ("nr_periods", "nr_throttled", "throttled_usec")
#: A server's maps runs to a few thousand lines (~1 MiB with every Python extension); beyond this it is not read.
MAX_MAPS_BYTES = 16 << 20
#: At most this many NCCL config lines are kept (a config has a handful).
MAX_CONF_KEYS = 64


def parse_status(text: str) -> dict[str, Any]:
    """``/proc/PID/status``: allowed CPUs and NUMA nodes, thread count."""
    out: dict[str, Any] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        value = value.strip()
        if key == "Cpus_allowed_list":
            out["cpus_allowed"] = value
        elif key == "Mems_allowed_list":
            out["mems_allowed"] = value
        elif key == "Threads" and value.isdigit():
            out["threads"] = int(value)
    return out


def cgroup_of(reader: Reader, pid: int | str) -> str | None:
    """The directory under /sys/fs/cgroup holding a process's ``cpu.stat`` (v2's path first, else v1's cpu
    controller's), or None: the watch reads the server's throttling at a run's start and end."""
    v2, v1 = cgroup_dirs(reader.read(f"proc/{pid}/cgroup", record=False, strip=False) or "")
    for cgroup in (v2, v1):
        if cgroup is not None and reader.exists(f"sys/fs/cgroup/{cgroup.strip('/')}/cpu.stat".replace("//", "/")):
            return "/" + cgroup.strip("/")
    return None


def read_cpu_stat(reader: Reader, cgroup: str) -> dict[str, int] | None:
    """A cgroup's ``cpu.stat``; v1's ``throttled_time`` (ns) as v2's ``throttled_usec``."""
    text = reader.read(f"sys/fs/cgroup/{cgroup.strip('/')}/cpu.stat".replace("//", "/"), record=False, strip=False)
    if not text:
        return None
    stat = parse_kv(text)
    if "throttled_time" in stat and "throttled_usec" not in stat:
        stat["throttled_usec"] = stat.pop("throttled_time") // 1000
    return stat


def parse_kv(text: str) -> dict[str, int]:
    out: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            out[key] = int(value)
    return out


_SIZE = re.compile(r"size=(\d+)([kmg%]?)", re.IGNORECASE)


def dev_shm(mountinfo: str) -> dict[str, Any]:
    """The process's ``/dev/shm`` mount (the last one listed wins, as the kernel stacks them): file system and
    size; tmpfs prints ``size=`` only when it is not the default (half of RAM)."""
    found: dict[str, Any] = {"mounted": False}
    for line in mountinfo.splitlines():
        left, sep, right = line.partition(" - ")
        fields, rest = left.split(), right.split()
        if not sep or len(fields) < 5 or fields[4] != "/dev/shm" or not rest:
            continue
        found = {"mounted": True, "fs": rest[0]}
        m = _SIZE.search(rest[2] if len(rest) > 2 else "")
        if m and m[2] != "%":
            found["size_bytes"] = int(m[1]) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m[2].lower()]
        elif rest[0] == "tmpfs":
            found["size"] = m[0][5:] if m else "default (half of RAM)"
    return found


def mapped_libraries(maps: str) -> dict[str, list[str]]:
    """Library key -> paths of the matching files mapped (``/proc/PID/maps``; `` (deleted)`` kept visible)."""
    out: dict[str, list[str]] = {}
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) < 6 or not fields[5].startswith("/"):
            continue
        path = fields[5]
        name = path.removesuffix(" (deleted)").rsplit("/", 1)[-1]
        for key, pattern in LIBRARIES.items():
            if pattern.fullmatch(name) and path not in out.setdefault(key, []):
                out[key].append(path)
    return out


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _mapped_names(paths: set[str]) -> set[str]:
    """Every name a mapped file's path offers for a distribution: each directory and file stem on the path
    (``site-packages/flash_attn_2_cuda.cpython-312...so`` -> ``flash-attn-2-cuda``, a FlashInfer JIT cache under
    ``~/.cache/flashinfer/`` -> ``flashinfer``), and ``nvidia-<lib>`` for a library of NVIDIA's wheels."""
    out: set[str] = set()
    for path in paths:
        parts = path.removesuffix(" (deleted)").strip("/").split("/")
        out.update(_norm(part.split(".", 1)[0]) for part in parts if part)
        if "nvidia" in parts:
            stem = re.sub(r"^lib|(?:-[0-9a-f]{8})?\.so.*$", "", parts[-1])
            out.add("nvidia-" + _norm(_NVIDIA_LIBS.get(stem, stem)))
            out.update("nvidia-" + _norm(p) for p in parts[parts.index("nvidia") + 1:-1] if p != "lib")
    return out


def serving_path(maps: str, packages: Mapping[str, str]) -> list[str]:
    """The recorded packages on the server's serving path: those vLLM always imports (ALWAYS_SERVING) and those with
    a file mapped into the server (``/proc/PID/maps``): a wheel's directory, a top-level extension module or a JIT
    cache named after it. Matching is by name and errs towards "loaded" (a venv under /opt/torch counts for
    torch): a package wrongly counted is only rated as if it ran."""
    paths = {f[5] for line in maps.splitlines() if len(f := line.split(maxsplit=5)) == 6 and f[5].startswith("/")}
    names = {n for n in _mapped_names(paths) if len(n) > 2 and n not in _NOT_NAMES}
    out = []
    for dist in packages:
        d = _norm(dist)
        if d in ALWAYS_SERVING or any(n == d or n.startswith(d + "-") or d.startswith(n + "-") for n in names):
            out.append(dist)
    return sorted(out)


def version_of(key: str, path: str, listdir: Callable[[str], list[str] | None]) -> str | None:
    """A library's version: its pip wheel's (``nvidia_nccl_cu12-2.27.3.dist-info`` beside ``nvidia/``), else
    the file name's (``libnccl.so.2.21.5`` -> 2.21.5; a bare soname major such as ``.so.12`` says less)."""
    m = _WHEEL_LIB.fullmatch(path.removesuffix(" (deleted)"))
    if m and key in WHEELS:
        prefix = WHEELS[key]
        for entry in sorted(listdir(m["site"]) or []):
            wheel = re.fullmatch(rf"{re.escape(prefix)}(?:_cu\d+)?-([^-]+)\.dist-info", entry, re.IGNORECASE)
            if wheel:
                return wheel[1]
    v = re.search(r"\.so\.(\d[\d.]*)$", path.removesuffix(" (deleted)"))
    return v[1] if v else None


def parse_nccl_conf(text: str) -> dict[str, str]:
    """NCCL's config file: ``KEY=VALUE`` lines, ``#`` comments skipped (nccl src/misc/param.cc)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        if len(out) < MAX_CONF_KEYS:
            out[key.strip()] = value.strip()
    return out


def placement(r: Reader, pid: int) -> dict[str, Any]:
    """``[vllm.placement]`` of process ``pid``, read under the Reader's root; failures recorded by file."""
    out: dict[str, Any] = {}
    status = r.read(f"proc/{pid}/status")
    if status is not None:
        out.update(parse_status(status))
    cgroups = r.read(f"proc/{pid}/cgroup")
    quota: float | None = None
    if cgroups is not None:
        quota = _cgroup(r, cgroups, out)
    allowed = None
    if "cpus_allowed" in out:
        try:
            allowed = len(parse_cpulist(out["cpus_allowed"]))
        except ValueError:
            r.note(f"proc/{pid}/status", "Cpus_allowed_list is not a cpulist")
            out.pop("cpus_allowed")
    if allowed is not None and cgroups is not None and not _quota_unread(r):
        out["cpu_budget"] = min(float(allowed), quota) if quota is not None else float(allowed)
    mountinfo = r.read(f"proc/{pid}/mountinfo")
    if mountinfo is not None:
        out["dev_shm"] = dev_shm(mountinfo)
    return out


def _quota_unread(r: Reader) -> bool:
    """Whether the quota's file failed: the budget is then unknown, never the CPU count alone."""
    return any(k.endswith(("/cpu.max", "/cpu.cfs_quota_us", "/cpu.cfs_period_us")) for k in r.unreadable)


def _cgroup(r: Reader, text: str, out: dict[str, Any]) -> float | None:
    """The cgroup's quota, cpuset and throttling into ``out``; returns the quota in CPUs (None: no limit)."""
    v2, v1 = cgroup_dirs(text)
    quota: float | None = None
    base = "sys/fs/cgroup"
    if v2 is not None and r.exists(f"{base}/cgroup.controllers"):
        out["cgroup"] = v2
        d = f"{base}{v2}".rstrip("/")
        if r.exists(f"{d}/cpu.max"):  # the cpu controller is not enabled for the root cgroup nor every child
            text_max = r.read(f"{d}/cpu.max")
            if text_max is not None:
                out["cpu_max"] = text_max
                quota = parse_cpu_max(text_max)
        for key, name in (("cpuset_cpus", "cpuset.cpus.effective"), ("cpuset_mems", "cpuset.mems.effective")):
            if r.exists(f"{d}/{name}"):
                value = r.read(f"{d}/{name}")
                if value is not None:
                    out[key] = value
        stat = r.read(f"{d}/cpu.stat")
        if stat is not None:
            out["throttling"] = {k: v for k, v in parse_kv(stat).items() if k in THROTTLE_KEYS}
    elif v1 is not None:
        out["cgroup"] = "/" + v1.split("/", 1)[-1] if "/" in v1 else "/"
        d = f"{base}/{v1}"
        q, p = r.read_int(f"{d}/cpu.cfs_quota_us"), r.read_int(f"{d}/cpu.cfs_period_us")
        if q is not None and p:
            out["cpu_max"] = cfs_max(q, p)
            quota = parse_cpu_max(out["cpu_max"])
        stat = r.read(f"{d}/cpu.stat")
        if stat is not None:
            kv = parse_kv(stat)
            if "throttled_time" in kv:
                kv["throttled_usec"] = kv.pop("throttled_time") // 1000
            out["throttling"] = {k: v for k, v in kv.items() if k in THROTTLE_KEYS}
    if quota is not None:
        out["cpu_quota_cpus"] = quota
    if not out.get("throttling"):
        out.pop("throttling", None)
    return quota


def libraries(r: Reader, pid: int, listdir: Callable[[str], list[str] | None],
              packages: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``[vllm.libraries]``: each library mapped, its path(s) and version; ``{}`` when maps was not read. With the
    server's ``packages``, also ``serving_path`` (under the key ``__serving_path``, taken out by server_facts)."""
    data = r.read_bytes(f"proc/{pid}/maps", max_bytes=MAX_MAPS_BYTES)
    if data is None:
        return {}
    maps = decode(data)
    out: dict[str, Any] = {}
    if packages:
        out["__serving_path"] = serving_path(maps, packages)
    for key, paths in mapped_libraries(maps).items():
        entry: dict[str, Any] = {"path": paths[0] if len(paths) == 1 else paths}
        version = version_of(key, paths[0], listdir)
        if version:
            entry["version"] = version
        out[key] = entry
    return out


def nccl_conf(read_text: Callable[[str], tuple[str | None, str | None]], env: Mapping[str, str] | None,
              home: str | None, unreadable: dict[str, str], where: str) -> dict[str, Any]:
    """``[vllm.nccl_conf]``: NCCL's files as the server's NCCL reads them (``read_text`` reads in its view with its
    rights): ``$NCCL_CONF_FILE`` if set, else ``~/.nccl.conf``; then ``/etc/nccl.conf``. A missing file is
    recorded as ``false`` (absent, known); any other failure under ``<where> <file>``."""
    out: dict[str, Any] = {}
    user_file = (env or {}).get("NCCL_CONF_FILE") or (f"{home.rstrip('/')}/.nccl.conf" if home else None)
    for key, path in (("user", user_file), ("system", "/etc/nccl.conf")):
        if path is None:
            continue
        text, err = read_text(path)
        reason = (err or "unreadable").rsplit(": ", 1)[-1]  # ProcView names the path first
        if text is not None:
            out[key] = {"file": path, "settings": parse_nccl_conf(text)}
        elif reason in ("ENOENT", "ENOTDIR"):
            out[key] = {"file": path, "exists": False}
        else:
            unreadable[f"{where} nccl {key}"] = reason
    return settle_conf(out, env)


def settle_conf(files: dict[str, Any], env: Mapping[str, str] | None) -> dict[str, Any]:
    """Each file's settings as NCCL reads them, as the server's own variables are (env_reads.settle): NCCL sets a
    file's ``KEY=VALUE`` as a variable where none is set yet, the environment first, then the user file, then
    /etc/nccl.conf (nccl src/misc/param.cc, setEnvFile: setenv without overwrite), so a value is judged in that
    whole environment (``NCCL_DEBUG=INFO`` in a file logs per call only beside a COLL subsystem from anywhere)."""
    from hoststate.collectors.env_reads import settle

    seen: dict[str, str] = {}
    for key in ("system", "user"):  # the later update wins: the user file over /etc/nccl.conf, env over both
        seen.update(files.get(key, {}).get("settings", {}))
    seen.update(env or {})
    for entry in files.values():
        if "settings" in entry:
            entry["settings"] = settle(entry["settings"], seen)
    return files


def home_of(passwd: str | None, uid: int) -> str | None:
    """The home directory of ``uid`` in a passwd(5) text (NCCL takes it from getpwuid, not $HOME)."""
    for line in (passwd or "").splitlines():
        fields = line.split(":")
        if len(fields) >= 6 and fields[2] == str(uid):
            return fields[5]
    return None


def server_facts(pid: int, env: Mapping[str, str] | None, unreadable: dict[str, str], root: str = "/",
                 packages: Mapping[str, str] | None = None) -> dict[str, Any]:
    """``placement``, ``libraries`` and ``nccl_conf`` of server ``pid``: /proc and /sys under ``root``; what the
    server itself would open (its libraries' wheels, NCCL's files) in its own view, with its rights (live only).
    With the server's ``packages``: ``serving_path``, the ones it loaded (serving_path())."""
    before = set(unreadable)
    r = Reader(root, unreadable)
    out: dict[str, Any] = {}
    view = procfiles.ProcView(pid) if r.live else None
    try:
        def listdir(path: str) -> list[str] | None:
            if view is None:
                return r.listdir(path.lstrip("/"))
            entries, _err = view.listdir(path)
            return entries

        out["placement"] = placement(r, pid)
        out["libraries"] = libraries(r, pid, listdir, packages)
        if "__serving_path" in out["libraries"]:
            out["serving_path"] = out["libraries"].pop("__serving_path")
        if view is not None:
            if view.error:
                unreadable[f"proc/{pid} nccl"] = view.error
            else:
                passwd, _ = view.read_text("/etc/passwd")
                home = home_of(passwd, view.identities[0].uid) if view.identities else None
                out["nccl_conf"] = nccl_conf(view.read_text, env, home, unreadable, f"proc/{pid}")
    finally:
        if view is not None:
            view.close()
    failed = set(unreadable) - before
    if failed and r.live and procfiles.gone(pid):  # it exited meanwhile: what failed says only that
        unreadable.update(dict.fromkeys(failed, "ESRCH"))
    return {k: v for k, v in out.items() if v}
