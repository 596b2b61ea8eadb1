"""``hoststate show``: a person's summary of one snapshot (identity, collector coverage, and the facts that most
often explain a changed benchmark: CPU tuning, DSA queues, GPUs, the vLLM server), or the snapshot as JSON.

Values read as in the TOML file (``true``/``false``, not Python's ``True``/``False``). Loads no diff or policy
module: show only reads the file.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from hoststate.coverage import described
from hoststate.paths import get
from hoststate.render.text import WIDTH, cells, fit, safe, scalar, table
from hoststate.snapshot import jsonable


def _fmt(value: Any) -> str:
    if isinstance(value, dict):
        return ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_fmt(v) for v in value)
    return scalar(value)


_table = table  # hoststate.render.text.table: ``value`` when it is a table, else an empty one


def _line(label: str, value: Any) -> str | None:
    if value is None or value == {} or value == []:
        return None
    return f"  {label:<22} {_fmt(value)}"


def _system(snap: dict[str, Any]) -> list[str | None]:
    s = _table(snap.get("system"))
    return [
        _line("kernel", get(s, ("kernel", "release"))),
        _line("os", get(s, ("os", "pretty_name"))),
        _line("cpu", get(s, ("cpu", "model_name"))),
        _line("sockets/cores/threads", "/".join(str(get(s, ("cpu", k), "?")) for k in ("sockets", "cores", "threads"))),
        _line("smt", get(s, ("cpu", "smt_control"))),
        _line("cpufreq governor", get(s, ("cpufreq", "governor"))),
        _line("turbo disabled", get(s, ("cpufreq", "no_turbo"))),
        _line("boost", get(s, ("cpufreq", "boost"))),
        _line("numa balancing", get(s, ("numa", "balancing"))),
        _line("thp", get(s, ("thp", "enabled"))),
    ]


def _dsa(snap: dict[str, Any]) -> list[str | None]:
    devices = _table(get(snap, ("dsa", "devices")))
    lines: list[str | None] = []
    for name, dev in devices.items():
        dev = _table(dev)
        wqs = _table(dev.get("wqs"))
        enabled = [q for q in wqs.values() if isinstance(q, dict) and q.get("state") == "enabled"]
        clients = sum(q["clients"] for q in enabled if isinstance(q.get("clients"), int))
        lines.append(
            _line(name, f"{dev.get('state', '?')}, {len(enabled)}/{len(wqs)} WQs enabled, {clients} clients on them")
        )
    saved = get(snap, ("accel_config", "saved"))
    if isinstance(saved, dict) and saved:
        lines.append(_line("saved config", f"present={_fmt(saved.get('present'))} "
                           f"matches_live={_fmt(saved.get('matches_live'))}"))
    return lines


def _gpu(snap: dict[str, Any]) -> list[str | None]:
    gpu = _table(snap.get("gpu"))
    lines: list[str | None] = [
        _line("driver", gpu.get("driver_version")),
        _line("gpus", gpu.get("count")),
    ]
    devices = [(uuid, dev) for uuid, dev in _table(gpu.get("devices")).items() if isinstance(dev, dict)]

    def index(item: tuple[str, dict[str, Any]]) -> tuple[int, str]:
        number = item[1].get("index")
        return (number if isinstance(number, int) else 1 << 62, item[0])

    for uuid, dev in sorted(devices, key=index):
        lines.append(_line(f"GPU{dev.get('index', '?')}", f"{dev.get('name', '?')} {uuid}"))
    count = gpu.get("count")
    if isinstance(count, int) and not isinstance(count, bool) and count > len(devices):
        unread = _table(get(snap, ("collectors", "gpu", "unreadable")))
        lost = sorted({str(v) for k, v in unread.items() if str(k).startswith("devices")})
        lines.append(_line("MISSING", f"{count - len(devices)} of {count} GPUs not described"
                           + (f" ({', '.join(lost)})" if lost else "") + "; see `hoststate check` (HS306)"))
    return lines


def _vllm(snap: dict[str, Any]) -> list[str | None]:
    v = _table(snap.get("vllm"))
    servers = v.get("servers")
    if isinstance(servers, dict) and servers:
        return [_line(f"server {port}", s.get("model")) for port, s in servers.items() if isinstance(s, dict)]
    return [
        _line("source", v.get("source")),
        _line("version", _vllm_version(v)),
        _line("model", v.get("model")),
        _line("cudagraph declared", get(v, ("cudagraph", "declared"))),
        _line("cudagraph observed", get(v, ("cudagraph", "observed"))),
    ]


def _vllm_version(v: dict[str, Any]) -> str | None:
    version = v.get("version")
    if version is None and (v.get("source") or v.get("args")):
        return "unknown (not detected; give --vllm-version: the newest rules were assumed)"
    return version


def _counts(value: Any) -> str:
    counts = _table(value)
    return ", ".join(f"{counts.get(s, 0)} {s}" for s in ("invalidating", "warning", "info"))


def _by_rule(records: Any) -> list[str]:
    """Accepted or refused finding records, one line per rule with its count."""
    rules: dict[str, int] = {}
    for r in records if isinstance(records, list) else []:
        if isinstance(r, dict):
            key = f"{r.get('rule') or r.get('path')}" + (f" (by {r['accepted_by']})" if r.get("accepted_by") else "")
            rules[key] = rules.get(key, 0) + 1
    return [f"    {n} x {rule}" for rule, n in rules.items()]


def _rebaseline(snap: dict[str, Any]) -> list[str | None]:
    """Where a baseline made by `hoststate rebaseline` came from: what it replaces, which findings were accepted."""
    r = _table(get(snap, ("hoststate", "rebaseline")))
    if not r:
        return []
    at = r.get("at")
    lines: list[str | None] = [
        _line("replaces", f"{r.get('replaces')} ({r.get('replaces_digest')})"),
        _line("made from", r.get("from")),
        _line("accepted by", f"{r.get('by')} at {_fmt(at)}"),
        _line("accept patterns", r.get("accept")),
        _line("accepted findings", f"{len(r.get('accepted') or [])} ({_counts(r.get('counts'))} in all)"),
    ]
    return lines + list(_by_rule(r.get("accepted")))


def _guard(snap: dict[str, Any]) -> list[str | None]:
    """A guarded run's saved snapshot (--save-current): the baseline, the verdict, what was accepted or refused."""
    g = _table(snap.get("guard"))
    if not g:
        return []
    lines: list[str | None] = [
        _line("baseline", f"{g.get('baseline')} ({g.get('baseline_digest')})"),
        _line("verdict", f"{g.get('verdict')} ({_counts(g.get('counts'))})"),
        _line("accept patterns", g.get("accept")),
        _line("command", " ".join(map(str, g.get("command") or [])) or None),
    ]
    for key in ("accepted", "refused"):
        if g.get(key):
            lines.append(_line(key, f"{len(g[key])} invalidating finding(s)"))
            lines.extend(_by_rule(g[key]))
    return lines


