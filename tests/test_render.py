"""The presentation layer (hoststate.render): width in terminal columns, shortening that keeps the words that carry
a line's meaning, guard -v listing what the plain run promises, TOML-style values in show, and the layer's own
import boundary. CLI cases run through click's CliRunner on snapshots snapped from the fixture trees."""

from __future__ import annotations

import shlex
import subprocess
import sys
import textwrap
import unicodedata
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from hoststate.cli import cli
from hoststate.diff import compare
from hoststate.errors import WriteError
from hoststate.guard import evaluate
from hoststate.render.guard import render_guard, running_lines
from hoststate.render.summary import SUMMARY_WIDTH, summarize
from hoststate.render.text import WIDTH, Elide, cells, clip, fit, one_line, wrap
from hoststate.snapshot import load
from tests.conftest import FIXTURES, HOSTS, PYTHONPATH

SERVE = "vllm serve meta-llama/Llama-3.1-8B-Instruct -tp 8 --gpu-memory-utilization 0.85 --max-model-len 16384"
#: A model path a Korean team would use: every Hangul syllable takes two terminal columns.
KOREAN = "/data/모델/한국어-대화-모델/라마-3.1-8B-인스트럭트-한국어-미세조정-버전-2024-최종"
VERSION = ["--vllm-version", "0.12.0"]


def columns(line: str) -> int:
    """A line's terminal columns, counted here independently of the code under test."""
    return sum(0 if unicodedata.combining(c) else 2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def invoke(*args: str):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=True)
    return result


@pytest.fixture(scope="module")
def seed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The seed scenario's two snapshots (base.toml: -O1; exp.toml: DSA WQs enabled, no -O1) and one without
    a vLLM description (novllm.toml)."""
    d = tmp_path_factory.mktemp("render")
    for name, tree, cmd in (("base.toml", "seed-baseline", ["--vllm-cmd", SERVE + " -O1"]),
                            ("exp.toml", "seed-experiment", ["--vllm-cmd", SERVE])):
        result = invoke("snap", "-q", "--root", str(HOSTS / tree), *cmd, *VERSION, "-o", str(d / name))
        assert result.exit_code == 0, result.output
    return d


# -- columns -------------------------------------------------------------------------------------------------------


def test_width_counts_terminal_columns() -> None:
    assert cells("abc") == 3
    assert cells("한국어") == 6 and cells("ｆｕｌｌ") == 8  # wide and fullwidth: two columns each
    assert cells("e\u0301") == 1  # a combining accent takes none
    assert cells("\u1112\u1161\u11ab") == 2  # 한 decomposed (NFD, as some file systems store it): one syllable
    cut = clip("가" * 50, 41)
    assert cells(cut) <= 41 and cut.startswith("가") and cut.endswith("가") and "..." in cut


@given(st.lists(st.sampled_from(["a", "bb", "dsa.devices.*", "x" * 30, "y" * 140, "", "  "]), max_size=30),
       st.integers(min_value=8, max_value=130), st.integers(0, 6), st.booleans())
def test_wrap_breaks_ascii_text_as_textwrap_does(words: list[str], width: int, indent: int, long: bool) -> None:
    """The columns-aware wrap is textwrap's on ASCII (reports keep their layout byte for byte)."""
    text = " ".join(words)
    first, rest = " " * indent, " " * (indent + 2)
    assert wrap(text, width, first, rest, break_long=long) == textwrap.wrap(
        text, width=width, initial_indent=first, subsequent_indent=rest, break_long_words=long,
        break_on_hyphens=False)


def test_fit_and_one_line_count_wide_characters() -> None:
    lines = fit(["vllm.model: ", Elide('"' + KOREAN + '"'), " -> ", Elide('"' + KOREAN[::-1] + '"')], 80)
    assert len(lines) == 1 and columns(lines[0]) <= 80 and " -> " in lines[0]
    wrapped = fit(["  " + "한국어 " * 40], 60, 6)
    assert all(columns(line) <= 60 for line in wrapped) and len(wrapped) > 2
    line = one_line(["model ", Elide(KOREAN), " -> ", Elide(KOREAN)], 50)
    assert columns(line) <= 50 and " -> " in line and line.startswith("model /data/")


