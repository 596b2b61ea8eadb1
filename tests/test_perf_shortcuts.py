"""The shortcuts that make a snapshot cheaper change no result: the policy's index picks the rule a scan of every
rule picks, and redacting each section in its collector's thread gives the snapshot that redacting after
collection gives."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time
import types
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from hoststate import collectors, gitleaks, redact
from hoststate.__main__ import YOUNG
from hoststate.capture import collect
from hoststate.collectors import Context, Section, run_all
from hoststate.paths import Prefixed, glob_key, leaves
from hoststate.policy import Rule, _Spelling, compile_pattern, default_policy, default_rules
from hoststate.snapshot import load
from tests.conftest import FIXTURES, HOSTS, PYTHONPATH


def _scan(parts: tuple[str, ...]) -> Any:
    """The winning rule by trying every shipped rule (no buckets, no index)."""
    keyed = [(rule.precedence(parts), rule) for rule in default_rules()]
    keyed = [(k, r) for k, r in keyed if k is not None]
    return max(keyed, key=lambda kr: kr[0])[1] if keyed else None


def test_the_indexed_policy_picks_the_rule_a_scan_of_every_rule_picks() -> None:
    policy = default_policy()
    paths = {parts for name in ("h200-snapshot.toml", "h200-host2-snapshot.toml")
             for parts, _ in leaves(load(str(FIXTURES / "real" / name)))}
    paths |= {parts for parts, _ in leaves(load(str(FIXTURES / "snapshots" / "big-a.toml")))}
    assert len(paths) > 300
    for parts in sorted(paths):
        assert policy.rule_for(parts) is _scan(parts), parts


def test_keys_taken_by_the_same_globs_share_one_answer_and_it_is_the_right_one() -> None:
    """Policy.rule_for rates a key that only globs name as the first key seen that the same globs take: for paths
    built from every glob rule with keys that other globs take too (``pcie_*`` and ``pcie_*current*``), a literal
    key, and keys no rule names, in two orders (the first key seen differs), each answer is the rule the policy's
    uncached matching picks for that very path."""
    from hoststate.policy import Policy
    from tests.test_verdict_properties import instances

    fills = ["w", "", "xcurrenty", "vllm", "NCCL_", "x_pending", "tx_supported", "7"]
    globbed = [r for r in default_rules() if any("*" in p and p not in ("*", "**") for p in r.pattern.parts)]
    paths = sorted({path for r in globbed for fill in fills for path in instances(r.pattern.parts, fill) if path})
    assert len(globbed) > 100 and len(paths) > 1000
    for order in (paths, paths[::-1]):
        policy = Policy(default_rules())
        shared = 0
        for parts in order:
            assert policy.rule_for(parts) is policy._winner(parts), parts
            shared += any(policy._canonical(k) not in (k, "\x00") for k in parts)
        assert shared > 100  # the shortcut was taken


def _every_rule_path() -> list[tuple[str, ...]]:
    """Paths that every shipped rule matches (with keys other rules take too), and the real snapshots' leaves."""
    from tests.test_verdict_properties import instances

    fills = ["w", "", "vllm", "NCCL_x", "x_pending", "7"]
    paths = {path for r in default_rules() for fill in fills for path in instances(r.pattern.parts, fill) if path}
    for name in ("h200-snapshot.toml", "h200-host2-snapshot.toml"):
        paths |= {parts for parts, _ in leaves(load(str(FIXTURES / "real" / name)))}
    return sorted(paths)


def test_a_policy_that_builds_its_tables_rules_later_rates_every_path_as_one_built_at_once() -> None:
    """The shipped Policy builds a table's rules when a path under that table is first rated (Later); for every
    path any shipped rule matches, in two orders (so a table's rules are built at different moments), it picks
    the rule and severity that a Policy given every rule at once picks."""
    from hoststate.policy import Policy, _shipped_split

    paths = _every_rule_path()
    eager = Policy(default_rules())
    assert len(paths) > 5000
    for order in (paths, paths[::-1]):
        lazy = Policy(*_shipped_split())
        assert {"vllm", "env", "gpu", "system"} <= set(lazy._later)
        for parts in order:
            assert lazy.rule_for(parts) is eager.rule_for(parts), parts
        assert not lazy._later and len(lazy.rules) == len(eager.rules)


