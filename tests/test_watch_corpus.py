"""Watched runs by effect: the runs of fixtures/watch/corpus.toml, each a real H200 trace changed in one way, with
the verdict a benchmark engineer gives it written beside it first, replayed through the sampler and judged by the
shipped rules. The agreement must be >= 95 %, with no run rated better than it is where it matters most: an
invalid run judged anything else, or a degraded one judged clean."""

from __future__ import annotations

import copy
import json
import threading
import time
from typing import Any

import pytest

from hoststate.run import sampler as sampler_mod
from hoststate.run.judge import VERDICTS, baseline_metrics, judge
from hoststate.run.sampler import Sampler, TraceSource
from hoststate.snapshot import toml_loads
from tests.conftest import FIXTURES

WATCH = FIXTURES / "watch"
CASES = toml_loads((WATCH / "corpus.toml").read_text())["case"]
NVLINK = ("nvlink_crc_flit_errors", "nvlink_crc_data_errors", "nvlink_replay_errors", "nvlink_recovery_errors")


def _trace(name: str) -> dict[str, Any]:
    return json.loads((WATCH / f"h200-{name}.json").read_text())


def _edit(trace: dict[str, Any], edit: dict[str, Any], extra: dict[str, Any]) -> None:
    samples, counters = trace["samples"], trace["counters"]
    if "reasons" in edit:
        n = round(len(samples) * edit["reasons"]["share"])
        for _t, rows in samples[:n]:
            for row in rows:
                row[0] = edit["reasons"]["bits"]
    if "counter" in edit:
        field, delta = edit["counter"]["field"], edit["counter"]["delta"]
        for k, (_t, rows) in enumerate(counters):
            for row in rows:
                base = row.get(field) if isinstance(row.get(field), int | float) else 0
                if field in NVLINK:  # the recorded GPU reads no NVLink counter: the changed one reads them
                    for other in NVLINK:
                        row.setdefault(other, 0) if isinstance(row.get(other), int | float) else row.update({other: 0})
                        trace.get("unreadable", {}).pop(f"0/{other}", None)
                row[field] = base + (delta if k == len(counters) - 1 else 0)
    if "event" in edit:
        middle = samples[len(samples) // 2][0]
        trace.setdefault("events", []).append([middle, 0, edit["event"]["type"], edit["event"]["data"]])
    if "pid" in edit:
        for _t, rows in samples[edit["pid"]["from"]:]:
            for row in rows:
                row[5] = sorted(set(row[5] or []) | {edit["pid"]["pid"]})
    if "unreadable" in edit:
        trace.setdefault("unreadable", {})[edit["unreadable"]["key"]] = edit["unreadable"]["error"]
    extra.update(edit.get("metrics", {}))


class _Stuck(TraceSource):
    """A source whose fourth cheap read never returns (until released): an NVML call that hung."""

    def __init__(self, trace: dict[str, Any]):
        super().__init__(trace)
        self.calls, self.release = 0, threading.Event()

    def cheap(self) -> tuple[float, list[list[Any]]]:
        self.calls += 1
        if self.calls >= 4:
            self.release.wait()
        return super().cheap()


def _summary(case: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    trace = copy.deepcopy(_trace(case["trace"]))
    trace.pop("own_pids", None)  # the case names the run's own processes itself
    extra: dict[str, Any] = {}
    edits = case.get("edits", [])
    for edit in edits:
        _edit(trace, edit, extra)
    own = set(case.get("own", []))
    if any(e.get("no_gpu") for e in edits):
        sampler = Sampler(None, root=str(WATCH))
    elif any(e.get("stuck") for e in edits):
        monkeypatch.setattr(sampler_mod, "STOP_TIMEOUT", 0.3)
        source = _Stuck(trace)
        sampler = Sampler(source, interval=0.01, root=str(WATCH), own_pids=lambda: own).start()
        while source.calls < 4:
            time.sleep(0.01)
        summary = sampler.stop().summary()
        source.release.set()
        return summary
    else:
        sampler = Sampler(TraceSource(trace), interval=30.0, root=str(WATCH), own_pids=lambda: own)
    summary = sampler.start().stop().summary()
    summary["metrics"].update(extra)
    return summary


def _verdict(case: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> str:
    summary = _summary(case, monkeypatch)
    base = None
    if case.get("baseline"):
        base_case = {"trace": case["baseline"], "own": case.get("own", [])}
        base_summary = _summary(base_case, monkeypatch)
        base = baseline_metrics({"guard": {"watch": {"metrics": base_summary["metrics"]}}})
    return judge(summary["metrics"], base)[0]


def test_the_corpus_is_large_and_covers_every_verdict() -> None:
    assert len(CASES) >= 40
    assert {c["expect"] for c in CASES} == set(VERDICTS)
    assert all(c.get("why") for c in CASES) and len({c["name"] for c in CASES}) == len(CASES)


def test_run_verdicts_agree_with_an_engineers(monkeypatch: pytest.MonkeyPatch) -> None:
    got = {c["name"]: _verdict(c, monkeypatch) for c in CASES}
    wrong = [f"{c['name']}: expected {c['expect']} ({c['why']}), judged {got[c['name']]}" for c in CASES
             if got[c["name"]] != c["expect"]]
    agreement = 1 - len(wrong) / len(CASES)
    assert agreement >= 0.95, "\n".join(wrong)
    # never better than it is: an invalid run judged anything else, or a degraded one clean
    rank = VERDICTS.index
    worse = [c["name"] for c in CASES if rank(got[c["name"]]) < rank(c["expect"]) and
             (c["expect"] == "invalid" or got[c["name"]] == "clean")]
    assert not worse, worse