# -- shortening keeps the words --------------------------------------------------------------------------------------


def test_an_ignored_summary_line_keeps_its_arrow() -> None:
    """The digests of two snapshots are long values: the line shortens them, not the ``->`` between them."""
    base, exp = (load(FIXTURES / "snapshots" / f"seed-{n}.toml") for n in ("baseline", "experiment"))
    lines = {s.subsystem: s.text for s in summarize(compare(base, exp, include_ignored=True).findings)}
    host = lines["host"]
    assert host.startswith('snapshot: digest "sha256:') and '" -> "sha256:' in host, host
    assert cells(host) <= SUMMARY_WIDTH and "..." in host


def test_fleet_digest_warning_keeps_differs_from_content(tmp_path: Path) -> None:
    from hoststate.fleet import run_fleet
    from hoststate.render.fleet import render

    text = (FIXTURES / "snapshots" / "seed-baseline.toml").read_text(encoding="utf-8")
    stored = load(FIXTURES / "snapshots" / "seed-baseline.toml")["hoststate"]["digest"]
    for i in range(3):
        (tmp_path / f"node{i}.toml").write_text(text, encoding="utf-8")
    (tmp_path / "node1.toml").write_text(text.replace(stored, "sha256:" + "0" * 64), encoding="utf-8")
    out = render(run_fleet([str(tmp_path)], jobs=1), "text")
    warned = [line for line in out.splitlines() if "stored digest" in line]
    assert warned and all(cells(line) <= WIDTH for line in out.splitlines()), out
    flat = " ".join(out.split())
    assert "differs from content (" in flat and "); grouped by content" in flat, out


@pytest.mark.parametrize("options", [["--vllm-url", "http://127.0.0.1:9"],
                                     ["--vllm-url", "http://127.0.0.1:9/" + "v" * 90]])
def test_a_vllm_url_refusal_keeps_connection_refused(seed: Path, options: list[str]) -> None:
    """The unreadable values name their reason whole (``Connection refused``); the URL is what may be shortened."""
    result = evaluate(seed / "base.toml", root=str(HOSTS / "seed-baseline"), vllm_url=options[1])
    text = render_guard(result, baseline_snap=result.baseline_snapshot)
    lines = text.splitlines()
    assert all(cells(line) <= WIDTH for line in lines), text
    flat = " ".join(text.split())
    markers = flat.count("<unreadable (error):")
    assert markers >= 4 and flat.count("[Errno 111] Connection refused") == markers + 1, text  # +1: the note
    assert "Conne..." not in text and "did not answer (error: /version: [Errno 111] Connection refused)" in flat


# -- guard -v ----------------------------------------------------------------------------------------------------------


def test_guard_verbose_lists_the_info_findings_and_no_empty_section(seed: Path) -> None:
    plain = invoke("guard", "--baseline", str(seed / "base.toml"), "--root", str(HOSTS / "seed-baseline"),
                   "--vllm-cmd", SERVE + " -O1", *VERSION)
    verbose = invoke("guard", "--baseline", str(seed / "base.toml"), "--root", str(HOSTS / "seed-baseline"),
                     "--vllm-cmd", SERVE + " -O1", *VERSION, "-v")
    assert plain.exit_code == verbose.exit_code == 0, verbose.stderr
    assert "(0 warning, 3 info not listed; -v lists them)" in plain.stderr
    assert "(0 findings" not in verbose.stderr and "WARNING (" not in verbose.stderr, verbose.stderr
    assert "INFO (3 findings, 3 rules)" in verbose.stderr
    listed = verbose.stderr.split("INFO (3 findings, 3 rules)")[1]
    assert "\n  gpu:\n" in listed and "\n  packages:\n" in listed, verbose.stderr


