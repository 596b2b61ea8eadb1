"""The default policy is parsed once per content (hoststate.parsed): the kept copy gives the same rules, an edited
file is never served a stale copy, and a copy someone else could have written is never read."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hoststate import parsed
from tests.conftest import PYTHONPATH, require

TEXT = '[[rule]]\npath = "gpu.*.clocks"\nseverity = "warning"\nreason = "r"\ntolerance = 0.5\n'


def _parse(text: str) -> dict:
    from hoststate.snapshot import toml_loads  # tomllib, or tomli on Python 3.10

    return toml_loads(text)


@pytest.fixture
def writing(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bytecode writing on (the test run turns it off) and no pycache prefix: copies go to __pycache__."""
    monkeypatch.setattr(sys, "dont_write_bytecode", False)
    monkeypatch.setattr(sys, "pycache_prefix", None)


def test_the_copy_is_written_once_and_read_back(tmp_path: Path, writing: None) -> None:
    source = str(tmp_path / "policy.toml")
    calls = []

    def parse(text: str) -> dict:
        calls.append(text)
        return _parse(text)

    first = parsed.parse_once(source, TEXT, parse)
    copy = Path(parsed.cache_path(source, TEXT))
    assert copy.parent == tmp_path / "__pycache__" and copy.is_file()
    assert parsed.parse_once(source, TEXT, parse) == first == _parse(TEXT)
    assert len(calls) == 1  # the second came from the copy


def test_another_writers_temporary_file_is_left_alone(tmp_path: Path, writing: None) -> None:
    """A process with this PID in another PID namespace (a container, a test worker) sharing the directory may be
    writing its copy: its temporary file is neither taken over nor removed, and this process still writes its own."""
    source = str(tmp_path / "policy.toml")
    copy = Path(parsed.cache_path(source, TEXT))
    copy.parent.mkdir()
    theirs = copy.parent / f"{copy.name}.{os.getpid()}.tmp"
    theirs.write_text("half written")
    parsed.parse_once(source, TEXT, _parse)
    assert theirs.read_text() == "half written"
    assert json.loads(copy.read_text())["doc"] == _parse(TEXT)
    assert sorted(p.name for p in copy.parent.iterdir()) == sorted([copy.name, theirs.name])  # no tmp of ours left


def test_an_edited_text_is_parsed_again(tmp_path: Path, writing: None) -> None:
    source = str(tmp_path / "policy.toml")
    parsed.parse_once(source, TEXT, _parse)
    edited = TEXT.replace("warning", "invalidating")
    assert parsed.cache_path(source, edited) != parsed.cache_path(source, TEXT)
    assert parsed.parse_once(source, edited, _parse)["rule"][0]["severity"] == "invalidating"


def _kept(text: str, doc: dict) -> str:
    """A copy as hoststate.parsed writes it."""
    return json.dumps({"hash": importlib.util.source_hash(text.encode()).hex(), "doc": doc})


FORGED = {"rule": [{"path": "**", "severity": "ignore", "reason": "forged"}]}


@pytest.mark.parametrize("spoil", ["group-writable", "other user", "symlink", "not json", "another text's"])
def test_a_copy_someone_else_could_write_is_not_read(tmp_path: Path, writing: None, spoil: str) -> None:
    source = str(tmp_path / "policy.toml")
    copy = Path(parsed.cache_path(source, TEXT))
    copy.parent.mkdir()
    forged = _kept("another policy", FORGED) if spoil == "another text's" else _kept(TEXT, FORGED)
    if spoil == "symlink":
        (tmp_path / "elsewhere.json").write_text(forged)
        copy.symlink_to(tmp_path / "elsewhere.json")
    else:
        copy.write_text("{not json" if spoil == "not json" else forged)
        copy.chmod(0o644)  # as the control below: only the spoiling differs
        if spoil == "group-writable":
            copy.chmod(0o664)
        elif spoil == "other user":
            require(os.geteuid() == 0, "chown to another user needs root")
            os.chown(copy, 65534, 65534)
    assert parsed.parse_once(source, TEXT, _parse) == _parse(TEXT)


def test_a_control_copy_of_this_user_is_read(tmp_path: Path, writing: None) -> None:
    """The control for the case above: the same forged file, this user's and 0644, is what gets read."""
    source = str(tmp_path / "policy.toml")
    copy = Path(parsed.cache_path(source, TEXT))
    copy.parent.mkdir()
    copy.write_text(_kept(TEXT, FORGED))
    copy.chmod(0o644)
    assert parsed.parse_once(source, TEXT, _parse) == FORGED


