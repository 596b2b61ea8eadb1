"""The run verdict: ``clean``, ``unwatched``, ``degraded`` or ``invalid`` under thresholds that are data
(judge_rules.toml); ``unwatched``: nothing went wrong that could be seen, but no GPU was sampled.

A rule with ``baseline = true`` compares against the baseline run's own value, so a host that is power-capped
all the time is clean when its baseline was too. A ``--watch-rules`` file of ``[[rule]]`` tables replaces rules
by metric; both are read by one loader (:func:`load_rules`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from hoststate.errors import InputError
from hoststate.run.summary import _num

#: From best to worst; a run takes the worst verdict of the rules that fire.
VERDICTS = ("clean", "unwatched", "degraded", "invalid")


class Rule(NamedTuple):
    """One threshold: ``metric`` above ``limit`` (above the baseline run's value plus ``limit`` when ``baseline``)
    makes the run ``verdict``. ``needs_baseline``: judged only against a baseline run (a normal state on some
    hosts, like a power cap under load)."""

    metric: str
    verdict: str
    limit: float
    reason: str
    baseline: bool = False
    needs_baseline: bool = False
    #: Where the limit comes from (NVIDIA's documentation or code, a measurement in this repository).
    source: str = ""


def _rules_of(data: Mapping[str, Any], name: str) -> list[Rule]:
    rules = []
    for i, entry in enumerate(data.get("rule", [])):
        try:
            rule = Rule(metric=str(entry["metric"]), verdict=str(entry["verdict"]), limit=float(entry["limit"]),
                        reason=str(entry.get("reason", entry["metric"])), baseline=bool(entry.get("baseline", False)),
                        needs_baseline=bool(entry.get("needs_baseline", False)),
                        source=str(entry.get("source", "")))
        except (KeyError, TypeError, ValueError) as err:
            raise InputError(f"{name}: rule {i + 1}: needs metric, verdict and a numeric limit ({err})") from err
        if rule.verdict not in VERDICTS or not math.isfinite(rule.limit):
            raise InputError(f"{name}: rule {i + 1}: verdict must be one of {', '.join(VERDICTS)}; limit finite")
        rules.append(rule)
    return rules


def _read(path: str) -> Mapping[str, Any]:
    from hoststate.io import read_input
    from hoststate.snapshot import toml_loads

    try:
        return toml_loads(read_input(path, max_bytes=1 << 20, what="watch rules").decode("utf-8"))
    except InputError:
        raise
    except Exception as err:
        raise InputError(f"{path}: watch rules are not valid TOML: {err}") from err


@functools.cache
def shipped_rules() -> tuple[Rule, ...]:
    """The shipped thresholds, one per metric (hoststate/run/judge_rules.toml; docs/watch.md says why each), read
    on first use: a guard that watches nothing never parses them."""
    from importlib.resources import files

    from hoststate.snapshot import toml_loads

    return tuple(_rules_of(toml_loads((files("hoststate.run") / "judge_rules.toml").read_text("utf-8")),
                           "judge_rules.toml"))


def __getattr__(name: str) -> Any:
    """``RULES``: :func:`shipped_rules`, read when first asked for."""
    if name == "RULES":
        return shipped_rules()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def load_rules(path: str | None, base: Sequence[Rule] | None = None) -> tuple[Rule, ...]:
    """``base`` (the shipped rules when None) with the ``[[rule]]`` tables of a TOML file replacing (or adding)
    rules by metric."""
    base = shipped_rules() if base is None else base
    if not path:
        return tuple(base)
    rules = {r.metric: r for r in base}
    rules.update((r.metric, r) for r in _rules_of(_read(path), path))
    return tuple(rules.values())


def _shown(metric: str, value: float) -> str:
    if metric.startswith("share.") or metric.endswith("_share"):
        return f"{value * 100:.1f} %"
    return f"{_num(value)}"


def judge(metrics_now: Mapping[str, Any], baseline: Mapping[str, Any] | None = None,
          rules: Sequence[Rule] | None = None) -> tuple[str, list[dict[str, Any]]]:
    """(verdict, reasons): the worst verdict of the rules that fire (the shipped rules when None), each reason
    naming the metric, its value and the baseline's. Metrics absent from the run are not judged; ``baseline`` is
    the baseline run's metrics."""
    rules = shipped_rules() if rules is None else rules
    reasons: list[dict[str, Any]] = []
    for rule in rules:
        value = metrics_now.get(rule.metric)
        if value is None or rule.verdict == "clean":
            continue
        base = baseline.get(rule.metric) if (baseline and rule.baseline) else None
        if rule.needs_baseline and base is None:
            continue
        allowed = (base or 0) + rule.limit
        if value > allowed:
            text = f"{rule.reason}: {_shown(rule.metric, value)}"
            text += f", baseline {_shown(rule.metric, base)}" if base is not None else ""
            reasons.append({"verdict": rule.verdict, "metric": rule.metric, "value": value, "text": text,
                            **({"baseline": base} if base is not None else {})})
    reasons.sort(key=lambda r: -VERDICTS.index(r["verdict"]))
    verdict = reasons[0]["verdict"] if reasons else "clean"
    return verdict, reasons


def baseline_metrics(snap: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The metrics of a baseline taken with ``--watch`` (its ``[guard.watch]`` table), or None."""
    table = (snap or {}).get("guard", {})
    watch = table.get("watch") if isinstance(table, Mapping) else None
    found = watch.get("metrics") if isinstance(watch, Mapping) else None
    return dict(found) if isinstance(found, Mapping) else None
