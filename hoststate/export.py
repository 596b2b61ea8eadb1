"""A snapshot as node_exporter textfile metrics or as a Kubernetes node-feature-discovery (NFD) feature file.

Both are read by agents the fleet already runs: node_exporter's textfile collector (``--collector.textfile.directory``,
``*.prom`` files in the Prometheus text exposition format 0.0.4, no timestamps) and NFD's ``local`` feature source
(``/etc/kubernetes/node-feature-discovery/features.d/``). Every value is taken defensively: a table or key the
snapshot does not have gives no metric and no feature, never an error. Pure: no I/O, no click.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

from hoststate import __version__

# -- Prometheus text format ----------------------------------------------------------------------------------------

#: hoststate/collectors/gpu.py's power limit keys, preferred first: the limit NVML enforces
#: (nvmlDeviceGetEnforcedPowerLimit), then the management limit (nvmlDeviceGetPowerManagementLimit).
GPU_POWER_LIMIT_KEYS = ("power_enforced_limit_mw", "power_limit_mw")
#: ``clocks_applications_<clock>_mhz`` (graphics, sm, mem): one sample per clock; "mem" is labelled "memory".
_APP_CLOCK = re.compile(r"^clocks_applications_([a-z0-9_]+)_mhz$")


def _escape_label(value: str) -> str:
    """A label value as the text format writes it: backslash, double quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, int):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


class _Metrics:
    """Families in order of first use; each written once with its HELP and TYPE, samples grouped under it."""

    def __init__(self) -> None:
        self._families: dict[str, tuple[str, str, list[str]]] = {}

    def add(self, name: str, help_text: str, labels: Mapping[str, Any], value: float, kind: str = "gauge") -> None:
        family = self._families.setdefault(name, (help_text, kind, []))
        inner = ",".join(f'{k}="{_escape_label(str(v))}"' for k, v in labels.items() if v is not None)
        family[2].append(f"{name}{{{inner}}} {_number(value)}" if inner else f"{name} {_number(value)}")

    def text(self) -> str:
        out: list[str] = []
        for name, (help_text, kind, samples) in self._families.items():
            out.append(f"# HELP {name} {_escape_help(help_text)}")
            out.append(f"# TYPE {name} {kind}")
            out.extend(samples)
        return "\n".join(out) + "\n"


def _table(data: Any, *keys: str) -> Mapping[str, Any]:
    """The table at ``keys``, or an empty mapping when any level is missing or not a table."""
    for key in keys:
        if not isinstance(data, Mapping):
            return {}
        data = data.get(key)
    return data if isinstance(data, Mapping) else {}


def _gpu_power_limit_mw(gpu: Mapping[str, Any]) -> float | None:
    for key in GPU_POWER_LIMIT_KEYS:
        if _is_number(gpu.get(key)):
            return gpu[key]
    return None


def _gpu_links_active(gpu: Mapping[str, Any]) -> int | None:
    nvlink = gpu.get("nvlink")
    if not isinstance(nvlink, Mapping):
        return None
    value = nvlink.get("links_active")
    return int(value) if _is_number(value) else None


def dcgm_labels(uuid: str, gpu: Mapping[str, Any], hostname: str | None) -> dict[str, Any]:
    """The labels dcgm-exporter puts on every GPU sample (``gpu`` the NVML index as text, ``UUID``, ``modelName``,
    ``pci_bus_id``, ``Hostname``), so a query joins the two exporters ``on (UUID)`` or ``on (Hostname, gpu)``."""
    index = gpu.get("index")
    return {"gpu": str(index) if _is_number(index) else None, "UUID": uuid, "modelName": gpu.get("name"),
            "pci_bus_id": gpu.get("pci_bus_id"), "Hostname": hostname}


#: GPU memory health (collectors/gpu.py ``_health``): snapshot key -> (metric, help).
GPU_HEALTH_METRICS = {
    "ecc_errors_uncorrected_volatile": ("hoststate_gpu_ecc_errors_uncorrected_volatile",
                                        "Uncorrectable ECC errors since the driver loaded."),
    "ecc_errors_corrected_volatile": ("hoststate_gpu_ecc_errors_corrected_volatile",
                                      "Corrected ECC errors since the driver loaded."),
    "remapped_rows_pending": ("hoststate_gpu_remapped_rows_pending", "1 when a row remap waits for a GPU reset."),
    "remapped_rows_failure": ("hoststate_gpu_remapped_rows_failure", "1 when row remapping failed."),
    "retired_pages_pending": ("hoststate_gpu_retired_pages_pending",
                              "1 when a page retirement waits for a driver reload."),
}


