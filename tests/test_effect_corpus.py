"""The default policy against a corpus of single-change snapshot pairs (tests/data/effect_corpus.toml), each with
the verdict a benchmark engineer gives it, written before the rating: the verdicts must agree at least 97 % of the
time, never fail open (an engineer's "invalidating" rated below it) and never refuse what the engineer calls
harmless ("clean" or "info" rated invalidating). The pairs are taken with hoststate's own
collectors from real fixture trees, NVML replays of the real H200 recordings and real processes
(tests/effect_corpus.py). Run ``python -m tests.effect_corpus`` for the full report."""

from __future__ import annotations

import collections

import pytest

from tests.effect_corpus import SEVERE, cases, rate_all, report

FAMILIES = {"gpu", "p2p", "cpu-os", "placement", "libraries", "env", "env-vllm", "env-process", "packages", "dsa",
            "accel-config"}


@pytest.fixture(scope="module")
def rated():
    return rate_all()


def test_the_corpus_is_large_and_spans_every_fact_family():
    data = cases()
    assert len(data) >= 150
    counts = collections.Counter(c["family"] for c in data)
    assert set(counts) >= FAMILIES, counts
    assert all(c["expect"] in SEVERE and len(c["why"]) >= 5 for c in data)
    assert len({(c["family"], c["change"]) for c in data}) == len(data)
    assert set(collections.Counter(c["expect"] for c in data)) == set(SEVERE)  # every verdict occurs


def test_the_verdicts_agree_and_never_fail_open(rated):
    summary = report(rated)
    print(summary)
    agree = sum(r.agrees for r in rated) / len(rated)
    assert not [r for r in rated if r.fails_open], summary
    assert not [r for r in rated if r.refuses_harmless], summary
    assert agree >= 0.97, summary


def test_every_pair_differs_in_what_was_changed(rated):
    """A pair whose edit did not reach a snapshot would agree with "clean" for nothing: every case expected to
    be found has findings, and the clean ones are clean for a reason the policy gives (ignore) or no change."""
    for r in rated:
        if r.case["expect"] != "clean":
            assert r.findings, r.case["change"]
