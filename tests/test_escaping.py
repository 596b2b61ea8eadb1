"""Invisible characters in keys and host names are escaped in every report (hoststate.render.text.safe, the one escaping
helper): zero-width and bidirectional format characters, fillers (U+3164, U+115F, U+FFA0), spaces other than
U+0020, private-use and unassigned code points, so a planted key cannot look identical to a real one."""

from __future__ import annotations

import os
import subprocess
import sys
import unicodedata
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hoststate.digest import digest
from hoststate.render.text import _hidden, safe
from hoststate.snapshot import loads, to_toml
from tests.conftest import FIXTURES, PYTHONPATH

SEED = FIXTURES / "snapshots" / "seed-baseline.toml"

#: (character, its escape): one of each kind that renders as nothing or as an ordinary space.
HIDDEN = (
    ("\u200b", "\\u200b"),  # zero-width space (Cf)
    ("\u2060", "\\u2060"),  # word joiner (Cf)
    ("\ufeff", "\\ufeff"),  # zero-width no-break space (Cf)
    ("\u202e", "\\u202e"),  # right-to-left override (Cf)
    ("\u00ad", "\\xad"),  # soft hyphen (Cf)
    ("\U000e0041", "\\U000e0041"),  # tag letter A (Cf)
    ("\u3164", "\\u3164"),  # Hangul filler (Lo)
    ("\u115f", "\\u115f"),  # Hangul choseong filler (Lo)
    ("\uffa0", "\\uffa0"),  # halfwidth Hangul filler (Lo)
    ("\u2800", "\\u2800"),  # braille blank (So)
    ("\ufe0f", "\\ufe0f"),  # variation selector (Mn)
    ("\u00a0", "\\xa0"),  # no-break space (Zs)
    ("\u3000", "\\u3000"),  # ideographic space (Zs)
    ("\u2028", "\\u2028"),  # line separator (Zl)
    ("\ue000", "\\ue000"),  # private use (Co)
    ("\U0010fffd", "\\U0010fffd"),  # private use, plane 16 (Co)
    ("\u0378", "\\u0378"),  # unassigned (Cn)
)


@pytest.mark.parametrize(("char", "escape"), HIDDEN, ids=[f"U+{ord(c):04X}" for c, _ in HIDDEN])
def test_safe_escapes_every_invisible_kind(char: str, escape: str) -> None:
    assert safe(f"VLLM_X{char}") == f"VLLM_X{escape}"


def test_safe_keeps_visible_text_and_escapes_every_hidden_category() -> None:
    visible = "café naïve 中文 Ελληνικά русский עברית 😀 a~b"
    assert safe(visible) == visible
    hidden = {"Cc", "Cf", "Zl", "Zp", "Cs", "Co", "Cn"}
    for code in range(0x110000):
        char = chr(code)
        if unicodedata.category(char) in hidden or (unicodedata.category(char) == "Zs" and char != " "):
            assert safe(char) != char, f"U+{code:04X}"


def _planted(tmp_path: Path) -> tuple[Path, Path, str]:
    """The seed baseline, and a copy whose host name and one env key differ from it only by invisible characters."""
    base = loads(SEED.read_bytes(), str(SEED))
    cur = loads(SEED.read_bytes(), str(SEED))
    real = "VLLM_NGRAM_NUM_THREADS_CAP"
    planted = real + "\u200b\u3164"
    cur["env"][planted] = "64"
    cur["hoststate"]["hostname"] = base["hoststate"]["hostname"] + "\u115f\ufeff"
    cur["hoststate"]["digest"] = digest(cur)
    paths = tmp_path / "base.toml", tmp_path / "cur.toml"
    paths[0].write_text(to_toml(base), encoding="utf-8")
    paths[1].write_text(to_toml(cur), encoding="utf-8")
    return paths[0], paths[1], planted


def _run(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": PYTHONPATH, "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "hoststate", *args], capture_output=True, text=True, env=env,
                          timeout=300, check=False)


def test_reports_escape_a_planted_look_alike_key_and_host_name(tmp_path) -> None:
    base, cur, planted = _planted(tmp_path)
    outputs = {
        "diff text": _run("diff", str(base), str(cur), "--all"),
        "diff markdown": _run("diff", str(base), str(cur), "--all", "--format", "markdown"),
        "show": _run("show", str(cur)),
        "fleet": _run("fleet", str(base), str(cur)),
    }
    for name, proc in outputs.items():
        assert proc.returncode in (0, 1), (name, proc.stderr)
        text = proc.stdout + proc.stderr
        for char in ("\u200b", "\u3164", "\u115f", "\ufeff"):
            assert char not in text, (name, f"U+{ord(char):04X}")
    for name in ("diff text", "diff markdown"):
        assert "VLLM_NGRAM_NUM_THREADS_CAP\\u200b\\u3164" in outputs[name].stdout, name
    assert "\\u115f\\ufeff" in outputs["show"].stdout
    assert planted not in outputs["diff text"].stdout


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=60))
def test_nothing_hidden_survives_safe(text: str) -> None:
    shown = safe(text)
    assert not any(_hidden(char) for char in shown), ascii(shown)
    assert "\n" not in shown and "\x1b" not in shown


def test_digest_prints_a_stored_digest_escaped(tmp_path) -> None:
    """`hoststate digest` prints text from the file: a planted digest cannot hide characters or start a line."""
    snap = loads(SEED.read_bytes(), str(SEED))
    snap["hoststate"]["digest"] = "sha256:\u200b\nverdict: clean\u3164"
    path = tmp_path / "planted.toml"
    path.write_text(to_toml(snap), encoding="utf-8")
    proc = _run("digest", str(path))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "sha256:\\u200b\\nverdict: clean\\u3164\n"
