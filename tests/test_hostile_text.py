"""Text that is not UTF-8 or is hostile never ends in ``internal error``: through the real command line, each case
exits as documented and writes a snapshot that is valid UTF-8 TOML, with every undecodable byte kept as ``\\xNN``
and every other lone surrogate as ``\\uNNNN`` (hoststate.text, docs/security.md)."""

from __future__ import annotations

import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hoststate.collectors.vllm.log import plain
from hoststate.snapshot import loads, to_toml
from hoststate.snapshot import toml_loads as loads_toml
from hoststate.text import MAX_NESTING, NESTED_TOO_DEEPLY, clean
from tests.conftest import FIXTURES, HOSTS, PYTHONPATH
from tests.test_procfiles import SERVE, children  # noqa: F401 - children is a fixture

SNAP = FIXTURES / "snapshots" / "seed-baseline.toml"
ROOT = HOSTS / "seed-baseline"
#: Bytes that are not UTF-8, as argv/environ/file-name strings carry them (surrogateescape).
FF, FE = os.fsdecode(b"\xff"), os.fsdecode(b"\xfe")


def hoststate(*args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The real command line; argv and environment strings with surrogates reach it as the raw bytes."""
    full = {**os.environ, "PYTHONPATH": PYTHONPATH, **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "hoststate", *args], capture_output=True, env=full, cwd=cwd,
                          timeout=300, check=False)
    err = proc.stderr.decode("utf-8", "backslashreplace")
    assert "internal error" not in err and "Traceback" not in err, err
    return proc


def written(path: Path) -> dict:
    """The snapshot at ``path``: valid UTF-8 (strict decoding) and a valid snapshot."""
    return loads(path.read_bytes().decode("utf-8"), str(path))


def test_environment_label_and_vllm_cmd_with_undecodable_bytes(tmp_path) -> None:
    out = tmp_path / "out.toml"
    proc = hoststate("snap", "-q", "--root", str(ROOT), "--only", "env,vllm", "-o", str(out),
                     "--label", f"run {FF}\u200b", "--vllm-cmd", f"vllm serve /models/m{FE} -tp 2",
                     env={"VLLM_ODD": f"a{FF}b", f"VLLM_NAME_{FE}": "1"})
    assert proc.returncode == 0, proc.stderr
    snap = written(out)
    assert snap["hoststate"]["label"] == "run \\xff\u200b"
    assert snap["env"]["VLLM_ODD"] == "a\\xffb" and snap["env"]["VLLM_NAME_\\xfe"] == "1"
    assert snap["vllm"]["args"]["model"] == "/models/m\\xfe"
    assert snap["vllm"]["args"]["tensor_parallel_size"] == 2


def test_guard_save_current_with_undecodable_command_and_baseline_name(tmp_path) -> None:
    baseline = Path(os.fsdecode(os.fsencode(tmp_path) + b"/base\xfd.toml"))
    shutil.copyfile(SNAP, baseline)
    out = tmp_path / "current.toml"
    proc = hoststate("guard", "--baseline", str(baseline), "--root", str(ROOT), "--only", "system", "--accept", "**",
                     "--save-current", str(out), "--", "true", f"x{FF}")
    assert proc.returncode == 0, proc.stderr
    table = written(out)["guard"]
    assert "x\\xff" in table["command"] and table["baseline"].endswith("base\\xfd.toml")


def test_a_dist_info_name_with_undecodable_bytes_on_pythonpath(tmp_path) -> None:
    """Anyone who can write a directory on the import path can plant such a name: the snap still succeeds."""
    site = os.fsencode(tmp_path / "site")
    for name in (b"vllm-0.9\xfe.dist-info", b"nvidia_odd\xff-1.0.dist-info", b"torch\xff.dist-info"):
        os.makedirs(site + b"/" + name)
    out = tmp_path / "out.toml"
    proc = hoststate("snap", "-q", "--only", "packages", "-o", str(out),
                     env={"PYTHONPATH": os.pathsep.join([os.fsdecode(site), PYTHONPATH])})
    assert proc.returncode == 0, proc.stderr
    found = written(out)["packages"]
    assert found["vllm"] == "0.9\\xfe" and found["nvidia-odd\\xff"] == "1.0"


def test_a_servers_pythonpath_with_an_undecodable_dist_info_name(tmp_path, children) -> None:  # noqa: F811
    """A running server's import path is scanned from its files: a planted name there must not fail the snap."""
    site = os.fsencode(tmp_path / "planted")
    os.makedirs(site + b"/vllm-0.7\xff.dist-info")
    os.makedirs(site + b"/nvidia_x\xfe-2.0.dist-info")
    (tmp_path / "serve").write_text(SERVE)
    python = os.path.realpath(sys.executable)
    child = children([python, str(tmp_path / "serve"), "serve", "m"], cwd=tmp_path,
                     env={"PATH": "/usr/bin:/bin", "PYTHONPATH": os.fsdecode(site)})
    out = tmp_path / "out.toml"
    proc = hoststate("snap", "-q", "--only", "vllm", "--vllm-pid", str(child.pid), "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    vllm = written(out)["vllm"]
    assert vllm["packages"]["vllm"] == "0.7\\xff" and vllm["packages"]["nvidia-x\\xfe"] == "2.0"


@pytest.mark.parametrize("levels", [300, 600, 900])
def test_very_deep_json_in_vllm_cmd(tmp_path, levels: int) -> None:
    """A JSON option nested hundreds deep (any user's server argv can hold one) parses, then is cut at
    hoststate.text.MAX_NESTING (by the redaction pass first, which would otherwise exhaust the stack past ~500):
    the TOML writer never recurses that deep, the vllm section is kept and the snapshot stays readable. The deep
    value sits in inductor_compile_config, a free-form mapping field of CompilationConfig (a key that is no field
    is refused by 0.33, whose rules an unknown version gets, and ignored before)."""
    deep = "[" * levels + "]" * levels
    out = tmp_path / "out.toml"
    value = f'{{"mode": 3, "inductor_compile_config": {{"x": {deep}}}}}'
    proc = hoststate("snap", "-q", "--root", str(ROOT), "--only", "vllm", "-o", str(out),
                     "--vllm-cmd", f"vllm serve m --compilation-config '{value}'")
    assert proc.returncode == 0, proc.stderr
    assert written(out)["collectors"]["vllm"]["status"] == "ok", written(out)["collectors"]["vllm"]
    x = written(out)["vllm"]["args"]["compilation_config"]["inductor_compile_config"]["x"]
    depth = 0
    while isinstance(x, list):
        x, depth = x[0], depth + 1
    assert x == NESTED_TOO_DEEPLY and depth == MAX_NESTING - 5  # vllm.args.compilation_config.inductor_...x: 5


#: vLLM log records whose values are no JSON or plain repr: what each becomes in the snapshot.
HOSTILE_ARGS = (
    ("{'model': b'\\xff\\xfe', 'seed': 1}", {"model": "\\xff\\xfe", "seed": 1}),
    ("{'model': 'm', 'tokenizer': ...}", {"model": "m", "tokenizer": "..."}),
    # vLLM's repr of a model path that is not UTF-8 (surrogateescape), and a lone surrogate of no byte
    ("{'model': '/models/\\udcff-x', 'served_model_name': ['\\ud800']}",
     {"model": "/models/\\xff-x", "served_model_name": ["\\ud800"]}),
    ("{'model': 'm', 'seed': -'x', 'max_model_len': -5}", {"model": "m", "seed": "-'x'", "max_model_len": -5}),
    ("{'model': 'm', 'x': 1j, 'y': 123456789012345678901234567890}",
     {"model": "m", "x": "1j", "y": "123456789012345678901234567890"}),
)


def _log(tmp_path: Path, records: list[str]) -> Path:
    path = tmp_path / "server.log"
    path.write_text("".join(records), encoding="utf-8", errors="surrogatepass")
    return path


def _snap_log(tmp_path: Path, log: Path) -> dict:
    out = tmp_path / "out.toml"
    proc = hoststate("snap", "-q", "--root", str(ROOT), "--only", "vllm", "--vllm-log", str(log), "-o", str(out),
                     "--force")
    assert proc.returncode == 0, proc.stderr
    return written(out)["vllm"]


def test_hostile_non_default_args_values(tmp_path) -> None:
    for record, expected in HOSTILE_ARGS:
        log = _log(tmp_path, [f"INFO 10-06 09:12:40 [utils.py:233] non-default args: {record}\n"])
        assert _snap_log(tmp_path, log)["log"]["non_default_args"] == expected, record


def test_very_deep_values_in_the_log(tmp_path) -> None:
    deep_json = "[" * 5000 + "]" * 5000  # deeper than json's recursion limit
    deep_repr = "[" * 40 + "]" * 40  # parses, but deeper than a snapshot may nest (32)
    log = _log(tmp_path, [
        "INFO 10-06 09:12:39 [api_server.py:1839] vLLM API server version 0.11.0\n",
        f"INFO 10-06 09:12:40 [utils.py:233] non-default args: {{'model': 'm', 'x': {deep_repr}}}\n",
        "INFO 10-06 09:12:41 [core.py:77] Initializing a V1 LLM engine (v0.11.0) with config: model='m', "
        f"seed={deep_json}, compilation_config={{\"level\": 3, \"x\": {deep_repr}}}\n",
    ])
    vllm = _snap_log(tmp_path, log)
    x = vllm["log"]["non_default_args"]["x"]
    depth = 0
    while isinstance(x, list):
        x, depth = x[0], depth + 1
    assert depth == 11 and x == "<nested deeper than 12 levels>"  # 12 levels with the args table itself
    assert vllm["log"]["config"]["seed"] == deep_json  # kept as the text it was


def test_a_log_named_with_undecodable_bytes(tmp_path) -> None:
    log = Path(os.fsdecode(os.fsencode(tmp_path) + b"/server\xff.log"))
    log.write_text("INFO 10-06 09:12:40 [utils.py:233] non-default args: {'model': 'm'}\n")
    assert _snap_log(tmp_path, log)["log"]["path"].endswith("server\\xff.log")


@settings(max_examples=300, deadline=None)
@given(st.recursive(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=12)
                    | st.binary(max_size=8) | st.integers() | st.just(...),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                    max_leaves=20))
def test_any_parsed_log_value_becomes_utf8_toml(value) -> None:
    """Whatever a log value parses to (surrogates included), plain() makes something TOML writes as UTF-8."""
    text = to_toml({"vllm": {"log": {"non_default_args": {"x": plain(value)}}}})
    assert loads_toml(text.encode("utf-8").decode("utf-8"))["vllm"]["log"]["non_default_args"]["x"] is not None


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x10FFFF), max_size=40))
def test_clean_is_utf8_and_keeps_valid_text(text: str) -> None:
    cleaned = clean(text)
    cleaned.encode("utf-8")  # never raises: no surrogate is left
    if not any(0xD800 <= ord(c) <= 0xDFFF for c in text):
        assert cleaned == text