def test_threads_rating_at_once_wait_for_a_table_being_built_instead_of_rating_with_part_of_it() -> None:
    """Eight threads rate every path at once on one fresh Policy whose tables build slowly: a thread that meets a
    table another thread is building waits for it, so every answer is the one a Policy built at once gives."""
    from hoststate.policy import Later, Policy, _shipped_split

    now, later = _shipped_split()

    def slow(build: Any) -> Any:
        def made() -> list[Rule]:
            rules = build()
            time.sleep(0.02)  # the window in which another thread meets the table half filed, were it published early
            return rules
        return made

    paths = _every_rule_path()
    eager = Policy(default_rules())
    expected = {parts: eager.rule_for(parts) for parts in paths}
    lazy = Policy(now, Later({k: slow(b) for k, b in later.build.items()}, later.parts))
    start = threading.Barrier(8)
    wrong: list[tuple[str, ...]] = []

    def rate(shift: int) -> None:
        start.wait()
        order = paths[shift * len(paths) // 8:] + paths[: shift * len(paths) // 8]
        wrong.extend(parts for parts in order if lazy.rule_for(parts) is not expected[parts])

    threads = [threading.Thread(target=rate, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == [] and not lazy._later


def test_the_digest_of_a_host_without_a_server_builds_none_of_the_servers_rules() -> None:
    """The digest rates only the tables a snapshot has: a host without a vLLM server (a Slurm prolog's, a
    DaemonSet's) leaves the 2,000 rules of ``vllm`` and ``env`` unbuilt; rating one server path builds them."""
    from hoststate.digest import digest

    snap = load(str(FIXTURES / "snapshots" / "seed-baseline.toml"))
    snap = {k: v for k, v in snap.items() if k not in ("vllm", "env")}
    default_policy.cache_clear()
    try:
        digest(snap)
        policy = default_policy()
        assert {"vllm", "env"} <= set(policy._later) and "system" not in policy._later
        assert policy.severity(("vllm", "args", "enforce_eager")) == "invalidating"
        assert "vllm" not in policy._later
    finally:
        default_policy.cache_clear()


def _without_times(snap: dict[str, Any]) -> dict[str, Any]:
    snap = {k: v for k, v in snap.items() if k != "hoststate"}
    snap["collectors"] = {k: {f: x for f, x in v.items() if f != "took_ms"} for k, v in snap["collectors"].items()}
    return snap


def test_sections_redacted_in_their_threads_equal_sections_redacted_after(monkeypatch, tmp_path) -> None:
    root = str(tmp_path / "host")
    shutil.copytree(HOSTS / "seed-baseline", root, symlinks=True)
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2"
    cmdline = pathlib.Path(root, "proc", "cmdline")
    cmdline.write_text(cmdline.read_text().strip() + f" gh.token={token}\n")
    threaded = collect(Context(root=root))
    seen: list[str] = []
    real_run_all = run_all

    def run_all_without_finish(ctx: Context, names: Any, finish: Any = None) -> dict[str, Section]:
        seen.append("called")
        return real_run_all(ctx, names)  # no hook: capture.collect redacts every section afterwards

    monkeypatch.setattr("hoststate.capture.run_all", run_all_without_finish)
    after = collect(Context(root=root))
    assert seen == ["called"]
    assert token not in str(threaded) and token not in str(after)
    assert redact.REDACTED in threaded["system"]["kernel"]["cmdline"]
    assert _without_times(threaded) == _without_times(after)
    assert threaded["hoststate"]["digest"] == after["hoststate"]["digest"]


def test_a_failing_finish_leaves_the_section_whole() -> None:
    calls: list[str] = []

    def finish(name: str, sec: Section) -> None:
        calls.append(name)
        raise RuntimeError("boom")

    sections = run_all(Context(root=str(HOSTS / "seed-baseline")), ("system", "env"), finish)
    assert sorted(calls) == ["env", "system"]
    assert sections["system"].status == "ok" and sections["system"].data


def _fake_collectors(monkeypatch: pytest.MonkeyPatch, behaviour: dict[str, Any]) -> list[tuple[str, str, float]]:
    """Registered collectors replaced by modules whose ``collect`` runs ``behaviour[name]``; returns the log of
    (name, "start"/"end", time) they write."""
    log: list[tuple[str, str, float]] = []
    infos = []
    for name, run in behaviour.items():
        module = types.ModuleType(f"fake_collector_{name}")

        def collect(ctx: Context, name: str = name, run: Any = run) -> Section:
            log.append((name, "start", time.perf_counter()))
            run()
            log.append((name, "end", time.perf_counter()))
            return Section(status="ok", data={"x": 1})

        module.collect = collect  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, module.__name__, module)
        infos.append(collectors.CollectorInfo(name, module.__name__, name))
    monkeypatch.setattr(collectors, "COLLECTORS", tuple(infos))
    return log


def test_collectors_that_finish_quickly_run_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """Python that holds the interpreter lock gains nothing from running beside other Python: each collector
    runs alone while it finishes within STAGGER."""
    log = _fake_collectors(monkeypatch, {n: (lambda: time.sleep(0.001)) for n in ("a", "b", "c", "d")})
    sections = run_all(Context(root=str(HOSTS / "seed-baseline"), timeout=30), ("a", "b", "c", "d"))
    assert all(sec.status == "ok" for sec in sections.values())
    order = [(name, what) for name, what, _t in log]
    assert order == [(n, w) for n in "abcd" for w in ("start", "end")], order


def test_a_collector_that_waits_lets_the_next_start_and_a_hung_one_holds_nothing(monkeypatch) -> None:
    hang = threading.Event()
    log = _fake_collectors(monkeypatch, {"hung": lambda: hang.wait(60), "b": lambda: time.sleep(0.001),
                                         "c": lambda: time.sleep(0.001)})
    try:
        sections = run_all(Context(root=str(HOSTS / "seed-baseline"), timeout=2), ("hung", "b", "c"))
    finally:
        hang.set()
    assert sections["hung"].status == "timeout"
    assert sections["b"].status == sections["c"].status == "ok"
    started = {name: t for name, what, t in log if what == "start"}
    assert started["hung"] + collectors.STAGGER <= started["b"] <= started["c"]  # b did not wait for the hung one


_KEYS = st.text(alphabet="ab_*x", max_size=6)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(_KEYS, st.booleans()), max_size=12), st.lists(_KEYS, min_size=1, max_size=8))
def test_prefixed_gives_exactly_the_items_whose_key_is_the_key_or_a_prefix_of_it(filed, keys) -> None:
    """Prefixed.get (one match of the longest prefix, then that prefix's own prefixes) against a scan of all."""
    index = Prefixed()
    for n, (key, exact) in enumerate(filed):
        index.add(key, n, exact=exact)
    for key in keys:
        expected = sorted(n for n, (k, exact) in enumerate(filed) if (k == key if exact else key.startswith(k)))
        assert sorted(index.get(key)) == expected, (filed, key)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.text(alphabet="ab*", min_size=1, max_size=5).filter(lambda p: "**" not in p or p == "**"),
                max_size=8), st.lists(_KEYS, min_size=1, max_size=8))