def _gpu_health(m: _Metrics, health: Mapping[str, Any], ids: Mapping[str, Any]) -> None:
    for key, (name, help_text) in GPU_HEALTH_METRICS.items():
        value = health.get(key)
        if isinstance(value, bool) or _is_number(value):
            m.add(name, help_text, ids, value)


def _host_facts(m: _Metrics, snap: Mapping[str, Any]) -> None:
    """The vLLM server's CPU budget and /dev/shm, ACS redirect on the bridges between GPUs, Confidential Computing."""
    vllm = _table(snap, "vllm")
    servers = {"": vllm} if "placement" in vllm else dict(_table(vllm, "servers"))
    for port, server in sorted(servers.items()):
        if not isinstance(server, Mapping):
            continue
        placement = _table(server, "placement")
        labels = {"port": port or str(server.get("port", "")) or None, "pid": server.get("pid")}
        if _is_number(placement.get("cpu_budget")):
            m.add("hoststate_vllm_cpu_budget", "CPUs the vLLM server may use (allowed CPUs and cgroup quota).",
                  labels, placement["cpu_budget"])
        if _is_number(placement.get("threads")):
            m.add("hoststate_vllm_threads", "Threads of the vLLM server process.", labels, placement["threads"])
        size = _table(placement, "dev_shm").get("size_bytes")
        if _is_number(size):
            m.add("hoststate_vllm_dev_shm_bytes", "Size of the vLLM server's /dev/shm (explicit tmpfs size).",
                  labels, size)
    bridges = [b for b in _table(snap, "system", "p2p", "bridges").values() if isinstance(b, Mapping)]
    if bridges:
        m.add("hoststate_p2p_acs_redirect_bridges", "Bridges between GPUs with ACS request/completion redirect on "
              "(peer-to-peer traffic goes up to the root complex).", {},
              sum(1 for b in bridges if b.get("acs_redirect") is True))
    cc = _table(snap, "gpu", "conf_compute")
    if isinstance(cc.get("enabled"), bool):
        m.add("hoststate_conf_compute_enabled", "1 when Confidential Computing is on.",
              {"environment": cc.get("environment")}, cc["enabled"])


