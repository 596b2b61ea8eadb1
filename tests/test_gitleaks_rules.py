"""Coverage by generation: values generated from each gitleaks rule's own regex never survive a snapshot.

hoststate/gitleaks_rules.toml holds gitleaks' published rules (the version is in the table). For every rule that
hoststate runs, hypothesis' ``from_regex`` generates values that match the rule's regex (translated to Python's
re by hoststate.gitleaks.to_python, nothing else changed), and each value is planted in every channel of one
snapshot: ``--vllm-cmd`` option values (``--served-model-name=V``) and a JSON option (``--additional-config``), the
command's ``VAR=value`` prefix (the server's environment), the operator's environment (the env collector), a
vLLM ``non-default args:`` log line, and free text (``--label``). No rule's secret may be found in any string of
the snapshot, raw or as JSON writes it. A real server process carrying the values in its argv and environment
is snapshotted through the CLI too.

A value counts as a gitleaks finding as gitleaks decides (detect.go): one of the rule's keywords occurs in it,
and its secret is the rule's secret group (hoststate.gitleaks.Rule.secret_span). A value whose secret also
stands outside the secret (``000...`` in a prefix), or in the snapshot of the same command without the values,
could not show a leak and is not planted.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shlex
import subprocess
import sys
from typing import Any
from unittest import mock

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from hoststate import capture, gitleaks, snapshot
from hoststate.collectors import Context
from hoststate.redact import REDACTED
from tests.conftest import PYTHONPATH, REPO

ROWS: list[dict[str, Any]] = gitleaks.table()["rule"]
RUN: tuple[dict[str, Any], ...] = gitleaks.rows()
#: argv and the environment cannot hold NUL; everything else (any other code point) may be generated.
ALPHABET = st.characters(codec="utf-8", exclude_characters="\x00")
#: Examples per group of rules and run (each is one snapshot of every channel, holding a value of each rule).
EXAMPLES = 5
#: No shrinking: a failure already names the rule, its value and where the secret was found.
PHASES = (Phase.explicit, Phase.reuse, Phase.generate)
#: Rules planted together in one snapshot (hypothesis generates one value of each per example).
GROUP = 8
GROUPS = [RUN[i:i + GROUP] for i in range(0, len(RUN), GROUP)]


def _faithful(row: dict[str, Any]) -> re.Pattern[str]:
    """The rule's regex in Python, as published (not the scan hoststate runs, which drops the lazy head)."""
    return re.compile(gitleaks.to_python(row["regex"]))


def _values(rows: tuple[dict[str, Any], ...] = RUN) -> st.SearchStrategy[dict[str, str]]:
    """One generated value per rule of ``rows``, by rule id."""
    return st.fixed_dictionaries({row["id"]: st.from_regex(_faithful(row), fullmatch=True, alphabet=ALPHABET)
                                  for row in rows})


def _secret(row: dict[str, Any], value: str) -> tuple[str, str] | None:
    """(secret, the value without it) for a value gitleaks would report, else None."""
    folded = value.casefold()
    if not any(k in folded for k in gitleaks.keywords(row)):
        return None  # gitleaks runs a rule only where one of its keywords is
    m = _faithful(row).fullmatch(value)
    assert m is not None, (row["id"], value)
    start, end = gitleaks.compile_rule(row).secret_span(m)
    return value[start:end], value[:start] + "\x00" + value[end:]


def _row(rule_id: str) -> dict[str, Any]:
    return next(r for r in RUN if r["id"] == rule_id)


def _strings(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (str(k), *_strings(v))]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return [value] if isinstance(value, str) else []


def _forms(secret: str) -> tuple[str, ...]:
    """How a surviving secret would be spelled in a snapshot string: as is, or escaped inside a JSON text."""
    return (secret, json.dumps(secret, ensure_ascii=False)[1:-1], json.dumps(secret)[1:-1])


def _log_line(values: list[str]) -> str:
    args = {"model_tag": "m", "model": "m", "served_model_name": values}
    args.update({f"note_{i}": v for i, v in enumerate(values)})
    return f"(APIServer pid=7) INFO 01-01 00:00:00 [utils.py:233] non-default args: {args!r}\n"


def _snap(values: list[str], log_path: str) -> dict[str, Any]:
    """One in-process snapshot (vllm and env collectors, as snap runs them) with ``values`` in every channel."""
    with open(log_path, "w", encoding="utf-8") as f:
        f.write("(APIServer pid=7) INFO 01-01 00:00:00 [api_server.py:1839] vLLM API server version 0.11.1\n")
        f.write(_log_line(values))
    prefix = [f"VLLM_NOTE_{i}={v}" for i, v in enumerate(values)]
    options = [f"--served-model-name={v}" for v in values]
    config = json.dumps({f"note_{i}": v for i, v in enumerate(values)})  # \uXXXX escapes, as json.dumps writes
    cmd = shlex.join([*prefix, "vllm", "serve", "m", *options, f"--additional-config={config}"])
    operator = {f"VLLM_OPNOTE_{i}": v for i, v in enumerate(values)}
    with mock.patch.dict(os.environ, operator):
        snap = capture.collect(Context(vllm_cmd=cmd, vllm_log=log_path, vllm_version="0.11.1"), ("vllm", "env"),
                               label=" ".join(values))
    return snapshot.loads(snapshot.to_toml(snap))