@example(patterns=["*a*b*", "*b*"], keys=["ab", "xbx"])  # a glob empty at both ends, and a ``*x*`` one
def test_spelling_finds_every_glob_that_takes_a_key_and_rules_out_only_keys_none_takes(patterns, keys) -> None:
    """_Spelling.globs against glob_key over every glob; may_glob False only where no glob takes the key."""
    rules = [Rule(path=p, severity="info", reason="r", pattern=compile_pattern((p,))) for p in patterns]
    spelling = _Spelling(p for r in rules for p in r.pattern.parts)
    every = {tuple(p.split("*")) for p in patterns if "*" in p and p not in ("*", "**")}
    for key in keys:
        expected = frozenset(pieces for pieces in every if glob_key(pieces, key))
        assert spelling.globs(key) == expected, (patterns, key)
        assert spelling.may_glob(key) or not expected, (patterns, key)


#: Keywords of the shipped gitleaks rules, and pieces of them (a prefix of one keyword inside another is the case the
#: longest-match scan must still count).
_GITLEAKS_WORDS = sorted({k for row in gitleaks.rows() for k in gitleaks.keywords(row)})
_PIECES = st.one_of(st.sampled_from(_GITLEAKS_WORDS), st.sampled_from(_GITLEAKS_WORDS).map(lambda w: w[: len(w) // 2]),
                    st.text(alphabet="ab_-=: .xyz", max_size=6))


@settings(max_examples=400, deadline=None)
@given(st.lists(_PIECES, max_size=10).map("".join))
@example(text="sk_live_x")  # ``sk`` and ``sk_live`` are both keywords where one match reports the longest
def test_the_keyword_scan_runs_exactly_the_rules_whose_keyword_occurs(text: str) -> None:
    """Both ways: keyword by keyword (a fresh index, its first texts) and by the compiled scan."""
    expected = {i for i, row in enumerate(gitleaks.rows()) if any(k in text for k in gitleaks.keywords(row))}
    fresh = gitleaks.keyword_index([gitleaks.keywords(row) for row in gitleaks.rows()])
    assert fresh.rules(text) == expected and fresh._scan is None
    assert gitleaks.rules_for(text, scan=True) == expected


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.text(alphabet="abc", max_size=3), max_size=3), max_size=6),
       st.text(alphabet="abcx", max_size=12))
def test_a_keyword_index_runs_the_rules_whose_keyword_occurs_and_those_without_one(lists, text) -> None:
    """Any table: keywords that are prefixes of others, repeated, empty; a rule without a keyword runs always."""
    expected = {i for i, words in enumerate(lists) if any(w in text for w in words if w) or not any(lists[i])}
    assert gitleaks.rules_for(text, gitleaks.keyword_index(lists)) == expected
    assert gitleaks.rules_for(text, gitleaks.keyword_index(lists), scan=True) == expected


