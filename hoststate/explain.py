"""Explain a sweep: which host change moved which result.

Input is a :class:`hoststate.results.ResultsReport` whose groups (one a host state) carry the invalidating
findings against the reference. Each group's findings are split by subsystem (vLLM: by server) into *changes*; a
change is the same in two groups when the same paths moved to the same values. Changes present in exactly the
same groups cannot be told apart by this sweep: they form one *unit*, and the text says which cell would part
them. A unit's effect on a metric is read between two host states that differ by that unit alone (the reference
and a group with one change, or a group with X and one with X and Y), never guessed from a group that changed
more. Only changes found between the groups' snapshots are ever named. Pure: no I/O.

A sweep varies the benchmark on purpose (request rate, concurrency, the server's arguments): two host states are
compared only through cells of the same benchmark settings (:func:`setting_of`), setting by setting, so a host
change that coincides with a sweep step is never credited with what the step moved. A sweep's warmup
(:func:`is_warmup`) is checked like any cell but measures nothing.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

# -- groups and a metric of a result ---------------------------------------------------------------------------


def group_label(index: int) -> str:
    """A, B, ... Z, AA, AB: the names groups go by in the text and in the explanation."""
    label = ""
    index += 1
    while index:
        index, rest = divmod(index - 1, 26)
        label = chr(ord("A") + rest) + label
    return label


def metric_value(result: Mapping[str, Any], name: str) -> float | None:
    """The number at key ``name`` of a result (a dotted path when no key has the whole name); None when absent,
    not a number (booleans are not), or not finite."""
    value: Any = result.get(name) if name in result else result
    if name not in result:
        for key in name.split("."):
            value = value.get(key) if isinstance(value, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


#: The keys of a ``vllm bench serve`` result that say what was run, not what was measured (vllm/benchmarks/serve.py
#: ``result_json``, 0.10 to 0.33; ``label`` and ``date`` name the run, not its load).
SETTINGS = ("endpoint_type", "backend", "model_id", "tokenizer_id", "num_prompts", "request_rate", "burstiness",
            "max_concurrency", "ramp_up_strategy", "ramp_up_start_rps", "ramp_up_end_rps")


def is_warmup(path: str, result: Mapping[str, Any]) -> bool:
    """A ``vllm bench sweep serve --warmup-num-prompts`` warmup: written as ``warmup.json`` with run_number -1
    (vllm/benchmarks/sweep/serve.py ``run_comb``) and left out of the sweep's summary.json and summary.csv."""
    number = result.get("run_number")
    return os.path.basename(path) == "warmup.json" or (
        isinstance(number, int) and not isinstance(number, bool) and number < 0)


def setting_of(path: str, result: Mapping[str, Any]) -> str:
    """What a cell ran, as a key: the folders a ``vllm bench sweep`` experiment made for it (``SERVE-...``,
    ``BENCH-...``, ``WL-...``: the serve and bench overrides; an SLA iteration's ``request_rate=N``:
    hoststate.run.sweep.sweep_levels) and the result's own settings (:data:`SETTINGS`). Cells of one key differ
    only by host state and chance."""
    from hoststate.run.sweep import sweep_levels

    return json.dumps([sweep_levels(path), [result.get(k) for k in SETTINGS]], sort_keys=True, default=str)


def stats(values: Sequence[float]) -> dict[str, Any]:
    """n, median, min, max of the cells' values (None without any)."""
    if not values:
        return {"n": 0, "median": None, "min": None, "max": None}
    return {"n": len(values), "median": statistics.median(values), "min": min(values), "max": max(values)}


def shift_pct(old: float | None, new: float | None) -> float | None:
    """The relative change from ``old`` to ``new`` in percent, one decimal; None when either is missing or old is 0."""
    if old is None or new is None or old == 0:
        return None
    return round((new - old) / abs(old) * 100, 1)