def test_guard_verbose_lists_warnings_then_infos(seed: Path) -> None:
    args = ["guard", "--baseline", str(seed / "base.toml"), "--root", str(HOSTS / "seed-experiment"),
            "--vllm-cmd", SERVE, *VERSION, "--accept", "dsa.**", "--accept", "vllm.**"]
    plain, verbose = invoke(*args), invoke(*args, "-v")
    assert "18 warning, 15 info not listed; -v lists them" in plain.stderr, plain.stderr
    text = verbose.stderr
    assert text.index("WARNING (18 findings, 3 rules)") < text.index("INFO (15 findings, 8 rules)"), text
    assert "accel_config.saved.differences: list changed" in text.split("INFO (15 findings")[1]


# -- the command line a non-comparable run starts -------------------------------------------------------------------


@pytest.fixture(scope="module")
def accepted(seed: Path):
    return evaluate(seed / "base.toml", root=str(HOSTS / "seed-experiment"), vllm_cmd=SERVE, vllm_version="0.12.0",
                    accept=["dsa.**", "vllm.**"])


def test_the_running_line_is_pasteable(accepted) -> None:
    command = ["sh", "-c", "echo 'it ran' $HOSTSTATE_GUARD_VERDICT", "a b"]
    (line,) = running_lines(accepted, command)
    assert line == f"hoststate guard: running as non-comparable (78 accepted): {shlex.join(command)}"
    assert shlex.split(line.split(": ", 2)[2]) == command


def test_a_long_running_line_shortens_arguments_not_words(accepted) -> None:
    script = "import time; " + "; ".join(f"x{i} = {i} * 2" for i in range(40))
    command = ["python3", "-c", script, "--label", KOREAN]
    lines = running_lines(accepted, command)
    assert len(lines) == 1 and columns(lines[0]) <= WIDTH, lines
    head, _, shown = lines[0].partition(": running as non-comparable (78 accepted): ")
    assert head == "hoststate guard" and shown.startswith("python3 -c 'impor") and " --label '/data/" in shown
    assert shown.count("...") == 2 and shown.endswith("최종'")  # each long argument cut in its middle, quotes kept


def test_guard_prints_the_running_line(seed: Path) -> None:
    result = invoke("guard", "--baseline", str(seed / "base.toml"), "--root", str(HOSTS / "seed-experiment"),
                    "--vllm-cmd", SERVE, *VERSION, "--accept", "dsa.**", "--accept", "vllm.**", "--",
                    "true", "it's")
    assert result.exit_code == 0, result.stderr
    assert "running as non-comparable (78 accepted): true 'it'\"'\"'s'\n" in result.stderr


# -- show --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["seed-baseline.toml", "seed-experiment.toml", "big-a.toml"])
def test_show_prints_toml_booleans(name: str) -> None:
    result = invoke("show", str(FIXTURES / "snapshots" / name))
    assert result.exit_code == 0, result.output
    assert "present=" in result.stdout
    words = set(result.stdout.replace("=", " ").split())
    assert not words & {"True", "False"}, result.stdout
    assert {"true", "false"} & words


# -- export -o refuses like snap -o --------------------------------------------------------------------------------


def test_export_refuses_an_existing_file_without_force(tmp_path: Path) -> None:
    snap = str(FIXTURES / "snapshots" / "seed-baseline.toml")
    out = tmp_path / "hoststate.prom"
    out.write_text("kept\n")
    refused = invoke("export", "prometheus", snap, "-o", str(out))
    assert isinstance(refused.exception, WriteError) and "exists; use --force to replace it" in str(refused.exception)
    assert out.read_text() == "kept\n"
    snapped = invoke("snap", "-q", "--root", str(HOSTS / "seed-baseline"), "--only", "system", "-o", str(out))
    assert isinstance(snapped.exception, WriteError) and str(snapped.exception) == str(refused.exception)
    forced = invoke("export", "prometheus", snap, "-o", str(out), "--force")
    assert forced.exit_code == 0 and out.read_text().startswith("# HELP"), forced.output


