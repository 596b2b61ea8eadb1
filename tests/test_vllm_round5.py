"""Round 5 of reading vLLM command lines as vLLM resolves them: human-readable integers and argparse choices.

Each expectation is read from vLLM's released source (0.10.2, 0.11.0, 0.11.1, 0.12.0, 0.33.0) and, where the piece is
pure, checked by running vLLM's own function outside the repository:

- Which integer options take ``8k``: ``human_readable_ints`` in EngineArgs.get_kwargs (vllm/engine/arg_utils.py of
  0.10.2-0.12.0: max_model_len, max_num_batched_tokens, kv_cache_memory_bytes) and ``human_readable_int_args`` in
  _compute_kwargs (0.33.0 ~397-409: also max_num_scheduled_tokens, max_num_queued_tokens and
  safetensors_prefetch_block_size). Every other integer option is argparse's ``int``.
- What human_readable_int accepts: its pattern is ``(\\d+(?:\\.\\d+)?)([kKmMgGtT])`` in every version, lower case
  decimal (a fraction allowed), upper case binary (a fraction refused: "Decimals are not allowed with binary
  suffixes"); only 0.33.0 (vllm/utils/argparse_utils.py ~30-75) has multipliers for t and T, so before it ``1T`` falls
  through to ``int()`` and is refused (vllm/engine/arg_utils.py human_readable_int of 0.10.2-0.12.0). _HUMAN_READ is
  what each version's own function returned for each text, run outside the repository.
- Dotted values (``-cc.max_cudagraph_capture_size=1k``): FlexibleArgumentParser.parse_args ``json.loads`` them, else
  keeps the string (vllm/utils/__init__.py ~1903-1907 of 0.10.2 and ~1957-1961 of 0.11.0, vllm/utils/argparse_utils.py
  ~323-327 of 0.11.1 and ~340-344 of 0.12.0); only 0.33.0 tries human_readable_int in between (~478-486). The merged
  JSON goes to ``TypeAdapter(CompilationConfig).validate_json`` (parse_dataclass), a pydantic dataclass in lax mode
  (checked with pydantic 2.14 outside the repository): ``"1k"`` for an int field is refused ("unable to parse string as
  an integer"), ``"1000"`` and ``"1000.0"`` are 1000. ``key+ a,b`` items are JSON-dumped as strings in every version.
- JSON config values: only 0.33.0's ``parse_dataclass`` (vllm/engine/arg_utils.py ~369-374) runs
  ``_expand_json_human_readable_numbers`` (~302-320) first, replacing each bare ``\\b\\d+(?:\\.\\d+)?[kKmMgGtT]\\b``
  outside JSON strings by human_readable_int's digits (run outside the repository: ``{"a": 1k}`` -> ``{"a": 1000}``,
  ``"1k"`` in quotes unchanged, ``1.5K`` raises, so argparse refuses the option). ``--speculative-config`` is
  ``optional_type(json.loads)`` there (~1864), so a bare ``1k`` in it is invalid JSON, as in every earlier version.
- ``--all2all-backend``: ParallelConfig.all2all_backend is a Literal (``| None`` in 0.11.1 and 0.12.0,
  vllm/config/parallel.py ~120-130 and ~125-135; 0.33.0's All2AllBackend ~45-60 without None), which literal_to_kwargs
  turns into argparse choices; _compute_kwargs appends the string "None" where the field admits None, but optional_type
  returns None for "None" and "", not among them: argparse refuses both ("invalid choice: None", checked with argparse
  itself), as it refuses any name outside the Literal.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hoststate.collectors.vllm.argv import normalise
from tests.vllm_lines import BASE, VERSIONS, model_root
from tests.vllm_lines import parsed as _parsed
from tests.vllm_lines import snap as _snap
from tests.vllm_lines import verdict as _verdict


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    return model_root(tmp_path)


# -- 1. the integer options each version reads with human_readable_int -------------------------------------------------

_HUMAN_033 = ("--max-num-scheduled-tokens", "--max-num-queued-tokens", "--safetensors-prefetch-block-size")


@pytest.mark.parametrize("option", _HUMAN_033)
def test_0330_reads_its_new_token_limits_as_human_ints(root, option):
    assert _parsed(f"{BASE} {option} 8k", "0.33.0").args[option[2:].replace("-", "_")] == 8000
    assert _verdict(root, f"{BASE} {option} 8k", f"{BASE} {option} 8000", "0.33.0")[0] == "clean"
    assert _verdict(root, f"{BASE} {option} 8K", f"{BASE} {option} 8192", "0.33.0")[0] == "clean"
    assert _verdict(root, f"{BASE} {option} 8K", f"{BASE} {option} 8000", "0.33.0")[0] == "invalidating"


@pytest.mark.parametrize("option", _HUMAN_033)
def test_0330_refuses_what_human_readable_int_refuses_there(option):
    assert _parsed(f"{BASE} {option} 1.5K", "0.33.0").refusals  # decimals with a binary suffix
    assert _parsed(f"{BASE} {option} lots", "0.33.0").refusals


@pytest.mark.parametrize("version", VERSIONS)
def test_max_num_seqs_stays_a_plain_int(version):
    assert _parsed(f"{BASE} --max-num-seqs 1k", version).refusals  # argparse's int in every version
    assert not _parsed(f"{BASE} --max-num-batched-tokens 8k", version).refusals


def test_max_num_scheduled_tokens_none_is_unset_on_0330(root):
    """``int | None``: optional_type(human_readable_int) reads "None" as None, the parser default."""
    data = _snap(root, f"{BASE} --max-num-scheduled-tokens None", "0.33.0")["vllm"]
    assert "max_num_scheduled_tokens" not in data["args"] and "refused" not in data["cudagraph"]


# -- 2. the suffixes and fractions each version's human_readable_int takes ---------------------------------------------

#: text -> (0.10.2-0.12.0, 0.33.0): the value vLLM's human_readable_int returns, or None where it raises.
_HUMAN_READ = {
    "1k": (1000, 1000), "1K": (1024, 1024), "1.5k": (1500, 1500), "1.5K": (None, None), "0.1k": (100, 100),
    "8m": (8_000_000, 8_000_000), "8M": (8 * 2**20, 8 * 2**20), "1g": (10**9, 10**9), "1G": (2**30, 2**30),
    "1t": (None, 10**12), "1T": (None, 2**40), "2.5t": (None, 2_500_000_000_000), "1.5T": (None, None),
    " 4k ": (4000, 4000), "1_000": (1000, 1000), "1e3": (None, None), "1kb": (None, None),
}


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("text", sorted(_HUMAN_READ))
def test_human_readable_int_as_each_version_reads_it(version, text):
    expected = _HUMAN_READ[text][version == "0.33.0"]
    parsed = normalise(["/models/llama", "--kv-cache-memory-bytes", text], version)
    if expected is None:
        assert any("--kv-cache-memory-bytes" in r for r in parsed.refusals), parsed
    else:
        assert not parsed.refusals and parsed.args["kv_cache_memory_bytes"] == expected, parsed


def test_a_tebibyte_kv_cache_is_its_bytes_on_0330(root):
    assert _verdict(root, f"{BASE} --kv-cache-memory-bytes 1T", f"{BASE} --kv-cache-memory-bytes 1099511627776",
                    "0.33.0")[0] == "clean"
    assert _verdict(root, f"{BASE} --max-model-len 1t", f"{BASE} --max-model-len 1000000000000", "0.33.0")[0] \
        == "clean"


@pytest.mark.parametrize("version", ("0.10.2", "0.11.0", "0.11.1", "0.12.0"))
def test_tera_suffixes_are_refused_before_0330(root, version):
    data = _snap(root, f"{BASE} --kv-cache-memory-bytes 1T", version)["vllm"]
    assert "--kv-cache-memory-bytes" in data["cudagraph"]["refused"]


# -- 3. dotted values: JSON, a human int only on 0.33, else a string an int field refuses ------------------------------

_CC = "--compilation-config.max_cudagraph_capture_size"


@pytest.mark.parametrize("version", ("0.11.1", "0.12.0"))
def test_a_dotted_human_int_is_a_string_an_int_field_refuses_up_to_0120(root, version):
    data = _snap(root, f"{BASE} {_CC}=1k", version)["vllm"]
    assert "max_cudagraph_capture_size" in data["cudagraph"]["refused"], data["cudagraph"]
    assert _verdict(root, f"{BASE} {_CC}=1k", f"{BASE} {_CC}=1000", version)[0] == "invalidating"


def test_a_dotted_human_int_on_0120_short_spelling(root):
    assert "max_cudagraph_capture_size" in _snap(root, f"{BASE} -cc.max_cudagraph_capture_size=1k",
                                                 "0.12.0")["vllm"]["cudagraph"]["refused"]


def test_a_dotted_human_int_is_read_on_0330(root):
    assert _parsed(f"{BASE} {_CC}=1k", "0.33.0").args["compilation_config"] == {"max_cudagraph_capture_size": 1000}
    assert _verdict(root, f"{BASE} -cc.max_cudagraph_capture_size=1k", f"{BASE} {_CC}=1000", "0.33.0")[0] == "clean"
    assert _parsed(f"{BASE} {_CC}=1T", "0.33.0").args["compilation_config"] == {"max_cudagraph_capture_size": 2**40}
    assert _parsed(f"{BASE} {_CC}=1.5K", "0.33.0").refusals  # human_readable_int raises: the string stays, refused


@pytest.mark.parametrize("version", ("0.11.1", "0.12.0", "0.33.0"))
@pytest.mark.parametrize("value", ["'\"1000\"'", "1000.0", "'\" 1_000 \"'"])
def test_a_numeric_string_is_the_number_pydantic_makes_of_it(root, version, value):
    assert _verdict(root, f"{BASE} {_CC}={value}", f"{BASE} {_CC}=1000", version)[0] == "clean"


@pytest.mark.parametrize("version", ("0.10.2", "0.11.0"))
def test_a_key_the_version_lacks_is_ignored_whatever_its_value(version):
    parsed = _parsed(f"{BASE} {_CC}=1k", version)
    assert not parsed.refusals and any("ignores it" in note for note in parsed.notes)


@pytest.mark.parametrize("version", VERSIONS)
def test_plus_list_items_are_strings_in_every_version(version):
    assert _parsed(f"{BASE} --compilation-config.cudagraph_capture_sizes+ 8,1k", version).refusals
    parsed = _parsed(f"{BASE} --compilation-config.cudagraph_capture_sizes+ 8,16", version)
    assert not parsed.refusals and parsed.args["compilation_config"]["cudagraph_capture_sizes"] == [8, 16]


# -- 4. bare human-readable numbers inside 0.33's dataclass-typed JSON options ----------------------------------------

_JSON_1K = """--compilation-config '{"max_cudagraph_capture_size": 1k}'"""
_JSON_1000 = """--compilation-config '{"max_cudagraph_capture_size": 1000}'"""


def test_0330_expands_bare_human_numbers_in_a_config_object(root):
    assert _parsed(f"{BASE} {_JSON_1K}", "0.33.0").args["compilation_config"] == {"max_cudagraph_capture_size": 1000}
    assert _verdict(root, f"{BASE} {_JSON_1K}", f"{BASE} {_JSON_1000}", "0.33.0")[0] == "clean"
    assert _verdict(root, f"{BASE} {_JSON_1K}", f"{BASE} -cc.max_cudagraph_capture_size=1k", "0.33.0")[0] == "clean"


def test_0330_leaves_quoted_text_and_refuses_a_binary_fraction():
    parsed = _parsed("""vllm serve m --kv-transfer-config '{"kv_connector": "1k", "kv_role": "kv_both", """
                     """"kv_buffer_size": 2G}'""", "0.33.0")
    assert parsed.args["kv_transfer_config"] == {"kv_connector": "1k", "kv_role": "kv_both", "kv_buffer_size": 2**31}
    assert _parsed(f"""{BASE} --compilation-config '{{"max_cudagraph_capture_size": 1.5K}}'""", "0.33.0").refusals