@settings(max_examples=500, deadline=None)
@given(st.lists(st.text(alphabet="abc", max_size=4), max_size=12))
def test_the_token_prefixes_kept_are_those_no_other_prefix_starts(words: list[str]) -> None:
    """shortest_prefixes, one pass over the sorted words, keeps what comparing every pair keeps (the words none
    of which starts with another), on words that repeat, nest and are empty; and on the shipped token formats."""
    found = set(words)
    pairwise = tuple(sorted(w for w in found if not any(o != w and w.startswith(o) for o in found)))
    assert redact.shortest_prefixes(words) == pairwise
    shipped = {p.removesuffix("(?i)").lower() for _i, p, _b, _n in redact.TOKEN_FORMATS}
    assert redact._token_literals() == tuple(
        sorted(w for w in shipped if not any(o != w and w.startswith(o) for o in shipped)))


#: Pieces of texts around token prefixes: each prefix in three cases and with the long s and the Kelvin sign
#: (which a prefix matched without case takes as ``s`` and ``k``), word and separator characters, and characters
#: whose case folding or ``\w`` reach past ASCII.
_TOKEN_PIECES = st.one_of(
    st.sampled_from(sorted({p.removesuffix("(?i)") for _i, p, _b, _n in redact.TOKEN_FORMATS})).flatmap(
        lambda p: st.sampled_from([p, p.lower(), p.upper(), p.replace("s", "\u017f").replace("k", "\u212a")])),
    st.text(alphabet="aZ9_-./=: ", max_size=4), st.sampled_from(["\u017f", "\u212a", "\u00e9", "x" * 40, "A1" * 30]))


@settings(max_examples=500, deadline=None)
@given(st.lists(_TOKEN_PIECES, max_size=8).map("".join))
@example(text="id e8a3-" + "a" * 40)  # a prefix inside a word (a UUID's piece) cannot start a token
@example(text="gl\u017fa_" + "a" * 40)  # glsa_ matched without case
def test_a_text_without_a_token_prefix_where_a_token_may_start_holds_no_token(text: str) -> None:
    """may_hold_token is False only for texts the token pattern does not match, so skipping them loses nothing."""
    assert redact.may_hold_token(text) or not redact._tokens().search(text), text


def test_a_few_hundred_texts_compile_neither_scan_and_more_compile_both(monkeypatch: pytest.MonkeyPatch) -> None:
    """A snapshot of a fixture host is redacted without compiling the keyword scan or the token pattern (a text
    is checked keyword by keyword, prefix by prefix); after SCAN_AFTER texts both are compiled and used, so a
    large snapshot pays their compile once instead of the checks on every text. Each text redacts alike."""
    monkeypatch.setattr(redact, "_TOKEN_PATTERN", [])
    monkeypatch.setattr(redact, "_token_checks", 0)
    gitleaks._keyword_index.cache_clear()
    try:
        snap = collect(Context(root=str(HOSTS / "seed-baseline")), ("system", "packages"))
        assert snap["system"] and gitleaks._keyword_index()._scan is None and redact._TOKEN_PATTERN == []
        texts = [f"line {n}: token ghp_{'a1B2' * 9} at host{n}" for n in range(gitleaks.SCAN_AFTER + 10)]
        before = [redact.redact_text(t) for t in texts]
        assert gitleaks._keyword_index()._scan is not None and redact._TOKEN_PATTERN
        assert before == [redact.redact_text(t) for t in texts] and all("ghp_" not in t for t in before)
    finally:
        gitleaks._keyword_index.cache_clear()