SECTIONS = (("system", _system), ("dsa", _dsa), ("gpu", _gpu), ("vllm", _vllm))


def render_summary(snap: dict[str, Any], source: str = "") -> str:
    meta = snap["hoststate"]
    out = [
        f"{source or 'snapshot'}: {meta.get('hostname', '?')}"
        + (f" [{meta['label']}]" if meta.get("label") else "")
        + f" taken {meta['taken_at'].isoformat()}",
        f"  digest {meta['digest']}",
        "collectors:",
    ]
    for name, entry in _table(snap.get("collectors")).items():
        reason = f"  ({entry['reason']})" if entry.get("reason") else ""
        unread = described(entry.get("unreadable"))
        out.append(f"  {name:<13} {entry.get('status')}{unread}{reason}")
    for title, render in (("rebaseline (this baseline replaces another):", _rebaseline),
                          ("guard (this snapshot is a guarded run's):", _guard)):
        lines = [line for line in render(snap) if line]
        if lines:
            out.append(title)
            out.extend(lines)
    for name, render in SECTIONS:
        if name in snap:
            lines = [line for line in render(snap) if line]
            if lines:
                out.append(f"{name}:")
                out.extend(lines)
    packages = _table(snap.get("packages"))
    if packages:
        out.append("packages (hoststate's own interpreter):")
        items = [f"{k} {v}" for k, v in sorted(packages.items()) if isinstance(v, str)]
        line = " "
        for item in items:
            if cells(line) + cells(item) + 2 > WIDTH and line.strip():
                out.append(line.rstrip(","))
                line = " "
            line += f" {item},"
        out.append(line.rstrip(","))
    # Values come from the host and its users: escape controls so none can fake a line or drive the terminal; a
    # long line wraps (indented under its value), nothing is cut.
    return "\n".join(part for line in out for part in fit([safe(line)], WIDTH, 25))


def render_json(snap: dict[str, Any], source: str = "") -> str:
    """The snapshot as JSON (TOML's dates as ISO text), keys sorted."""
    return json.dumps(jsonable(snap), indent=2, sort_keys=True)


#: format -> renderer (``show --format``).
RENDERERS: dict[str, Callable[[dict[str, Any], str], str]] = {"text": render_summary, "json": render_json}


def render(snap: dict[str, Any], fmt: str, source: str = "") -> str:
    """``snap`` in ``fmt`` (text or json), without a final newline."""
    renderer = RENDERERS.get(fmt)
    if renderer is None:
        raise ValueError(f"unknown format {fmt!r} (one of {', '.join(RENDERERS)})")
    return renderer(snap, source)