def test_nothing_is_written_without_bytecode_writing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setattr(sys, "pycache_prefix", None)
    source = str(tmp_path / "policy.toml")
    assert parsed.parse_once(source, TEXT, _parse) == _parse(TEXT)
    assert not (tmp_path / "__pycache__").exists()


def test_a_value_json_cannot_hold_is_parsed_each_time(tmp_path: Path, writing: None) -> None:
    source = str(tmp_path / "policy.toml")
    text = "when = 2026-12-03T10:00:00Z\n"
    assert "when" in parsed.parse_once(source, text, _parse)
    assert not Path(parsed.cache_path(source, text)).exists()


def _parse_then_read(tmp_path: Path, code: str) -> list[str]:
    """The output of ``code`` run by two processes under one pycache prefix (bytecode written), given ``parse``
    then ``no-parse``: the first writes the copies, the second must read them."""
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "PYTHONPYCACHEPREFIX": str(tmp_path)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return [subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True, env=env,
                           check=True, timeout=120).stdout for mode in ("parse", "no-parse")]


def test_the_default_policy_from_its_copy_is_the_same_in_fresh_processes(tmp_path: Path) -> None:
    """Two processes under one pycache prefix: the first parses and writes; the second, whose TOML parser is
    made to fail, can only have read the copy; both give the same rules."""
    code = ("import sys\nfrom hoststate import policy\n"
            "if sys.argv[1] == 'no-parse':\n"
            "    policy._read_toml = lambda *a: (_ for _ in ()).throw(AssertionError('parsed'))\n"
            "print(repr(policy.default_rules()))")
    runs = _parse_then_read(tmp_path, code)
    assert len(list(tmp_path.rglob("default_policy.*.json"))) == 1
    assert runs[0] == runs[1] and "Rule(" in runs[0]


def test_the_shipped_rules_built_from_their_rows_are_the_rules_the_toml_gives() -> None:
    """The copy keeps each rule as a row of its checked fields: building from it gives field for field, pattern
    included, what parse_rules gives from the TOML (a field left out of the row would be lost silently)."""
    from hoststate import policy

    built = policy.default_rules()
    shipped = Path(policy.__file__).parent  # the installed package's files when the wheel is under test
    parsed_now = [rule for name in (policy.DEFAULT_VARIABLES, policy.DEFAULT_POLICY)
                  for rule in policy.parse_rules(policy._read_toml((shipped / name).read_text(), name), name,
                                                 policy.DEFAULT_LAYER)]
    assert list(built) == parsed_now and len(built) > 2000
    assert [r.pattern.parts for r in built] == [r.pattern.parts for r in parsed_now]
    fields = set(policy.Rule._fields)
    assert fields == {*policy._ROW, "origin", "pattern", "layer"}  # every field is in the row or rebuilt
    # what a Policy files the rules it builds later by, and spells keys with, is what the rules' patterns give
    assert policy._shipped().first == tuple(r.pattern.parts[0] for r in parsed_now)
    assert policy._shipped().parts == {part for r in parsed_now for part in r.pattern.parts}


def test_the_gitleaks_table_from_its_copy_is_the_toml_and_a_snap_parses_no_toml(tmp_path: Path) -> None:
    """Redaction's rule table is kept as a copy too: a second process, whose TOML reader is made to fail, reads the
    copy, gets the table the TOML gives, and redacts with it; nothing TOML is imported by that snap's redaction."""
    code = ("import sys, json\nfrom hoststate import gitleaks, snapshot\n"
            "if sys.argv[1] == 'no-parse':\n"
            "    snapshot.toml_loads = lambda *a: (_ for _ in ()).throw(AssertionError('parsed'))\n"
            "from hoststate import redact\n"
            "print(json.dumps(gitleaks.table(), sort_keys=True))\n"
            "print(redact.redact_text('export GITHUB_TOKEN=ghp_' + 'a1B2' * 9))\n"
            "print(sorted(m for m in sys.modules if m in ('tomli', 'tomllib')))")
    runs = [out.splitlines() for out in _parse_then_read(tmp_path, code)]
    assert len(list(tmp_path.rglob("gitleaks_rules.*.json"))) == 1
    from hoststate import gitleaks
    from hoststate.snapshot import toml_loads

    shipped = toml_loads(Path(gitleaks.TABLE).read_text(encoding="utf-8"))
    assert runs[0][0] == runs[1][0] == json.dumps(shipped, sort_keys=True) and len(shipped["rule"]) > 200
    assert runs[0][1] == runs[1][1] and "a1B2" not in runs[1][1]
    assert runs[1][2] == "[]"