def test_a_guard_builds_the_shipped_policy_once_in_the_snaps_warm_thread(tmp_path: pathlib.Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """Without user rules the guard rates with the digest's Policy, built by the snap's warm thread while the
    collectors run, not a second one built on the main thread before snapping."""
    from hoststate import policy
    from hoststate.capture import SnapOptions, snap
    from hoststate.run.flow import guarded_run
    from hoststate.snapshot import to_toml

    opts = SnapOptions(root=str(HOSTS / "seed-baseline"), only=("system",))
    base = tmp_path / "b.toml"
    base.write_text(to_toml(snap(opts)))
    built: list[str] = []
    real = policy.Policy.__init__

    def counted(self: policy.Policy, rules: list[Rule], later: policy.Later | None = None) -> None:
        built.append(threading.current_thread().name)
        real(self, rules, later)

    monkeypatch.setattr(policy.Policy, "__init__", counted)
    default_policy.cache_clear()
    try:
        outcome = guarded_run(str(base), (), opts)
        assert policy.load_policy(()) is default_policy()
    finally:
        default_policy.cache_clear()
    assert outcome.guard.verdict == "comparable"
    assert built == ["warm"]


PREPARED = """
import sys, threading
seen = []
class Spy:
    def find_spec(self, name, path=None, target=None):
        if name == "hoststate.render.guard":
            seen.append(threading.current_thread().name)
        return None
sys.meta_path.insert(0, Spy())
from hoststate.cli import main
try:
    main(sys.argv[1:])
finally:
    print("imported in", seen)
"""


def test_a_guards_report_is_imported_while_the_collectors_run(tmp_path: pathlib.Path) -> None:
    """guard's report module comes in the snap's warm thread (SnapOptions.prepare: on a GPU host the parent
    waits for NVML meanwhile), not on the main thread before the host is snapped; a module that cannot be imported
    there costs the snapshot nothing."""
    from hoststate.capture import SnapOptions, snap

    tree = str(HOSTS / "seed-baseline")
    base = tmp_path / "b.toml"
    done = subprocess.run([sys.executable, "-m", "hoststate", "snap", "-q", "--root", tree, "-o", str(base)],
                          env={**os.environ, "PYTHONPATH": PYTHONPATH}, timeout=120)
    assert done.returncode == 0
    run = subprocess.run([sys.executable, "-c", PREPARED, "guard", "--root", tree, "--baseline", str(base), "--",
                          sys.executable, "-c", "0"], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": PYTHONPATH})
    assert "comparable" in run.stderr, run.stderr
    assert run.stdout.splitlines()[-1] == "imported in ['warm']"
    (tmp_path / "hs_prepared_here.py").write_text("import threading\nTHREAD = threading.current_thread().name\n")
    sys.path.insert(0, str(tmp_path))
    try:
        taken = snap(SnapOptions(root=tree, only=("system",), prepare=("no_such_module_hs", "hs_prepared_here")))
        import hs_prepared_here  # type: ignore[import-not-found]
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("hs_prepared_here", None)
    assert hs_prepared_here.THREAD == "warm"
    assert taken["collectors"]["system"]["status"] == "ok"
    assert SnapOptions.of(prepare="one.module").prepare == ("one.module",)  # a name, not its letters
    assert SnapOptions.of(prepare=["a", "b"]).prepare == ("a", "b") and hash(SnapOptions.of(prepare=["a"]))


def test_a_bad_baseline_is_refused_before_the_host_is_snapped(tmp_path: pathlib.Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """What any shortcut of the guard's must keep (docs/performance.md tells of one measured and dropped): a
    missing baseline, or one that is not a snapshot, is refused before the host is snapped (no request reaches a
    vLLM server, nothing runs), with the parser's own error; and the guard's public records' type hints resolve
    (their types imported where they are named, not only for a type checker)."""
    import typing

    from hoststate import capture
    from hoststate.errors import InputError
    from hoststate.run.flow import RunOutcome, WatchedRun, WatchOptions, guarded_run
    from hoststate.run.guard import GuardResult, evaluate

    snapped: list[str] = []
    real = capture.snap
    monkeypatch.setattr(capture, "snap", lambda opts: snapped.append(threading.current_thread().name) or real(opts))
    tree = str(HOSTS / "seed-baseline")
    with pytest.raises(InputError, match="baseline not found"):
        evaluate(str(tmp_path / "nope.toml"), root=tree, only=("system",))
    assert snapped == []
    bad = tmp_path / "bad.toml"
    bad.write_text("[hoststate\n")
    ran = tmp_path / "ran"
    with pytest.raises(InputError, match="bad.toml") as raised:
        guarded_run(str(bad), ("touch", str(ran)), capture.SnapOptions(root=tree, only=("system",)))
    assert snapped == [] and not ran.exists()
    assert raised.traceback[-1].path.name == "snapshot.py"  # the parser's own error
    for record in (GuardResult, RunOutcome, WatchedRun, WatchOptions):
        assert typing.get_type_hints(record.__init__)


@pytest.mark.parametrize("job", [None, "gpu", "host"], ids=["no child", "a GPU child collecting ahead",
                                                           "a host child alone"])
def test_the_digest_work_fills_only_a_wait_for_the_gpu_child(monkeypatch: pytest.MonkeyPatch, job: str | None) -> None:
    """With a child reading the GPUs the parent waits for NVML, and the warm thread builds the policy's tables of
    every collector while each section is rated as it finishes; without one (the host job's child answers before
    the parent has parsed its options) that is only more work under one interpreter lock, so neither happens and
    the digest builds and rates what the snapshot has. The digest is the same either way."""
    from hoststate import ahead, digest, policy
    from hoststate.capture import SnapOptions, snap

    prepared: list[tuple[str, ...]] = []
    rated: list[str] = []
    real_prepare, real_rate = policy.Policy.prepare, digest.rate_ahead
    monkeypatch.setattr(policy.Policy, "prepare", lambda self, keys: (prepared.append(tuple(keys)),
                                                                       real_prepare(self, keys))[1])
    monkeypatch.setattr(digest, "rate_ahead", lambda name, table: (rated.append(name), real_rate(name, table))[1])
    monkeypatch.setattr(ahead, "pending", lambda asked=None: job is not None and asked in (None, job))
    child = job == ahead.NAME
    opts = SnapOptions(root=str(HOSTS / "seed-experiment"))
    got = snap(opts)
    if child:
        assert prepared == [tuple(collectors.NAMES)]
        assert {"system", "dsa", "vllm", "env"} <= set(rated)
    else:
        assert prepared == [()] and rated == []
    monkeypatch.setattr(ahead, "pending", lambda asked=None: not child and asked in (None, ahead.NAME))
    assert snap(opts)["hoststate"]["digest"] == got["hoststate"]["digest"]


#: The installed command's entry point, with a handler registered before it runs: atexit handlers run after the
#: command returns and before the interpreter's last collections, so it sees the state those collections meet.
EXIT_STATE = """
import atexit, gc, sys
before = gc.get_threshold()
atexit.register(lambda: print("exit", gc.get_freeze_count() > 0, gc.get_threshold()[0], before[0], flush=True))
sys.argv = ["hoststate", *sys.argv[1:]]
from hoststate.__main__ import main
main()
"""


@pytest.mark.parametrize(("name", "code"), [("seed-baseline.toml", 0), ("missing.toml", 2)])
def test_the_command_skips_the_exits_collections_and_collects_the_young_less_often(name: str, code: int) -> None:
    """The command's process leaves every object alive at its end out of the exit's garbage collections
    (gc.freeze) and runs the youngest generation's collections every YOUNG allocations, not every 700; its
    output and exit code are the same, on success and on an error."""
    snap = FIXTURES / "snapshots" / name
    env = {**os.environ, "PYTHONPATH": PYTHONPATH}
    done = subprocess.run([sys.executable, "-c", EXIT_STATE, "show", str(snap)], capture_output=True, text=True,
                          env=env, timeout=120, check=False)
    default = subprocess.run([sys.executable, "-c", "import gc; print(gc.get_threshold()[0])"], capture_output=True,
                             text=True, check=True, timeout=60).stdout.strip()
    assert done.returncode == code, done.stderr
    assert done.stdout.splitlines()[-1] == f"exit True {YOUNG} {default}" and int(default) < YOUNG
    if code == 0:
        assert "dsa" in done.stdout and done.stderr == ""
    else:
        assert name in done.stderr


#: The command in a process whose ``os._exit`` says it was called, with a handler registered with atexit and (with
#: ``thread``) a thread that is not a daemon and prints last.
LEAVE = """
import atexit, os, sys, threading, time
def said(code, write=os.write, real=os._exit):
    write(1, b"os._exit %d\\n" % code)
    real(code)
os._exit = said
atexit.register(lambda: print("atexit ran"))
if sys.argv[1] == "thread":
    threading.Thread(target=lambda: (time.sleep(0.3), print("thread done", flush=True))).start()
sys.argv = ["hoststate", *sys.argv[2:]]
from hoststate.__main__ import main
main()
"""


@pytest.mark.parametrize(("thread", "name", "code"), [
    ("none", "big-a.toml", 0), ("none", "missing.toml", 2), ("thread", "big-a.toml", 0)])
def test_the_command_ends_without_the_teardown_and_loses_nothing(thread: str, name: str, code: int) -> None:
    """The command's process ends by ``os._exit`` with its exit code, after the atexit handlers ran and its output
    was flushed (a whole snapshot as JSON through a pipe, more than a pipe's buffer); with a thread that is not a
    daemon it exits the usual way, which waits for that thread."""
    snap = FIXTURES / "snapshots" / name
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # a pipe's stdout is then buffered
    done = subprocess.run([sys.executable, "-c", LEAVE, thread, "show", "--format", "json", str(snap)],
                          capture_output=True, text=True, env={**env, "PYTHONPATH": PYTHONPATH}, timeout=120,
                          check=False)
    assert done.returncode == code, done.stderr
    if code == 0:
        document, end = json.JSONDecoder().raw_decode(done.stdout)  # whole, flushed before the process ended
        assert end > 1 << 16 and document["hoststate"]
    else:
        assert name in done.stderr
    tail = done.stdout.splitlines()[-2:]
    assert tail == (["thread done", "atexit ran"] if thread == "thread" else ["atexit ran", f"os._exit {code}"])


#: The command in a process whose ``os._exit`` first lists the files still open for writing (other than the
#: standard streams) and the threads still running that are not daemons: what skipping the teardown could lose.
OPEN_AT_EXIT = """
import gc, io, os, sys, threading
def said(code, real=os._exit, write=os.write):
    gc.unfreeze()  # the command froze its objects, which get_objects would not list
    std = {id(s) for s in (sys.stdout, sys.stderr) for s in (s, getattr(s, "buffer", None)) if s is not None}
    left = [repr(o) for o in gc.get_objects() if isinstance(o, io.IOBase) and id(o) not in std
            and not o.closed and o.writable()]
    main = threading.main_thread()
    left += [t.name for t in threading.enumerate() if t.is_alive() and not t.daemon and t is not main]
    write(1, ("open at exit: %r\\n" % left).encode())
    real(code)
os._exit = said
sys.argv = ["hoststate", *sys.argv[1:]]
from hoststate.__main__ import main
main()
"""


@pytest.mark.parametrize("name", ["snap", "guard", "export", "rebaseline", "timeline"])
def test_no_command_that_writes_a_file_leaves_it_open_when_the_process_ends(tmp_path: pathlib.Path, name: str) -> None:
    """Every command that writes a file (tests/test_output_shared.py's list) has closed it, and has no thread but
    daemons, when it ends the process without the teardown (hoststate.__main__.leave): nothing is lost."""
    from tests.test_output_shared import COMMANDS

    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-c", OPEN_AT_EXIT, *COMMANDS[name](str(out))], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": PYTHONPATH}, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "open at exit: []"
    assert out.stat().st_size > 0


#: The dataclasses a snap's modules define: each is a mutable record (a server's parsed arguments), needs
#: per-field options (Listener's fields left out of equality) or is part of the library's API (SnapOptions).
#: CPython 3.11 takes 0.5-1.5 ms to define one (each generated method is compiled by ``exec``), 14 ms for the 18 a
#: snap once defined; an immutable record without such needs is a NamedTuple (0.15 ms). The collectors' Section and
#: Context are written out (below): the child collecting the GPUs ahead imports their module and no dataclasses.
SNAP_DATACLASSES = {"hoststate.capture.SnapOptions", "hoststate.collectors.packages.ServerPython",
                    "hoststate.collectors.vllm.discovery.Proc", "hoststate.collectors.vllm.discovery.Listener",
                    "hoststate.collectors.vllm._Args", "hoststate.collectors.vllm._Server"}
#: What a guard adds: none. Its records (the diff's, the guard's, the run's, WatchOptions, the report's Elide and
#: Name) are written out on hoststate.records' bases and held to the dataclass each stands for (below).
GUARD_DATACLASSES: set[str] = set()
DATACLASSES_MADE = """
import dataclasses, sys
made = []
real = dataclasses._process_class
def counted(cls, *args):
    made.append(f"{cls.__module__}.{cls.__qualname__}")
    return real(cls, *args)
dataclasses._process_class = counted
from hoststate.cli import main
try:
    main(sys.argv[1:])
finally:
    print(" ".join(made))
    print("secrets" in sys.modules)
"""


def _dataclasses_made(*args: str) -> set[str]:
    proc = subprocess.run([sys.executable, "-c", DATACLASSES_MADE, *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": PYTHONPATH})
    classes, secrets_imported = proc.stdout.splitlines()[-2:]
    assert secrets_imported == "False", proc.stderr  # a temporary file's name needs no ``secrets`` (random, hmac)
    return set(classes.split())


def test_a_snap_and_a_guard_define_only_the_dataclasses_that_need_to_be_one(tmp_path: pathlib.Path) -> None:
    base = tmp_path / "s.toml"
    made = _dataclasses_made("snap", "--root", str(HOSTS / "seed-baseline"), "--output", str(base), "--quiet")
    assert base.exists() and "hoststate.capture.SnapOptions" in made
    assert made <= SNAP_DATACLASSES, sorted(made - SNAP_DATACLASSES)
    made = _dataclasses_made("guard", "--baseline", str(base), "--root", str(HOSTS / "seed-baseline"), "--", "true")
    assert "hoststate.capture.SnapOptions" in made  # the guard's run was counted
    assert made <= SNAP_DATACLASSES | GUARD_DATACLASSES, sorted(made - SNAP_DATACLASSES - GUARD_DATACLASSES)


def _written_out_records() -> list[type]:
    """Every record of hoststate written out on hoststate.records' bases: each module is imported, so that a record
    added anywhere is found and held to its dataclass."""
    import importlib
    import pkgutil

    import hoststate
    from hoststate.records import Frozen, Record

    for info in pkgutil.walk_packages(hoststate.__path__, "hoststate."):
        if not info.name.endswith("__main__"):
            importlib.import_module(info.name)
    found: list[type] = []
    todo = [Record]
    while todo:
        for sub in todo.pop().__subclasses__():
            todo.append(sub)
            if sub is not Frozen and sub.__module__.startswith("hoststate."):
                found.append(sub)
    return sorted(found, key=lambda c: f"{c.__module__}.{c.__qualname__}")


def _sample(name: str) -> str:
    return f"<{name}>"


def _as_dataclass(cls: type) -> tuple[type, dict[str, Any]]:
    """The dataclass ``cls`` stands for, made by ``dataclasses``: the same fields, in order, with the same defaults
    (a dict or list made per instance, as ``field(default_factory=...)``), frozen where ``cls`` is; and the
    arguments the required fields are given."""
    import dataclasses
    import inspect

    from hoststate.records import Frozen

    params = list(inspect.signature(cls.__init__).parameters.items())[1:]
    required = {name: _sample(name) for name, p in params if p.default is inspect.Parameter.empty}
    made = cls(**required)
    specs: list[tuple[str, Any, Any]] = []
    for name, param in params:
        if name in required:
            specs.append((name, object, dataclasses.field()))
            continue
        value = getattr(made, name)
        if isinstance(value, (dict, list)):
            spec = dataclasses.field(default_factory=type(value))
        elif param.default is None and value is not None:  # a default made per instance (WatchOptions.rules)
            spec = dataclasses.field(default_factory=lambda value=value: value)
        else:
            spec = dataclasses.field(default=param.default)
        specs.append((name, object, spec))
    dc = dataclasses.make_dataclass(cls.__name__, specs, frozen=issubclass(cls, Frozen))
    dc.__qualname__ = cls.__qualname__
    return dc, required


@pytest.mark.parametrize("cls", _written_out_records(), ids=lambda c: c.__qualname__)
def test_the_written_out_records_behave_as_the_dataclass_they_stand_for(cls: type) -> None:
    """Each record written out on hoststate.records' bases (the GPU child's Section and Context, which import no
    dataclasses; the guard's records, 0.4-1 ms each to define as a dataclass): construction, defaults, fields,
    equality, repr, hashing, immutability and ``replace`` stay what ``@dataclass`` generates."""
    import dataclasses

    from hoststate.records import Frozen, replace

    dc, required = _as_dataclass(cls)
    ours, theirs = cls(**required), dc(**required)
    assert list(vars(ours).items()) == list(vars(theirs).items())  # the same fields, order and defaults
    other = cls(**required)
    for value in vars(ours).values():
        if isinstance(value, (dict, list)):
            assert not any(value is v for v in vars(other).values())  # one per instance
    name = next(iter(vars(ours)))
    values = [None, "x", 3, ("a", 1)]
    for a in values:
        for b in values:
            assert (cls(**{**required, name: a}) == cls(**{**required, name: b})) == (
                dc(**{**required, name: a}) == dc(**{**required, name: b}))
    assert repr(cls(**{**required, name: "x"})) == repr(dc(**{**required, name: "x"}))
    assert (ours == theirs) is False and ours != object()  # another type is not equal, as a dataclass's
    if issubclass(cls, Frozen):
        assert hash(ours) == hash(theirs)
        for attempt in (lambda r: setattr(r, name, "y"), lambda r: delattr(r, name)):
            with pytest.raises(dataclasses.FrozenInstanceError):
                attempt(theirs)
            with pytest.raises(dataclasses.FrozenInstanceError):
                attempt(ours)
        assert vars(replace(ours, **{name: "y"})) == vars(dataclasses.replace(theirs, **{name: "y"}))
    else:
        with pytest.raises(TypeError):
            hash(ours)
        with pytest.raises(TypeError):
            hash(theirs)


def test_every_written_out_record_is_found() -> None:
    """The records above are found by walking hoststate.records' subclasses (a check that cannot pass empty)."""
    names = {f"{c.__module__}.{c.__qualname__}" for c in _written_out_records()}
    assert {"hoststate.collectors.Section", "hoststate.collectors.Context", "hoststate.diff.DiffResult",
            "hoststate.run.guard.GuardResult", "hoststate.run.flow.WatchedRun", "hoststate.run.flow.RunOutcome",
            "hoststate.run.flow.WatchOptions", "hoststate.render.text.Elide", "hoststate.render.text.Name"} <= names


def test_every_path_option_of_every_command_uses_one_of_the_four_path_types_made_once() -> None:
    """Each ``click.Path`` made asks gettext for its name; the CLI makes four, not one per option, at every start."""
    import click

    from hoststate import cli

    shared = {id(t) for t in (cli.FILE, cli.FILE_OR_STDIO, cli.DIRECTORY, cli.ANY_PATH)}
    def params(command: click.Command, path: str) -> list[tuple[str, str | None, click.ParamType]]:
        found = [(path, p.name, p.type) for p in command.params if isinstance(p.type, click.Path)]
        for name, sub in getattr(command, "commands", {}).items():
            found += params(sub, f"{path} {name}")
        return found

    seen = params(cli.cli, "hoststate")
    assert len(seen) > 20  # the commands' file options are all found
    assert [(name, param) for name, param, kind in seen if id(kind) not in shared] == []
    assert len(shared) == 4