@pytest.mark.parametrize("version", ("0.10.2", "0.11.0", "0.11.1", "0.12.0"))
def test_a_bare_human_number_is_invalid_json_before_0330(root, version):
    data = _snap(root, f"{BASE} {_JSON_1K}", version)["vllm"]
    assert "--compilation-config" in data["cudagraph"]["refused"]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_speculative_config_is_plain_json_in_every_version(version):
    spec = """--speculative-config '{"method": "ngram", "num_speculative_tokens": 1k, "prompt_lookup_max": 4}'"""
    assert any("--speculative-config" in r for r in _parsed(f"{BASE} {spec}", version).refusals)


# -- 5. --all2all-backend: argparse choices ---------------------------------------------------------------------------

@pytest.mark.parametrize("version", ("0.11.1", "0.12.0", "0.33.0"))
@pytest.mark.parametrize("value", ["None", "''", "bogus"])
def test_all2all_backend_outside_its_choices_is_refused(root, version, value):
    data = _snap(root, f"{BASE} --all2all-backend {value}", version)["vllm"]
    assert "--all2all-backend" in data["cudagraph"]["refused"], data["cudagraph"]


@pytest.mark.parametrize("version", ("0.11.1", "0.12.0", "0.33.0"))
def test_all2all_backend_choices_are_kept(root, version):
    assert not _parsed(f"{BASE} --all2all-backend deepep_low_latency", version).refusals
    assert _verdict(root, f"{BASE} --all2all-backend naive", f"{BASE} --all2all-backend pplx", version)[0] \
        == "invalidating"


def test_moonep_is_a_choice_of_0330_only():
    assert not _parsed(f"{BASE} --all2all-backend moonep", "0.33.0").refusals
    assert _parsed(f"{BASE} --all2all-backend moonep", "0.12.0").refusals