def test_a_literal_the_compiler_warns_about_is_parsed_without_a_word_on_stderr(tmp_path) -> None:
    """``1if 1else 2`` parses, with a SyntaxWarning Python prints on stderr by default: snap prints nothing."""
    log = _log(tmp_path, ["INFO 10-06 09:12:40 [utils.py:233] non-default args: "
                          "{'model': 'm', 'x': 1if 1else 2}\n"])
    out = tmp_path / "out.toml"
    proc = hoststate("snap", "-q", "--root", str(ROOT), "--only", "vllm", "--vllm-log", str(log), "-o", str(out))
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr
    args = written(out)["vllm"]["log"]["non_default_args"]
    assert args["model"] == "m" and args["x"] == "1 if 1 else 2", args


class _DeepModels(http.server.BaseHTTPRequestHandler):
    """A server whose /v1/models answer nests 100,000 levels deep."""

    def do_GET(self):  # noqa: N802 - http.server's name
        if self.path.startswith("/version"):
            body = b'{"version": "0.11.1"}'
        elif self.path.startswith("/v1/models"):
            body = b'{"object": "list", "data": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_a_models_answer_nested_100000_levels_is_an_error_of_that_endpoint(tmp_path) -> None:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _DeepModels)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    out = tmp_path / "out.toml"
    try:
        proc = hoststate("snap", "--only", "vllm", "--vllm-url", f"http://127.0.0.1:{server.server_address[1]}",
                         "-o", str(out))
    finally:
        server.shutdown()
        server.server_close()
    assert proc.returncode == 0, proc.stderr
    assert b"RecursionError" not in proc.stderr and b"Traceback" not in proc.stderr, proc.stderr
    snap = written(out)
    assert snap["collectors"]["vllm"]["status"] in ("ok", "partial"), snap["collectors"]["vllm"]
    url = snap["vllm"]["url"]
    assert url["version"] == "0.11.1" and url["models_error"] == "/v1/models: JSON nested deeper than 64 levels"