def _planted(values: dict[str, str], baseline: list[str]) -> dict[str, tuple[str, str]]:
    """rule id -> (value, secret) for the values that can show a leak (see the module docstring)."""
    found = {rid: (v, s) for rid, v in values.items() if (s := _secret(_row(rid.split(" #")[0]), v))}
    kept = "\x00".join([*(rest for _v, (_s, rest) in found.values()), *baseline])
    return {rid: (v, s) for rid, (v, (s, _rest)) in found.items()
            if len(s) >= 4 and s != REDACTED and not any(form in kept for form in _forms(s))}


def _leaks(snap: dict[str, Any], planted: dict[str, tuple[str, str]]) -> dict[str, list[str]]:
    strings = _strings(snap)
    leaks = {}
    for rid, (_value, secret) in planted.items():
        where = [s[:200] for s in strings if any(form in s for form in _forms(secret))]
        if where:
            leaks[rid] = [secret[:120], *where[:3]]
    return leaks


@functools.cache
def _baseline(log: str) -> tuple[str, ...]:
    """The strings of a snapshot of the same command with one plain value: what a secret must not be part of."""
    return tuple(_strings(_snap(["x"], log)))


@pytest.mark.parametrize("rows", GROUPS, ids=[f"{g[0]['id']}..{g[-1]['id']}" for g in GROUPS])
def test_generated_values_of_every_rule_never_survive_a_snapshot(rows, tmp_path_factory):
    log = str(tmp_path_factory.getbasetemp() / "gitleaks-server.log")

    @settings(max_examples=EXAMPLES, deadline=None, phases=PHASES, suppress_health_check=list(HealthCheck))
    @given(values=_values(rows))
    def check(values):
        planted = _planted(values, list(_baseline(log)))
        snap = _snap([v for v, _s in planted.values()], log)
        # the values were read in every channel (each channel holds every value, redacted or not)
        server = snap["vllm"]
        assert len(server["argv"]) == 2 * len(planted) + 4, server["argv"]
        assert len(server["log"]["non_default_args"]) >= len(planted) + 2
        assert sum(k.startswith("VLLM_OPNOTE_") for k in snap["env"]) == len(planted)
        assert sum(k.startswith("VLLM_NOTE_") for k in server["env"]) == len(planted)
        leaks = _leaks(snap, planted)
        assert not leaks, json.dumps(leaks, indent=1, ensure_ascii=False)

    check()


def test_most_rules_are_planted_in_the_generated_snapshots():
    """The filter above keeps a test honest only if it rarely applies: most rules' first values are findings."""
    # The first of the two values the real-server test below draws (cached): derandomised, it is the value a draw of
    # one gives (the same for all 220 rules), so the rules' generation runs once for both tests.
    values = {row["id"]: _examples(row["id"], 2)[0] for row in RUN}
    planted = _planted(values, [])
    assert len(planted) >= 0.9 * len(RUN), sorted(set(values) - set(planted))


@functools.cache
def _examples(rule_id: str, count: int) -> tuple[str, ...]:
    """The first ``count`` values hypothesis generates for a rule (derandomised: the same ones every run)."""
    row = _row(rule_id)
    found: list[str] = []

    @settings(max_examples=count, deadline=None, database=None, derandomize=True, phases=PHASES,
              suppress_health_check=list(HealthCheck))
    @given(st.from_regex(_faithful(row), fullmatch=True, alphabet=ALPHABET))
    def draw(value):
        found.append(value)

    draw()
    return tuple(found[:count])


# -- a real server process, through the CLI ----------------------------------------------------------------------

SERVER = "import time\nprint('ready', flush=True)\ntime.sleep(120)\n"


