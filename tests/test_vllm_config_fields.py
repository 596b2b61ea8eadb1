"""compilation_config keys that are no field of the version's CompilationConfig.

vLLM validates ``--compilation-config`` (JSON, ``-O.KEY``/``--compilation-config.KEY``, a --config file's mapping)
with pydantic into CompilationConfig (vllm/engine/arg_utils.py parse_dataclass: TypeAdapter(cls).validate_json),
its pass_config into PassConfig (CompilationConfig.validate_pass_config_before: PassConfig(**value)). The classes
are plain ``pydantic.dataclasses.dataclass`` up to 0.12.0 (pydantic's default extra="ignore": an unknown key is
dropped) and ``vllm.config.utils.config`` with ConfigDict(extra="forbid") in 0.33.0 (refused). The dotted key after
the first ``.`` is not dash-converted by FlexibleArgumentParser (``pattern = (?<=--)[^\\.]*``), so
``--compilation-config.cudagraph-mode FULL`` sets the key ``cudagraph-mode``. hoststate/data/
vllm_config_fields.json holds each version's input fields, read from its source by
scripts/vllm_config_fields.py; the expectations below were checked against that source and pydantic 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hoststate.collectors.vllm.fields import config_fields_for
from hoststate.collectors.vllm.versions import rules_for
from tests.conftest import VLLM_SRC, data_script, require
from tests.vllm_lines import BASE, VERSIONS, model_root, parsed, verdict

IGNORING = ("0.10.2", "0.11.0", "0.11.1", "0.12.0")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    return model_root(tmp_path)


def test_every_version_has_its_fields_and_the_rules_agree_on_extra():
    for version in VERSIONS:
        table = config_fields_for(version, "compilation_config")
        assert table is not None, version
        assert {"cudagraph_mode", "pass_config", "cudagraph_capture_sizes"} <= set(table["fields"]), version
        assert table["nested"]["pass_config"], version
        refused = rules_for(version)[0].unknown_compilation_keys == "refused"
        assert (table["extra"] == "forbid") == refused, version
    assert config_fields_for("0.11.2", "compilation_config") is None  # another version's fields are never borrowed


UNKNOWN = (
    "--compilation-config.cudagraph-mode FULL",  # the dotted key keeps its dash: not the field cudagraph_mode
    "-O.cudagraph-mode=FULL",
    "--compilation-config '{\"cudagraph-mode\": \"FULL\"}'",
    "--compilation-config '{\"bogus\": 1}'",
    "--compilation-config '{\"cudagraph_modes\": \"NONE\"}'",
    "--compilation-config.pass_config.no_such_pass true",
)


@pytest.mark.parametrize("version", IGNORING)
@pytest.mark.parametrize("extra", UNKNOWN)
def test_an_unknown_key_is_the_server_without_it_where_pydantic_ignores_it(root, extra, version):
    result, findings = verdict(root, BASE, f"{BASE} {extra}", version)
    assert result == "clean", findings
    assert not parsed(f"{BASE} {extra}", version).refusals


@pytest.mark.parametrize("extra", [e for e in UNKNOWN if not e.startswith("-O.")] + [
    "--compilation-config.pass_config.enable_sp true",  # 0.12's name; sequence parallelism left PassConfig in 0.33
    "--compilation-config '{\"use_inductor\": false}'",  # a field up to 0.11.1
])
def test_an_unknown_key_is_refused_where_vllm_forbids_extra(root, extra):
    refusals = parsed(f"{BASE} {extra}", "0.33.0").refusals
    assert any("extra inputs are not permitted" in r for r in refusals), refusals
    result, findings = verdict(root, BASE, f"{BASE} {extra}", "0.33.0")
    assert result == "invalidating" and findings.get("vllm.cudagraph.refused") == "invalidating", findings


def test_a_field_of_one_version_is_kept_where_it_is_a_field():
    assert parsed(f"{BASE} --compilation-config.pass_config.enable_sp true", "0.12.0").args["compilation_config"] \
        == {"pass_config": {"enable_sp": True}}
    assert not parsed(f"{BASE} --compilation-config.pass_config.enable_sp true", "0.12.0").refusals


@pytest.mark.parametrize("script", ["vllm_config_fields", "vllm_choices"])
def test_the_tables_derived_from_vllms_sources_are_what_the_sources_say(script: str):
    require((VLLM_SRC / "vllm-0.33.0" / "vllm").is_dir(),
            f"vLLM's sources unpacked at {VLLM_SRC} (python scripts/vllm_sources.py {VLLM_SRC})")
    module = data_script(script)  # the package under test's tables (installed or checkout)
    assert module.main(["--src", str(VLLM_SRC), "--check"]) == 0, f"run: python scripts/{script}.py --src {VLLM_SRC}"


# --speculative-config: a plain dict (json.loads) that EngineArgs.create_speculative_config builds into
# SpeculativeConfig(**value) when the engine's config is built; 0.33.0 first writes each key's dashes as underscores
# (``{k.replace("-", "_"): v ...}``, vllm/engine/arg_utils.py create_speculative_config), earlier versions do not.

def _spec(body: str) -> str:
    return f"{BASE} --speculative-config '{{\"method\": \"ngram\", {body}}}'"


NGRAM = _spec('"num_speculative_tokens": 3, "prompt_lookup_max": 4')
NGRAM_DASHED = _spec('"num-speculative-tokens": 3, "prompt-lookup-max": 4')


def test_dashed_speculative_keys_are_the_same_setting_on_0330(root):
    result, findings = verdict(root, NGRAM, NGRAM_DASHED, "0.33.0")
    assert result == "clean", findings


@pytest.mark.parametrize("version", IGNORING)
def test_dashed_speculative_keys_are_no_fields_before_0330(root, version):
    # the dashed num-speculative-tokens is ignored: SpeculativeConfig._verify_args refuses a missing count
    result, findings = verdict(root, NGRAM, NGRAM_DASHED, version)
    assert findings.get("vllm.cudagraph.refused") == "invalidating", findings
    # a dashed window end is ignored: the window is the default one, not the one spelled with underscores
    dashed_end = _spec('"num_speculative_tokens": 3, "prompt-lookup-max": 4')
    assert verdict(root, _spec('"num_speculative_tokens": 3'), dashed_end, version)[0] == "clean"
    assert verdict(root, NGRAM, dashed_end, version)[0] == "invalidating"


@pytest.mark.parametrize("version", IGNORING)
def test_an_unknown_speculative_key_is_ignored_before_0330(root, version):
    result, findings = verdict(root, NGRAM, _spec('"num_speculative_tokens": 3, "prompt_lookup_max": 4, "bogus": 1'),
                               version)
    assert result == "clean", findings


def test_an_unknown_speculative_key_is_refused_on_0330(root):
    result, findings = verdict(root, NGRAM, _spec('"num_speculative_tokens": 3, "prompt_lookup_max": 4, "bogus": 1'),
                               "0.33.0")
    assert result == "invalidating" and findings.get("vllm.cudagraph.refused") == "invalidating", findings