def moved(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool | None:
    """True when the cells' ranges do not overlap (the shift is larger than either group's spread)."""
    if not a["n"] or not b["n"]:
        return None
    return bool(b["min"] > a["max"] or b["max"] < a["min"])


def number(value: float | None) -> str:
    """A metric as read on a screen: whole from 100 up, else three significant digits."""
    if value is None:
        return "n/a"
    if abs(value) >= 100:
        return f"{value:.0f}"
    return f"{value:.3g}"


def shift_text(name: str, old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """``output_throughput 1005 -> 1355 (+34.8 %)``, with ``within the cells' spread`` when the ranges overlap."""
    pct = shift_pct(old["median"], new["median"])
    within = ", within the cells' spread" if moved(old, new) is False else ""
    tail = f" ({pct:+.1f} %{within})" if pct is not None else (f" ({within[2:]})" if within else "")
    return f"{name} {number(old['median'])} -> {number(new['median'])}{tail}"


def compare(name: str, old: Mapping[str, Sequence[float]], new: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    """``name`` from one host state's cells to another's (each: benchmark setting -> values), read only where a
    setting ran on both. One shared setting: the medians and their shift. Several: each setting's shift, their
    median, and ``moved`` only when every setting moved the same way (``from``/``to`` are None: a median over
    settings would weigh whichever ran more cells). None shared: nothing is claimed."""
    shared = sorted(k for k in old if old[k] and new.get(k))
    if not shared:
        return {"from": None, "to": None, "shift_pct": None, "moved": None, "settings": 0,
                "text": f"{name}: no cell of the same benchmark settings ran on both host states"}
    if len(shared) == 1:
        a, b = stats(old[shared[0]]), stats(new[shared[0]])
        return {"from": a["median"], "to": b["median"], "shift_pct": shift_pct(a["median"], b["median"]),
                "moved": moved(a, b), "settings": 1, "text": shift_text(name, a, b)}
    pairs = [(stats(old[k]), stats(new[k])) for k in shared]
    shifts = [p for p in (shift_pct(a["median"], b["median"]) for a, b in pairs) if p is not None]
    pct = round(statistics.median(shifts), 1) if shifts else None
    signs = {b["median"] > a["median"] for a, b in pairs}
    went = all(moved(a, b) for a, b in pairs) and len(signs) == 1
    within = "" if went else ", within the cells' spread in some"
    head = f"{pct:+.1f} %" if pct is not None else "n/a"
    return {"from": None, "to": None, "shift_pct": pct, "moved": went, "settings": len(shared),
            "text": f"{name} {head} (median over {len(shared)} benchmark settings{within})"}


# -- changes and units --------------------------------------------------------------------------------------------


def _part(path: str) -> str:
    from hoststate.paths import split_path

    try:
        parts = split_path(path)
    except ValueError:
        return path
    name = {"accel_config": "accel-config", "hoststate": "host"}.get(parts[0], parts[0])
    if name == "vllm" and len(parts) > 2 and parts[1] == "servers":
        return f"vllm :{parts[2]}"
    return name


def changes_of(findings: Sequence[Any]) -> list[tuple[str, str, frozenset[str], int]]:
    """(subsystem, summary text, identity, findings) for each subsystem the findings touch, most important first."""
    from hoststate.render.findings import importance
    from hoststate.render.summary import summarize

    parts: dict[str, list[Any]] = {}
    for f in sorted(findings, key=importance):
        parts.setdefault(_part(f.path), []).append(f)
    out = []
    for name, group in parts.items():
        identity = frozenset(json.dumps([f.path, f.change, f.new], sort_keys=True, default=str) for f in group)
        out.append((name, summarize(group)[0].text, identity, len(group)))
    return out


def _units(groups: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, set[str]]]:
    """The changes (numbered in order of importance) and each group's set of change ids."""
    changes: list[dict[str, Any]] = []
    ids: dict[tuple[str, frozenset[str]], str] = {}
    have: dict[str, set[str]] = {}
    for g in groups:
        have[g["label"]] = set()
        for name, text, identity, n in g["changes"]:
            cid = ids.get((name, identity))
            if cid is None:
                cid = ids[(name, identity)] = f"c{len(changes) + 1}"
                changes.append({"id": cid, "subsystem": name, "text": text, "findings": n, "groups": []})
            changes[int(cid[1:]) - 1]["groups"].append(g["label"])
            have[g["label"]].add(cid)
    return changes, have


def _pairs(unit: frozenset[str], have: Mapping[str, set[str]]) -> list[tuple[str, str]]:
    """(from, to) group pairs whose change sets differ by exactly ``unit``."""
    return [(a, b) for a in have for b in have if unit.isdisjoint(have[a]) and have[b] == have[a] | unit]


def _would(unit: Sequence[str], groups: Sequence[str], have: Mapping[str, set[str]],
           changes: Mapping[str, Mapping[str, Any]]) -> str:
    """Which cell would measure ``unit``: one with one of its changes and not the other, or a group's host state
    without it."""
    where = groups[0]
    if len(unit) > 1:
        names = [changes[c]["subsystem"] for c in unit]
        if len(unit) == 2:
            return (f"a cell as in {where} with the {names[0]} change and without the {names[1]} one (or the "
                    "reverse) would separate them")
        return f"cells as in {where} with each of these changes alone ({', '.join(names)}) would separate them"
    rest = sorted(have[where] - set(unit), key=lambda c: int(c[1:]))
    if not rest:
        return "a cell on the reference host state would measure it"
    others = ", ".join(changes[c]["subsystem"] for c in rest)
    return f"a cell as in {where} without it (with the {others} change only) would measure it"


def _effects(unit: frozenset[str], have: Mapping[str, set[str]], by_setting: Mapping[str, Mapping[str, Any]],
             metrics: Sequence[str]) -> list[dict[str, Any]]:
    return [{"from": a, "to": b, "metrics": {m: compare(m, by_setting[a][m], by_setting[b][m]) for m in metrics}}
            for a, b in _pairs(unit, have)]


def explain(report: Any, metrics: Sequence[str]) -> dict[str, Any]:
    """The metrics of each group, their shift against the reference group, the changes that separate the
    groups and, per unit of changes that always moved together, its effect where the sweep can measure it.
    InputError when no verified cell has a metric (a misspelt name must not read as "no change")."""
    from hoststate.errors import InputError

    ref_key = (report.reference.digest, True)
    groups: list[dict[str, Any]] = []
    metric_stats: dict[str, dict[str, dict[str, Any]]] = {}
    by_setting: dict[str, dict[str, dict[str, list[float]]]] = {}  # group -> metric -> setting -> values
    for i, g in enumerate(report.groups):
        label = group_label(i)
        measured = [c for c in g.cells if not is_warmup(c.path, c.result)]
        values = {m: [(c.path, setting_of(c.path, c.result), metric_value(c.result, m)) for c in measured]
                  for m in metrics}
        metric_stats[label] = {m: {**stats([v for _, _, v in vs if v is not None]),
                                   "missing": [p for p, _, v in vs if v is None]} for m, vs in values.items()}
        by_setting[label] = {m: {} for m in metrics}
        for m, vs in values.items():
            for _, key, v in vs:
                if v is not None:
                    by_setting[label][m].setdefault(key, []).append(v)
        groups.append({"label": label, "reference": g.key == ref_key, "changes": changes_of(g.findings)})
    for m in metrics:
        if not any(s[m]["n"] for s in metric_stats.values()):
            raise InputError(f"--metric {m}: no verified cell has a number under that key")
    ref_label = next((g["label"] for g in groups if g["reference"]), None)
    for g in groups:
        for m in metrics:
            s = metric_stats[g["label"]][m]
            against = compare(m, by_setting[ref_label][m], by_setting[g["label"]][m]) \
                if ref_label and not g["reference"] else None
            s["shift_pct"] = against["shift_pct"] if against else None
            s["moved"] = against["moved"] if against else None
            s["shift_text"] = against["text"] if against else None
    changes, have = _units(groups)
    return {"metrics": list(metrics), "reference_group": ref_label,
            "groups": [{"label": g["label"], "reference": g["reference"], "metrics": metric_stats[g["label"]],
                        "changes": sorted(have[g["label"]], key=lambda c: int(c[1:]))} for g in groups],
            "changes": changes, "units": _unit_list(changes, have, by_setting, metrics)}


def _unit_list(changes: Sequence[Mapping[str, Any]], have: Mapping[str, set[str]],
               by_setting: Mapping[str, Mapping[str, Any]], metrics: Sequence[str]) -> list[dict[str, Any]]:
    """Changes with the same groups as one unit, in the order of their most important change."""
    by_groups: dict[tuple[str, ...], list[str]] = {}
    for c in changes:
        by_groups.setdefault(tuple(c["groups"]), []).append(c["id"])
    by_id = {c["id"]: c for c in changes}
    units = []
    for where, ids in by_groups.items():
        unit = frozenset(ids)
        everywhere = len(where) == len(have)
        effects = [] if everywhere else _effects(unit, have, by_setting, metrics)
        units.append({
            "changes": ids, "groups": list(where), "together": len(ids) > 1, "in_every_group": everywhere,
            "effects": effects,
            "would_separate": None if effects and len(ids) == 1 else
            ("every cell of the sweep has it: only a cell on the reference host state would measure it"
             if everywhere else _would(ids, list(where), have, by_id)),
        })
    return units


# -- text ---------------------------------------------------------------------------------------------------------


def _range(s: Mapping[str, Any]) -> str:
    if not s["n"]:
        return "no value"
    spread = f", {number(s['min'])}-{number(s['max'])}" if s["n"] > 1 else ""
    return f"{s['n']} cell(s){spread}"


def _metric_lines(exp: Mapping[str, Any]) -> list[str]:
    from hoststate.render.text import clip, safe

    lines = []
    for m in exp["metrics"]:
        lines.append(clip(f"{safe(m)} by host state:", 120))
        for g in exp["groups"]:
            s = g["metrics"][m]
            tag = "reference" if g["reference"] else ""
            shift = "  " + safe(s["shift_text"]) if s.get("shift_text") else ""
            missing = f", {len(s['missing'])} without it" if s["missing"] and s["n"] else ""
            lines.append(clip(f"  {g['label']:<3}{tag:<10} {number(s['median']):>10}   {_range(s)}{missing}{shift}",
                              120))
    return lines


def _unit_lines(exp: Mapping[str, Any]) -> list[str]:
    from hoststate.render.text import clip, safe

    by_id = {c["id"]: c for c in exp["changes"]}
    lines = ["what moved:"] if exp["units"] else []
    for u in exp["units"]:
        names = [safe(by_id[c]["text"]) for c in u["changes"]]
        if u["together"]:
            lines.append(clip(f"  these {len(names)} changes always came together (group {', '.join(u['groups'])}): "
                              "this sweep cannot separate them", 120))
            lines += [clip(f"    {n}", 120) for n in names]
        else:
            lines.append(clip(f"  {names[0]}", 120))
        for e in u["effects"]:
            lines += [clip(f"      {safe(e['metrics'][m]['text'])}  ({e['from']} -> {e['to']})", 120)
                      for m in exp["metrics"]]
        if u["would_separate"]:
            lines.append(clip(f"      {safe(u['would_separate'])}", 120))
    return lines


def explanation_lines(exp: Mapping[str, Any]) -> list[str]:
    """The explanation as text: each metric by host state, then what moved (the groups' findings are listed
    under the groups already)."""
    return _metric_lines(exp) + _unit_lines(exp)


def explanation_markdown(exp: Mapping[str, Any]) -> list[str]:
    """The same as Markdown: one table a metric, then what moved as bullets."""
    from hoststate.render.text import md_code, md_text

    by_id = {c["id"]: c for c in exp["changes"]}
    out: list[str] = []
    for m in exp["metrics"]:
        out += [f"| group | {md_code(m)} median | cells | shift |", "|---|---|---|---|"]
        for g in exp["groups"]:
            s = g["metrics"][m]
            shift = "reference" if g["reference"] else md_text(s["shift_text"]) if s.get("shift_text") else ""
            out.append(f"| {g['label']} | {number(s['median'])} | {md_text(_range(s))} | {shift} |")
        out.append("")
    for u in exp["units"]:
        names = "; ".join(md_text(by_id[c]["text"]) for c in u["changes"])
        head = "cannot be separated by this sweep: " if u["together"] else ""
        effects = ", ".join(f"{md_text(e['metrics'][m]['text'])} ({e['from']} -> {e['to']})" for e in u["effects"]
                            for m in exp["metrics"])
        out.append(f"- {head}{names}" + (f": {effects}" if effects else "")
                   + (f" ({md_text(u['would_separate'])})" if u["would_separate"] else ""))
    return out