def test_generated_values_in_a_real_servers_argv_and_environment_never_survive(tmp_path_factory):
    """Two generated values of every rule at once, in a real process's argv and environment, through the CLI."""
    values = {f"{row['id']} #{i}": v for row in RUN for i, v in enumerate(_examples(row["id"], 2))}
    tmp = tmp_path_factory.mktemp("server")
    pkg = tmp / "vllm" / "entrypoints" / "openai"
    pkg.mkdir(parents=True)
    for d in (tmp / "vllm", tmp / "vllm" / "entrypoints", pkg):
        (d / "__init__.py").write_text("")
    (pkg / "api_server.py").write_text(SERVER)
    planted = _planted(values, [])
    plain = [v for v, _s in planted.values()]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "PYTHONPATH": str(tmp),
           **{f"VLLM_NOTE_{i}": v for i, v in enumerate(plain)}}
    child = subprocess.Popen([sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", "m",
                              *(f"--served-model-name={v}" for v in plain)],
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        out = tmp / "snap.toml"
        proc = subprocess.run([sys.executable, "-m", "hoststate", "snap", "-o", str(out), "--only", "vllm",
                               "--vllm-pid", str(child.pid), "--vllm-version", "0.11.1"],
                              capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
                              env={**os.environ, "PYTHONPATH": PYTHONPATH})
    finally:
        child.kill()
        child.wait(timeout=30)
    assert proc.returncode == 0, proc.stderr[-2000:]
    snap = snapshot.loads(out.read_text())
    assert sum(k.startswith("VLLM_NOTE_") for k in snap["vllm"]["env"]) == len(plain)
    assert len(snap["vllm"]["argv"]) >= len(plain)
    leaks = _leaks({"snap": snap, "stderr": proc.stderr, "stdout": proc.stdout}, planted)
    assert not leaks, json.dumps(leaks, indent=1, ensure_ascii=False)


# -- the table and its translation -------------------------------------------------------------------------------


def test_the_table_is_one_gitleaks_release_with_every_rule():
    meta = gitleaks.table()
    assert re.fullmatch(r"gitleaks v\d+\.\d+\.\d+, config/gitleaks\.toml", meta["source"])
    assert re.fullmatch(r"[0-9a-f]{40}", meta["commit"])
    ids = [row["id"] for row in ROWS]
    assert len(ids) == len(set(ids)) >= 222
    left_out = {row["id"]: row["left_out"] for row in ROWS if "left_out" in row}
    assert set(left_out) == {"generic-api-key", "pkcs12-file"} and all(len(w) > 20 for w in left_out.values())
    assert len(RUN) == len(ROWS) - len(left_out)


@pytest.mark.parametrize("row", RUN, ids=[row["id"] for row in RUN])
def test_every_rule_translates_and_compiles_without_warnings(row, recwarn):
    """A new upstream row is redacted only if its regex translates; this fails first when it does not."""
    rule = gitleaks.compile_rule(row)
    _faithful(row)
    assert not recwarn.list, [str(w.message) for w in recwarn.list]
    assert rule.keywords, row["id"]


@pytest.mark.parametrize(("go", "matches", "misses"), [
    (r"(a(?i)b|c)", ["aB", "ab", "C", "c"], ["AB", "Ab"]),  # the flag ends with its group, in every branch
    (r"\b(SG\.(?i)[a-z]{3})x", ["SG.ABCx", "SG.abcx"], ["sg.abcx", "SG.abcX"]),
    (r"x(?i)y(?-i:Z)w", ["xYZW", "xyZw"], ["xyzw", "XyZw"]),
    (r"\b(pat[[:alnum:]]{3})\b", ["patA1b"], ["pat_1b"]),
    (r"a\z", ["a"], ["a\n"]),
    (r"[]a]+", ["]a]"], ["b"]),
])
def test_translation_keeps_re2_meaning(go, matches, misses):
    py = re.compile(gitleaks.to_python(go))
    assert all(py.fullmatch(s) for s in matches), py.pattern
    assert not any(py.fullmatch(s) for s in misses), py.pattern


def test_a_near_word_rule_needs_its_word_within_its_lines():
    rule = gitleaks.compile_rule(next(r for r in RUN if r["id"] == "curl-auth-user"))
    assert rule.near is not None
    assert gitleaks.redact("curl -s http://h -u bob:hunter22", "<R>") == "curl -s http://h -u <R>"
    assert gitleaks.redact("curl \\\n  -X POST \\\n  -u bob:hunter22 http://h", "<R>").count("<R>") == 1
    far = "curl x" + "\n" * 11 + " -u bob:hunter22 y"
    assert not rule.spans(far)  # more line breaks than the rule allows: not a curl option any more
    assert not rule.spans("wget -u bob:hunter22 y")


def test_free_text_forms_never_survive_a_snapshot(tmp_path):
    """``mysql -pSECRET``, ``user:pw@host``, ``AccountKey%3D...`` in every channel of a snapshot."""
    from tests.test_redact import FREE_TEXT_FORMS

    snap = _snap([text for text, _secret in FREE_TEXT_FORMS], str(tmp_path / "server.log"))
    assert sum(k.startswith("VLLM_OPNOTE_") for k in snap["env"]) == len(FREE_TEXT_FORMS)
    leaks = _leaks(snap, {secret: (text, secret) for text, secret in FREE_TEXT_FORMS})
    assert not leaks, json.dumps(leaks, indent=1)


def test_docs_list_every_rule_run_and_why_the_others_are_left_out():
    docs = (REPO / "docs" / "security.md").read_text()
    block = docs[docs.index("<!-- gitleaks rules: begin -->"):docs.index("<!-- gitleaks rules: end -->")]
    assert re.findall(r"`([\w.-]+)`", block) == [row["id"] for row in RUN], "run scripts/gitleaks_table.py"
    source = gitleaks.table()["source"].split(",")[0]
    assert source in docs and gitleaks.table()["commit"][:8] in docs
    for row in ROWS:
        if "left_out" in row:
            assert f"`{row['id']}` (" in docs, row["id"]