def _both_selected(baseline: Mapping[str, Any], snap: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both snapshots without the collectors that neither side ran (``--skip``/``--only`` on both): a node exporter
    that leaves out the server-side collectors by design compares what it reads, and a collector skipped on one
    side only still shows as unreadable."""
    def skipped(side: Mapping[str, Any], name: str) -> bool:
        return _table(side, "collectors", name).get("status") == "skipped"

    names = set(_table(baseline, "collectors")) | set(_table(snap, "collectors"))
    both = {n for n in names if skipped(baseline, n) and skipped(snap, n)}

    def without(side: Mapping[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in side.items() if k not in both}
        out["collectors"] = {k: v for k, v in _table(side, "collectors").items() if k not in both}
        return out

    return without(baseline), without(snap)


def to_prometheus(snap: Mapping[str, Any], baseline: Mapping[str, Any] | None = None) -> str:
    """Metrics of one snapshot (and its drift against ``baseline``) in node_exporter's textfile format.

    Prometheus base units: watts (NVML's milliwatts / 1000) and hertz (MHz * 1e6). No sample carries a timestamp
    (the textfile collector rejects them); ``hoststate_snapshot_timestamp_seconds`` says how old the snapshot is.
    """
    m = _Metrics()
    meta = _table(snap, "hoststate")
    m.add("hoststate_info", "hoststate snapshot identity; the digest covers what the default policy rates "
          "invalidating (equal digests: no invalidating drift).",
          {"digest": meta.get("digest", ""), "hostname": meta.get("hostname", ""), "label": meta.get("label", ""),
           "version": meta.get("version", ""), "schema": meta.get("schema", ""), "exporter_version": __version__}, 1)
    taken = meta.get("taken_at")
    if isinstance(taken, dt.datetime):
        if taken.tzinfo is None:
            taken = taken.replace(tzinfo=dt.timezone.utc)
        m.add("hoststate_snapshot_timestamp_seconds", "When the snapshot was taken (Unix time).", {},
              taken.timestamp())
    for name, entry in sorted(_table(snap, "collectors").items()):
        if isinstance(entry, Mapping):
            m.add("hoststate_collector_ok", "1 when the collector read its source completely (status ok).",
                  {"collector": name}, 1 if entry.get("status") == "ok" else 0)

    for dev, data in sorted(_table(snap, "dsa", "devices").items()):
        if not isinstance(data, Mapping):
            continue
        wqs = [w for w in _table(data, "wqs").values() if isinstance(w, Mapping)]
        m.add("hoststate_dsa_wqs", "Work queues of the DSA/IAA device.", {"device": dev}, len(wqs))
        m.add("hoststate_dsa_wqs_enabled", "Enabled work queues of the DSA/IAA device.", {"device": dev},
              sum(1 for w in wqs if w.get("state") == "enabled"))

    host = meta.get("hostname") or None
    for uuid, gpu in sorted(_table(snap, "gpu", "devices").items()):
        if not isinstance(gpu, Mapping):
            continue
        ids = {"uuid": uuid, "index": gpu.get("index") if _is_number(gpu.get("index")) else None,
               **dcgm_labels(uuid, gpu, host)}
        limit = _gpu_power_limit_mw(gpu)
        if limit is not None:
            m.add("hoststate_gpu_power_limit_watts", "GPU power limit NVML enforces, in watts.", ids, limit / 1000)
        for key in sorted(gpu):
            match = _APP_CLOCK.match(key)
            if match and _is_number(gpu[key]):
                clock = {"mem": "memory"}.get(match.group(1), match.group(1))
                m.add("hoststate_gpu_applications_clock_hertz", "GPU application clock setting, in hertz.",
                      {**ids, "clock": clock}, gpu[key] * 1_000_000)
        links = _gpu_links_active(gpu)
        if links is not None:
            m.add("hoststate_gpu_nvlink_links_active", "NVLink links of the GPU that are up.", ids, links)
        _gpu_health(m, _table(gpu, "health"), ids)
    _host_facts(m, snap)

    if baseline is not None:
        from hoststate.diff import compare
        from hoststate.policy import SEVERITIES

        result = compare(*_both_selected(baseline, snap))
        base_meta = _table(baseline, "hoststate")
        for severity in SEVERITIES:
            m.add("hoststate_drift_findings", "Findings against the baseline under the default policy, by severity.",
                  {"severity": severity}, result.counts.get(severity, 0))
        m.add("hoststate_baseline_match", "1 when nothing invalidating differs from the baseline, else 0.",
              {"baseline_digest": base_meta.get("digest", "")}, 0 if result.verdict == "invalidating" else 1)
    return m.text()


# -- NFD local feature file ----------------------------------------------------------------------------------------
#
# NFD's rules (docs/usage/customization-guide.md, "Feature files" and "Input format", and
# source/local/local.go in kubernetes-sigs/node-feature-discovery):
# - one feature per line, ``<key>[=<value>]``; lines starting with ``#`` are comments; ``# +expiry-time=<RFC3339>``
#   is a directive after which the following features expire;
# - the file must not exceed 64 kB (MaxFeatureFileSize = 65536 bytes) or nfd-worker ignores all of it;
# - files whose names start with a dot are ignored (so a writer's temp file is invisible until renamed);
# - features become node labels: keys must be Kubernetes qualified names (``[<prefix>/]<name>``, the prefix a DNS
#   subdomain of at most 253 characters, the name at most 63 characters of ``[A-Za-z0-9._-]`` beginning and ending
#   alphanumeric) and values valid label values (empty, or at most 63 characters of ``[A-Za-z0-9._-]`` beginning
#   and ending alphanumeric);
# - unprefixed names are prefixed with ``feature.node.kubernetes.io/`` today, but that is deprecated
#   (DisableAutoPrefix feature gate); ``kubernetes.io`` namespaces are denied except ``feature.node.kubernetes.io``
#   and its sub-namespaces, which are always allowed and cannot be denied by ``-deny-label-ns``. hoststate's
#   labels therefore use the sub-namespace below.

NFD_PREFIX = "hoststate.feature.node.kubernetes.io"
NFD_MAX_BYTES = 65536
#: Hex characters of the digest in the ``digest`` label: a label value holds at most 63 characters and no ':'.
NFD_DIGEST_HEX = 40


def nfd_value(value: Any) -> str:
    """Any snapshot value as a valid label value: other characters become '-', trimmed to 63, ends alphanumeric."""
    text = ("true" if value else "false") if isinstance(value, bool) else str(value)
    text = re.sub(r"[^A-Za-z0-9_.-]+", "-", text)[:63]
    return text.strip("-_.")


def digest_label(digest: str) -> str:
    """The ``digest`` label's value: the first NFD_DIGEST_HEX hex characters after ``sha256:``."""
    return digest.split(":", 1)[-1][:NFD_DIGEST_HEX]


def _single(values: Iterable[Any]) -> Any:
    """The value when every entry agrees, else None (a per-CPU table with one range, or all GPUs alike)."""
    distinct = {repr(v): v for v in values}
    return next(iter(distinct.values())) if len(distinct) == 1 else None


def nfd_features(snap: Mapping[str, Any], baseline: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Feature name (without prefix) -> label value, in a fixed order; absent inputs give no feature."""
    out: dict[str, str] = {}
    meta = _table(snap, "hoststate")

    def put(name: str, value: Any) -> None:
        if value is None:
            return
        text = nfd_value(value)
        if text:
            out[name] = text

    if isinstance(meta.get("digest"), str):
        put("digest", digest_label(meta["digest"]))
    put("schema", meta.get("schema"))
    put("version", meta.get("version"))
    put("label", meta.get("label"))
    system = _table(snap, "system")
    put("kernel", _table(system, "kernel").get("release"))
    put("cpu-smt", _table(system, "cpu").get("smt_active"))
    put("cpu-governor", _single(_table(system, "cpufreq", "governor").values()))
    put("cpu-no-turbo", _table(system, "cpufreq").get("no_turbo"))
    put("thp", _table(system, "thp").get("enabled"))
    put("numa-balancing", _table(system, "numa").get("balancing"))
    devices = _table(snap, "dsa", "devices")
    if devices:
        wqs = [w for d in devices.values() for w in _table(d, "wqs").values() if isinstance(w, Mapping)]
        put("dsa-devices", len(devices))
        put("dsa-wqs-enabled", sum(1 for w in wqs if w.get("state") == "enabled"))
    gpu = _table(snap, "gpu")
    gpus = [g for g in _table(gpu, "devices").values() if isinstance(g, Mapping)]
    if gpus:
        put("gpu-count", len(gpus))
        put("gpu-driver", gpu.get("driver_version"))
        put("gpu-name", _single(g.get("name") for g in gpus))
        limit = _single(_gpu_power_limit_mw(g) for g in gpus)
        put("gpu-power-limit-watts", None if limit is None else round(limit / 1000))
        put("gpu-cc", _table(gpu, "conf_compute").get("enabled"))
        put("gpu-health-ok", not _gpu_faults(snap))
    bridges = [b for b in _table(system, "p2p", "bridges").values() if isinstance(b, Mapping)]
    if bridges:
        put("p2p-acs-redirect", any(b.get("acs_redirect") is True for b in bridges))
    vllm = _table(snap, "vllm")
    put("vllm-version", vllm.get("version"))
    put("vllm-cudagraph", _table(vllm, "cudagraph").get("declared"))
    if baseline is not None:
        from hoststate.diff import compare

        result = compare(*_both_selected(baseline, snap))
        base_digest = _table(baseline, "hoststate").get("digest")
        if isinstance(base_digest, str):
            put("baseline-digest", digest_label(base_digest))
        put("baseline-match", result.verdict != "invalidating")
        put("drift-invalidating", result.counts.get("invalidating", 0))
    return out


def _gpu_faults(snap: Mapping[str, Any]) -> list[str]:
    """Health faults of the snapshot's GPUs (hoststate.slurm.health_faults, without the kernel log)."""
    from hoststate.slurm import health_faults

    return health_faults(snap)


def to_nfd(snap: Mapping[str, Any], baseline: Mapping[str, Any] | None = None, *,
           expires: dt.datetime | None = None, prefix: str = NFD_PREFIX) -> str:
    """The NFD local feature file: ``<prefix>/<name>=<value>`` lines, optionally under an expiry directive."""
    meta = _table(snap, "hoststate")
    digest = meta.get("digest")
    well_formed = isinstance(digest, str) and re.fullmatch(r"sha256:[0-9a-f]{64}", digest)
    shown = digest if well_formed else nfd_value(digest) if isinstance(digest, str) else ""
    # Every value on the comment line goes through nfd_value: a newline in a snapshot cannot add a feature line.
    lines = [f"# hoststate {__version__}: host {nfd_value(meta.get('hostname', '')) or '?'}, snapshot digest "
             f"{shown or '?'}"]
    if expires is not None:
        if expires.tzinfo is None:
            expires = expires.replace(tzinfo=dt.timezone.utc)
        stamp = expires.astimezone(dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        lines.append(f"# +expiry-time={stamp}")
    for name, value in nfd_features(snap, baseline).items():
        lines.append(f"{prefix}/{name}={value}")
    return "\n".join(lines) + "\n"  # a few hundred bytes: far below NFD_MAX_BYTES