# -- the promised width with a Korean model path ---------------------------------------------------------------------


def test_a_korean_model_path_keeps_every_report_within_the_width(tmp_path: Path) -> None:
    for name, tree, model in (("a.toml", "seed-baseline", KOREAN), ("b.toml", "seed-experiment", KOREAN + "-새버전")):
        result = invoke("snap", "-q", "--root", str(HOSTS / tree), "--vllm-cmd", f"vllm serve {model} -tp 8 -O1",
                        *VERSION, "-o", str(tmp_path / name))
        assert result.exit_code == 0, result.output
    a, b = str(tmp_path / "a.toml"), str(tmp_path / "b.toml")
    guard = ["guard", "--baseline", a, "--root", str(HOSTS / "seed-experiment"), "--vllm-cmd",
             f"vllm serve {KOREAN}-새버전 -tp 8 -O1", *VERSION]
    runs = {
        "diff": invoke("diff", a, b), "diff -v": invoke("diff", a, b, "-v"),
        "diff --all": invoke("diff", a, b, "--all"), "show": invoke("show", b), "check": invoke("check", b),
        "guard": invoke(*guard), "guard -v": invoke(*guard, "-v"), "fleet -v": invoke("fleet", str(tmp_path), "-v"),
    }
    assert KOREAN in " ".join(runs["show"].stdout.split()).replace(" ", ""), runs["show"].stdout
    assert "모델" in runs["diff -v"].stdout and "모델" in runs["guard -v"].stderr
    for what, result in runs.items():
        out = result.stdout + result.stderr
        assert result.exit_code in (0, 1) or (what.startswith("guard") and result.exit_code == 3)
        wide = [(columns(line), line) for line in out.splitlines() if columns(line) > WIDTH]
        assert not wide, (what, wide)


# -- the layer's import boundary ------------------------------------------------------------------------------------


@pytest.mark.parametrize("module", ["hoststate.render.show", "hoststate.render.check", "hoststate.check"])
def test_show_and_check_load_no_diff_or_policy_module(module: str) -> None:
    code = (f"import sys, {module}\n"
            "print(sorted(m for m in sys.modules if m.startswith(('hoststate.diff', 'hoststate.policy', "
            "'hoststate.positions', 'hoststate.digest', 'hoststate.report', 'hoststate.render.diff', "
            "'hoststate.render.findings', 'hoststate.render.summary'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": PYTHONPATH, "PATH": "/usr/bin:/bin"}, check=True).stdout
    assert out.strip() == "[]", out


def test_renderers_are_chosen_by_a_table() -> None:
    """Every renderer module names its formats in one RENDERERS table; an unknown format is a ValueError."""
    from hoststate.render import check, diff, fleet, results, show

    assert set(diff.RENDERERS) == set(fleet.RENDERERS) == set(check.RENDERERS) == set(results.RENDERERS) == {
        "text", "json", "markdown"}
    assert set(show.RENDERERS) == {"text", "json"}
    with pytest.raises(ValueError, match="yaml"):
        check.render_checks([], "yaml")


def test_the_report_module_is_a_face_of_the_layer() -> None:
    """Imports made before hoststate.render existed (``from hoststate.report import ...``) get the layer's objects."""
    import hoststate.report as face
    from hoststate.diff import only
    from hoststate.render import diff, findings, guard, summary, text

    assert face.render_diff is diff.render_diff and face.render_guard is guard.render_guard
    assert face.summarize is summary.summarize and face.headline is summary.headline
    assert face.importance is findings.importance and face.safe is text.safe and face.show_value is text.show_value
    assert face.filter_paths is only
    assert all(hasattr(face, name) for name in face.__all__)
