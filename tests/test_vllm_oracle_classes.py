"""The vLLM oracle grown by the classes of command line hoststate used to read unlike vLLM, for every recorded version.

Each expectation below is derived from vLLM's own code or data, and the derivation is stated with its class. The same
command lines (scripts/vllm_oracle_classes.json, generated from this module's tables) were then run through real,
unmodified vLLM by scripts/vllm_oracle.py --cases, and fixtures/vllm/oracle/classes/<version>.json records what it did
(the last tests compare hoststate with those records). On 0.12.0 every derived outcome was what vLLM did; on 0.33.0
one was not (a false key of a ``vllm serve`` config file writes nothing there either, because the top-level parser
pulls the file; the derivation below now says so). Every version in VERSIONS is recorded; the chunked-prefill rows
are not asserted by derivation for 0.10.2 and 0.11.0, whose records show the flag kept off for pooling models only:

- **Abbreviations** (vLLM's FlexibleArgumentParser keeps argparse's ``allow_abbrev=True``): the expected outcome is
  what Python's own argparse does with a parser holding exactly the option strings recorded from that version's
  parser (fixtures/vllm/oracle/options/<version>.json): a unique prefix is that option, two or more matches are
  argparse's "ambiguous option" error. The oracle here is argparse itself, not a reimplementation.
- **-O.x then -O2** (0.33's FlexibleArgumentParser.parse_args, read in vllm/utils/argparse_utils.py): every ``-O<x>``
  but ``-O`` becomes ``--optimization-level <x>``, so ``-O.mode=3`` is the level ``.mode=3``; argparse keeps the last
  value, and only a level outside 0-3 left at the end is refused (VllmConfig). 0.12 rewrites ``-O.x=y`` to
  ``-cc.x=y`` (deprecated) and ``-O2`` to the level: both hold.
- **--config YAML** (FlexibleArgumentParser._pull_args_from_config / load_config_file; 0.33 read in
  vllm/utils/argparse_utils.py; up to 0.12 the older load_config_file that writes ``str(value)`` for anything that is
  not a bool or a list and drops false keys; 0.33 writes ``--no-<key>`` only where the pulling parser has it, which
  for ``vllm serve`` is the top-level parser, without serve's options): the file is pulled only for the exact token
  ``--config``; a second
  ``--config`` fails its assertion; a non-YAML extension and, for ``vllm serve``, no model on the command line or in
  the file raise ValueError. A nested mapping is ``str()`` up to 0.12, which ``parse_dataclass`` (``validate_json``)
  refuses for --compilation-config, and JSON in 0.33, which starts.
- **The speculative method vLLM runs** (SpeculativeConfig.__post_init__, read in vllm/config/speculative.py): a draft
  ``model`` without a ``method`` is detected by name ("eagle-" -> eagle, "eagle3" -> eagle3), else it is a plain
  draft model, which vLLM up to 0.12 refuses ("Speculative decoding with draft model is not supported yet", as the
  recorded 0.10.2 case spec-draft-model shows) and 0.33 runs. An MTP method with no draft model drafts with the
  served model's own MTP layers: hf_config_override makes an MTP draft only of a config naming them
  (``num_nextn_predict_layers`` for DeepSeek-V3, recorded as 1), so Llama-3.1 with method mtp has no MTP draft and
  is refused (0.33: "Unsupported speculative method: 'mtp'"; 0.11-0.12: the draft-model refusal); 0.10.2 takes
  ``deepseek_mtp`` only for its listed model types.
- **Quantization overrides** (ModelConfig._verify_quantization and each method's override_quantization_method): see
  the table QUANT below.
- **Scheduler limits with chunked prefill off** (SchedulerConfig._verify_args / verify_max_model_len): with
  ``--no-enable-chunked-prefill`` kept, ``max_num_batched_tokens`` below ``max_model_len`` raises ValueError; the
  Llama-3.1 config's derived length is 131072 (llama3 RoPE is not scaled further). Expected for 0.11.1, 0.12 and 0.33,
  where the flag is kept; 0.10.2 and 0.11.0 are not asserted (their V1 defaults turn chunked prefill back on for
  generative models, which the recorded corpus does not cover).

The model configs are the recorded oracle's own (fixtures/vllm/oracle/<version>.json ``models``), read through
hoststate's reader, as tests/test_vllm_oracle.py does for the recorded cases.
"""

from __future__ import annotations

import argparse
import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from tests.test_vllm_oracle import args_agree, hoststate_view

REPO = Path(__file__).resolve().parent.parent
ORACLE = REPO / "fixtures" / "vllm" / "oracle"
VERSIONS = ("0.10.2", "0.11.0", "0.11.1", "0.12.0", "0.33.0")
LLAMA8, LLAMA70 = "meta-llama/Llama-3.1-8B-Instruct", "meta-llama/Llama-3.1-70B-Instruct"
DSV3 = "deepseek-ai/DeepSeek-V3"
MIXTRAL, QWEN3_MOE = "mistralai/Mixtral-8x7B-Instruct-v0.1", "Qwen/Qwen3-30B-A3B"
BGE = "BAAI/bge-large-en-v1.5"


def _data(version: str) -> dict[str, Any]:
    return json.loads((ORACLE / f"{version}.json").read_text())


def _read(version: str, cmd: str, model: str = LLAMA8) -> tuple[Any, Any]:
    """(Normalised, Declared) of one command line, as the collector reads a --vllm-cmd."""
    return hoststate_view(_data(version), {"argv": shlex.split(cmd), "env": {}, "model": model})


def _refused(version: str, cmd: str, model: str = LLAMA8) -> str | None:
    parsed, declared = _read(version, cmd, model)
    return "; ".join(parsed.refusals) or declared.refused


# -- abbreviations: argparse itself, on each recorded option table -----------------------------------------------


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):  # type: ignore[override]
        raise ValueError(message)


def _vllm_argparse(version: str) -> _Parser:
    """An argparse parser with exactly the recorded option strings of ``version`` (values or flags as recorded)."""
    recorded = json.loads((ORACLE / "options" / f"{version}.json").read_text())
    parser = _Parser(allow_abbrev=True, add_help=True)
    parser.add_argument("model_tag", nargs="?")
    for dest, info in recorded["dests"].items():
        for action in info["actions"]:
            options = [o for o in action["options"] if o not in ("-h", "--help")]
            if not options:
                continue
            if info["takes_value"]:
                parser.add_argument(*options, dest=dest, nargs=action["nargs"] if action["nargs"] != 0 else None)
            else:
                for option in options:
                    parser.add_argument(option, dest=dest, action="store_true")
    return parser


ABBREVIATED = ["--max-model 8192", "--max-model=8192", "--max-num 8", "--tensor-parallel 2", "--gpu-memory 0.8",
               "--enforce", "--kv-cache-d fp8", "--disable-log", "--no-enable-prefix", "-t 2", "--trust-remote",
               "--served 'x'", "--swap 4", "--max-num-b 4096", "--enable-chunked"]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("tail", ABBREVIATED)
def test_an_abbreviation_reads_as_argparse_reads_it_on_the_recorded_parser(version, tail):
    tokens = shlex.split(tail)
    try:
        expected = vars(_vllm_argparse(version).parse_args([LLAMA8, *tokens]))
    except ValueError as err:
        expected = {"refused": str(err)}
    parsed, declared = _read(version, f"vllm serve {LLAMA8} {tail}")
    if "refused" in expected:
        assert parsed.refusals, (expected, parsed.args)
        return
    assert not parsed.refusals, (parsed.refusals, expected)
    set_by_argparse = {k for k, v in expected.items() if v not in (None, False) and k != "model_tag"}
    assert set_by_argparse <= set(parsed.args) | set(parsed.at_default), (set_by_argparse, parsed.args)


def test_the_abbreviation_cases_hold_both_outcomes_and_a_version_difference():
    """The list is not vacuous: some prefixes are unique, some ambiguous, and one changes with the version (0.33 adds
    --kv-cache-dtype-skip-layers, so --kv-cache-d is ambiguous there only)."""
    outcomes = {}
    for version in VERSIONS:
        for tail in ABBREVIATED:
            try:
                _vllm_argparse(version).parse_args([LLAMA8, *shlex.split(tail)])
                outcomes[(version, tail)] = "ok"
            except ValueError:
                outcomes[(version, tail)] = "refused"
    assert {"ok", "refused"} <= set(outcomes.values())
    assert outcomes[("0.12.0", "--kv-cache-d fp8")] == "ok" and outcomes[("0.33.0", "--kv-cache-d fp8")] == "refused"


# -- -O.x then -O2 ----------------------------------------------------------------------------------------------

O_CASES = [  # (version, tail, expected: a declared mode, or "refused")
    ("0.33.0", "-O.mode=3 -O2", "FULL_AND_PIECEWISE"),
    ("0.33.0", "-O2 -O.mode=3", "refused"),
    ("0.33.0", "-O.cudagraph_mode=FULL", "refused"),
    ("0.33.0", "-O.cudagraph_mode=FULL -O0", "NONE"),
    ("0.12.0", "-O.cudagraph_mode=FULL -O2", "FULL"),
    ("0.12.0", "-O2 -O.cudagraph_mode=PIECEWISE", "PIECEWISE"),
]


@pytest.mark.parametrize(("version", "tail", "expected"), O_CASES)
def test_dotted_O_is_judged_after_the_last_level_replaced_it(version, tail, expected):
    parsed, declared = _read(version, f"vllm serve {LLAMA8} {tail}")
    if expected == "refused":
        assert parsed.refusals or declared.refused
    else:
        assert not parsed.refusals and declared.mode == expected, (parsed.refusals, declared.because)


# -- --config YAML, as each version pulls it -----------------------------------------------------------------------

NESTED = "compilation-config:\n  cudagraph_mode: PIECEWISE\n"


@pytest.mark.parametrize("version", VERSIONS)
def test_a_nested_mapping_is_str_up_to_0_12_and_json_in_0_33(tmp_path, version):
    cfg = tmp_path / "nested.yaml"
    cfg.write_text(NESTED)
    parsed, declared = _read(version, f"vllm serve {LLAMA8} --config {cfg}")
    if version == "0.33.0":
        assert not parsed.refusals and declared.mode == "PIECEWISE"
    else:
        assert parsed.refusals and any("--compilation-config" in r for r in parsed.refusals), parsed.refusals


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("program", ["vllm serve", "python -m vllm.entrypoints.openai.api_server --model"])
def test_a_false_key_is_dropped_except_by_0_33s_api_server(tmp_path, version, program):
    """0.33 writes ``--no-<key>`` only where the parser pulling the file has that exact string: the api_server's
    own parser for the dashed key (never the underscored one); ``vllm serve``'s file is pulled by the top-level
    parser, which has no serve options, so the key writes nothing (as up to 0.12 everywhere)."""
    cfg = tmp_path / "off.yaml"
    cfg.write_text("enable-prefix-caching: false\nenable_chunked_prefill: false\n")
    parsed, _ = _read(version, f"{program} {LLAMA8} --config {cfg}")
    assert not parsed.refusals
    negated = version == "0.33.0" and "api_server" in program
    assert parsed.args.get("enable_prefix_caching", "unset") == (False if negated else "unset")
    assert "enable_chunked_prefill" not in parsed.args


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("tail", "files", "refused"), [
    ("--config={a}", {"a": "tensor-parallel-size: 3\n"}, False),  # not pulled: -tp 3 would be refused (32 heads)
    ("--config {a} --config {b}", {"a": "max-num-seqs: 8\n", "b": "max-num-seqs: 9\n"}, True),
    ("--config {j}", {"j": "max-num-seqs: 8\n"}, True),  # not .yaml/.yml
])
def test_how_the_config_token_is_written_decides_whether_vllm_reads_it(tmp_path, version, tail, files, refused):
    names = {"a": "a.yaml", "b": "b.yaml", "j": "c.json"}
    for key, text in files.items():
        (tmp_path / names[key]).write_text(text)
    cmd = f"vllm serve {LLAMA8} " + tail.format(**{k: tmp_path / v for k, v in names.items()})
    assert bool(_refused(version, cmd)) is refused


#: The --config command lines run through real vLLM (scripts/vllm_oracle_classes.py): {c} the configs directory.
CONFIG_CASES = [
    ("config-nested-mapping", "{model} --config {c}nested.yaml"),
    ("config-false-keys", "{model} --config {c}false-keys.yaml"),
    ("config-equals-not-pulled", "{model} --config={c}tp3.yaml"),
    ("config-twice", "{model} --config {c}with-model.yaml --config {c}seqs9.yaml"),
    ("config-json-extension", "{model} --config {c}seqs8.json"),
    ("config-no-model", "--config {c}no-model.yaml"),
    ("config-model-in-file", "--config {c}with-model.yaml"),
]


@pytest.mark.parametrize("version", VERSIONS)
def test_serve_without_a_model_anywhere_is_refused(tmp_path, version):
    cfg = tmp_path / "nomodel.yaml"
    cfg.write_text("max-num-seqs: 8\n")
    assert "No model specified" in (_refused(version, f"vllm serve --config {cfg}") or "")
    with_model = tmp_path / "model.yaml"
    with_model.write_text(f"model: {LLAMA8}\nmax-num-seqs: 8\n")
    assert _refused(version, f"vllm serve --config {with_model}") is None


# -- the speculative method vLLM runs, and MTP layers ---------------------------------------------------------------

SPEC = [  # (tail, model, {version: refused?})
    ('--speculative-config \'{"model": "meta-llama/Llama-3.1-8B-Instruct", "num_speculative_tokens": 3}\' -tp 8',
     LLAMA70, {"0.10.2": True, "0.11.0": True, "0.11.1": True, "0.12.0": True, "0.33.0": False}),
    ('--speculative-config \'{"model": "yuhuili/EAGLE-LLaMA3.1-Instruct-8B", "num_speculative_tokens": 3}\'',
     LLAMA8, {v: False for v in VERSIONS}),
    ('--speculative-config \'{"method": "mtp", "num_speculative_tokens": 1}\'',
     LLAMA8, {v: True for v in VERSIONS}),
    ('--speculative-config \'{"method": "deepseek_mtp", "num_speculative_tokens": 1}\'',
     LLAMA8, {v: True for v in VERSIONS}),
    ('-tp 8 --speculative-config \'{"method": "deepseek_mtp", "num_speculative_tokens": 1}\'',
     DSV3, {v: False for v in VERSIONS}),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("tail", "model", "expected"), SPEC)
def test_the_speculative_method_is_the_one_vllm_detects_and_mtp_needs_mtp_layers(version, tail, model, expected):
    refused = _refused(version, f"vllm serve {model} {tail}", model)
    assert bool(refused) is expected[version], refused


# -- scheduler limits with chunked prefill off ------------------------------------------------------------------------

CHUNKED = [
    ("--no-enable-chunked-prefill --max-num-batched-tokens 4096", True),  # 4096 < 131072
    ("--no-enable-chunked-prefill --max-num-batched-tokens 4096 --max-model-len 4096", False),
    ("--no-enable-chunked-prefill --max-num-batched-tokens 4096 --max-model-len 8192", True),
    ("--no-enable-chunked-prefill", False),  # the default is then max(max_model_len, 2048)
    ("--max-num-batched-tokens 4096", False),  # chunked prefill on
]


@pytest.mark.parametrize("version", ("0.11.1", "0.12.0", "0.33.0"))
@pytest.mark.parametrize(("tail", "expected"), CHUNKED)
def test_without_chunked_prefill_a_step_must_hold_the_whole_context(version, tail, expected):
    refused = _refused(version, f"vllm serve {LLAMA8} {tail}")
    assert bool(refused) is expected, refused
    if expected:
        assert "is smaller than max_model_len" in refused


# -- quantization overrides take over only a checkpoint of their own format -------------------------------------------
# ModelConfig._verify_quantization asks every override method whether it takes over the checkpoint
# (override_quantization_method): awq_marlin only an "awq" checkpoint, gptq_marlin / gptq_marlin_24 / gptq_bitblas
# only "gptq", moe_wna16 either (and only when named); when none does, the checkpoint's own method stands and a
# different --quantization is "does not match ... the `quantization` argument" (ValueError). The checkpoints below are
# Llama-3.1-8B's recorded config with the quantization_config a 4-bit AutoAWQ / GPTQ export writes (float16, so the
# dtype check of the AWQ kernels passes), and DeepSeek-V3's recorded fp8 one.

AWQ = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True, "version": "gemm"}
GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 128, "sym": True, "desc_act": False}
QUANT = [  # (checkpoint, --quantization, refused?)
    ("awq", "awq_marlin", False), ("awq", "moe_wna16", False), ("awq", "gptq_marlin", True),
    ("awq", "gptq_marlin_24", True), ("gptq", "gptq_marlin", False), ("gptq", "awq_marlin", True),
    ("fp8", "awq_marlin", True), ("fp8", "gptq_marlin", True),
]


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize(("checkpoint", "given", "refused"), QUANT)
def test_a_quantization_override_takes_over_only_its_own_checkpoint_format(version, checkpoint, given, refused):
    data = _data(version)
    if checkpoint == "fp8":
        model, tail = DSV3, "-tp 8"
    else:
        model, tail = f"org/llama-{checkpoint}", ""
        config = {**data["models"][LLAMA8]["config"], "torch_dtype": "float16",
                  "quantization_config": AWQ if checkpoint == "awq" else GPTQ}
        data = {**data, "models": {**data["models"], model: {"config": config}}}
    argv = shlex.split(f"vllm serve {model} {tail} --quantization {given}")
    parsed, declared = hoststate_view(data, {"argv": argv, "env": {}, "model": model})
    said = "; ".join(parsed.refusals) or declared.refused or ""
    assert bool(said) is refused, said
    if refused:  # 0.33 no longer has gptq_marlin_24 at all (its QUANTIZATION_METHODS): refused as unknown there
        assert ("does not match the quantization method specified in the `quantization` argument" in said
                or (version == "0.33.0" and "Unknown quantization method" in said)), said


#: More command lines of the same classes (KV-cache dtype choices, abbreviations, EAGLE with pipeline parallel or an
#: unsupported target, MTP on a MoE without MTP layers, chunked prefill off, quantization without a checkpoint's
#: settings), judged only by the real vLLM records below: (id, arguments after ``vllm serve``, model).
PROBED = [  # (id, model, arguments after the model)
    ('kvd-bfloat16', LLAMA8, '--kv-cache-dtype bfloat16'),
    ('kvd-int8', LLAMA8, '--kv-cache-dtype int8'),
    ('kvd-fp8_ds_mla', LLAMA8, '--kv-cache-dtype fp8_ds_mla'),
    ('kvd-float16', LLAMA8, '--kv-cache-dtype float16'),
    ('kvd-fp4', LLAMA8, '--kv-cache-dtype fp4'),
    ('kvd-fp8_e5m2', LLAMA8, '--kv-cache-dtype fp8_e5m2'),
    ('kvd-fp8_inc', LLAMA8, '--kv-cache-dtype fp8_inc'),
    ('kvd-FP8', LLAMA8, '--kv-cache-dtype FP8'),
    ('kvd-auto', LLAMA8, '--kv-cache-dtype auto'),
    ('ab-9', LLAMA8, '--max-model 8k'),
    ('ab-10', LLAMA8, '--enable-pre'),
    ('ab-11', LLAMA8, '--no-enable-prefix'),
    ('ab-12', LLAMA8, '--no-enable-chunk'),
    ('ab-13', LLAMA8, '--disable-cust'),
    ('ab-14', LLAMA8, '--block 32'),
    ('ab-15', LLAMA8, '--quant fp8'),
    ('ab-16', LLAMA8, '--dtype=half'),
    ('ab-17', LLAMA8, '--max-num-seq 8'),
    ('ab-18', LLAMA8, '--gpu 0.8'),
    ('ab-19', LLAMA8, '--spec \'{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":4}\''),
    ('ab-20', LLAMA8, '-d 1'),
    ('ab-21', LLAMA8, '-p 2'),
    ('ab-22', LLAMA8, '-c \'{"mode":3}\''),
    ('ab-23', LLAMA8, '--compilation \'{"mode":3}\''),
    ('ab-24', LLAMA8, '--comp \'{"mode":3}\''),
    ('ab-25', LLAMA8, '--compilation.mode 3'),
    ('ab-26', LLAMA8, '--max-log 10'),
    ('ab-27', LLAMA8, '--enable-log'),
    ('ab-28', LLAMA8, '--seed=3'),
    ('ab-29', LLAMA8, '--kv-c fp8'),
    ('ab-30', LLAMA8, '--load'),
    ('ab-31', LLAMA8, '--load-format dummy'),
    ('ab-32', LLAMA8, '--tok M'),
    ('eagle3-pp2', LLAMA8,
     '-pp 2 --speculative-config '
     '\'{"method":"eagle3","model":"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B","num_speculative_tokens":3}\''),
    ('eagle3-noname-pp2', LLAMA8,
     '-pp 2 --speculative-config '
     '\'{"model":"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B","num_speculative_tokens":3}\''),
    ('eagle-pp2', LLAMA8,
     '-pp 2 --speculative-config \'{"method":"eagle","model":"yuhuili/EAGLE-'
     'LLaMA3.1-Instruct-8B","num_speculative_tokens":3}\''),
    ('eagle3-mixtral', MIXTRAL,
     '-tp 2 --speculative-config '
     '\'{"method":"eagle3","model":"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B","num_speculative_tokens":3}\''),
    ('mtp-qwen3moe', QWEN3_MOE, '--speculative-config \'{"method":"mtp","num_speculative_tokens":1}\''),
    ('mtp-ds-async', DSV3,
     '-tp 8 --async-scheduling --speculative-config '
     '\'{"method":"mtp","num_speculative_tokens":2}\''),
    ('draft-eagle3-name', LLAMA8,
     '--speculative-config '
     '\'{"model":"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B","num_speculative_tokens":3}\''),
    ('chunk-off-maxlen-auto', LLAMA8,
     '--no-enable-chunked-prefill --max-num-batched-tokens 8192 --max-model-len 8192'),
    ('chunk-off-2048', LLAMA8, '--no-enable-chunked-prefill --max-num-batched-tokens 2048 --max-model-len 4096'),
    ('chunk-off-seqs', LLAMA8, '--no-enable-chunked-prefill --max-model-len 1024 --max-num-seqs 512'),
    ('cfg-list', LLAMA8, '--config fixtures/vllm/oracle/configs/tp8-piecewise.yaml'),
    ('quant-ds-fp8-gptq', DSV3, '-tp 8 --quantization gptq'),
    ('quant-l8-awq', LLAMA8, '--quantization awq'),
    ('quant-l8-bnb', LLAMA8, '--quantization bitsandbytes'),
    ('p2-00', LLAMA8, '--kv-cache-dtype fp8_e4m3'),
    ('p2-01', LLAMA8, '--kv-cache-dtype fp8_ds_mla --dtype bfloat16'),
    ('p2-02', DSV3, '-tp 8 --kv-cache-dtype fp8_ds_mla'),
    ('p2-03', DSV3, '-tp 8 --kv-cache-dtype bfloat16'),
    ('p2-04', LLAMA8, '--kv-cache-dtype bfloat16 --dtype float16'),
    ('p2-05', LLAMA8, '--kv-cache-dtype float16 --dtype float16'),
    ('p2-06', LLAMA8, '--quantization fp8'),
    ('p2-07', LLAMA8, '--quantization experts_int8'),
    ('p2-08', LLAMA8, '--quantization awq'),
    ('p2-09', LLAMA8, '--quantization gptq'),
    ('p2-11', LLAMA8, '--quantization modelopt'),
    ('p2-12', LLAMA8, '--quantization gguf'),
    ('p2-15', LLAMA8, '--quantization ptpc_fp8'),
    ('p2-16', LLAMA8, '--quantization mxfp4'),
    ('p2-17', LLAMA8, '--quantization bitblas'),
    ('p2-18', LLAMA8, '--quantization hqq'),
    ('p2-19', QWEN3_MOE, '--quantization experts_int8'),
    ('p2-20', LLAMA8, '--speculative-config \'{"method":"ngram"}\''),
    ('p2-21', LLAMA8, '--speculative-config \'{"method":"ngram","num_speculative_tokens":4}\''),
    ('p2-23', LLAMA8,
     '--async-scheduling --speculative-config \'{"model":"yuhuili/EAGLE-'
     'LLaMA3.1-Instruct-8B","num_speculative_tokens":2}\''),
    ('p2-24', LLAMA70,
     '-tp 8 --speculative-config \'{"method":"draft_model","model":"meta-'
     'llama/Llama-3.1-8B-Instruct","num_speculative_tokens":3}\''),
    ('p2-25', LLAMA70,
     '-tp 8 --async-scheduling --speculative-config \'{"model":"meta-'
     'llama/Llama-3.1-8B-Instruct","num_speculative_tokens":3}\''),
    ('p2-26', DSV3, '-tp 8 --speculative-config \'{"method":"mtp","num_speculative_tokens":3}\''),
    ('p2-27', DSV3, '-tp 4 -pp 2 --speculative-config \'{"method":"mtp","num_speculative_tokens":1}\''),
    ('p2-28', LLAMA8,
     '-pp 2 --speculative-config '
     '\'{"method":"ngram","num_speculative_tokens":3,"prompt_lookup_max":3}\''),
    ('p2-29', LLAMA8,
     '--speculative-config '
     '\'{"method":"eagle3","model":"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B","num_speculative_tokens":3}\''
     ' -tp 2'),
    ('p2-30', QWEN3_MOE,
     '--speculative-config '
     '\'{"method":"eagle3","model":"yuhuili/EAGLE3-LLaMA3.1-Instruct-8B","num_speculative_tokens":3}\''),
    ('p2-31', LLAMA8, '--no-enable-chunked-prefill --max-model-len 16384'),
    ('p2-32', LLAMA8, '--no-enable-chunked-prefill --max-num-batched-tokens 16384 --max-model-len 16k'),
    ('p2-33', LLAMA8, '--no-enable-chunked-prefill --max-num-seqs 4096 --max-model-len 2048'),
    ('p2-34', LLAMA8,
     '--no-enable-chunked-prefill --max-num-batched-tokens 1024 --max-num-seqs 8 '
     '--max-model-len 1024'),
    ('p2-35', BGE, '--no-enable-chunked-prefill --max-num-batched-tokens 256'),
    ('p2-36', LLAMA8, '--enable-chunked-prefill --max-num-batched-tokens 512'),
    ('p2-37', LLAMA8, '--tensor 2'),
    ('p2-38', LLAMA8, '--pipeline 1'),
    ('p2-39', LLAMA8, '--data 1'),
    ('p2-40', LLAMA8, '--enable-exp'),
    ('p2-41', LLAMA8, '--no-enable-prefix-c'),
    ('p2-42', LLAMA8, '--disable-custom-all'),
    ('p2-43', LLAMA8, '--served-model M'),
    ('p2-44', LLAMA8, '--swap-space 4'),
    ('p2-45', LLAMA8, '--max-cpu 1'),
    ('p2-46', LLAMA8, '--trust'),
    ('p2-47', LLAMA8, '--revision main'),
    ('p2-48', LLAMA8, '--cuda-graph 8 16'),
    ('p2-49', LLAMA8, '--max-seq 8192'),
    ('p2-50', LLAMA8, '--enforce-eager='),
    ('p2-51', LLAMA8, '--long 128'),
    ('p2-52', LLAMA8, '--max-long 2'),
    ('p3-04', LLAMA8, '--enforce-eager=1'),
    ('p3-05', LLAMA8, '--no-enforce'),
    ('p3-06', LLAMA8, '--enable-prefix-caching=false'),
    ('p3-07', LLAMA8, '--max-model-len=1K'),
    ('p3-08', LLAMA8, '--max-model-len 1.5k'),
    ('p3-09', LLAMA8, '--max-model-len 2K --max-num-batched 1024'),
    ('p3-10', LLAMA8, '-tp=2'),
    ('p3-11', LLAMA8, '-tp2'),
    ('p3-12', LLAMA8, '-n 1'),
    ('p3-13', LLAMA8, '-q fp8'),
    ('p3-14', LLAMA8, '-qfp8'),
    ('p3-15', LLAMA8, '--kv-cache-dtype=fp8_e4m3'),
    ('p3-16', LLAMA8, '--gpu-memory-utilization=1.0'),
    ('p3-17', LLAMA8, '--gpu-memory-utilization 1.01'),
    ('p3-18', LLAMA8, '--max-num-seqs=0'),
    ('p3-19', LLAMA8, '--seed -1'),
    ('p3-20', LLAMA8, '--seed 1.5'),
    ('p3-21', LLAMA8, '--port 80'),
    ('p3-22', LLAMA8, '--port 70000'),
    ('p3-23', LLAMA8, '--dtype float32'),
    ('p3-24', LLAMA8, '--dtype bf16'),
    ('p3-25', LLAMA8, '--dtype auto --dtype half'),
    ('p3-26', LLAMA8,
     '--speculative-config.method ngram --speculative-config.num_speculative_tokens 2 '
     '--speculative-config.prompt_lookup_max 2'),
    ('p3-27', LLAMA8, '-cc.mode 3 -O0'),
    ('p3-28', LLAMA8, '--compilation-config 3'),
    ('p3-29', LLAMA8, '--compilation-config \'{"cudagraph_mode":"full"}\''),
    ('p3-30', DSV3, '-tp 8 --kv-cache-dtype fp8'),
    ('p3-31', QWEN3_MOE, '-ep -tp 2'),
]


# -- the same classes run through real vLLM (scripts/vllm_oracle.py --cases scripts/vllm_oracle_classes.json) ----------
# fixtures/vllm/oracle/classes/<version>.json holds what unmodified vLLM did with the command lines above (the cases
# file is generated from this module's tables): hoststate must read each as vLLM did, as for the main corpus.

CLASSES = ORACLE / "classes"


def _class_cases() -> list[Any]:
    params = []
    for path in sorted(CLASSES.glob("*.json")):
        data = json.loads(path.read_text())
        for case in data["cases"]:
            params.append(pytest.param(data, case, id=f"{data['vllm_version']}::{case['id']}"))
    return params


def test_the_cases_file_holds_this_modules_command_lines():
    import importlib.util

    spec = importlib.util.spec_from_file_location("vllm_oracle_classes", REPO / "scripts" / "vllm_oracle_classes.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check"]) == 0, "run: python scripts/vllm_oracle_classes.py"


def test_the_classes_were_run_through_real_vllm():
    recorded = {json.loads(p.read_text())["vllm_version"] for p in CLASSES.glob("*.json")}
    assert set(VERSIONS) <= recorded, recorded
    for path in CLASSES.glob("*.json"):
        cases = json.loads(path.read_text())["cases"]
        assert len(cases) >= 40 and all(c["outcome"] in ("ok", "refused") for c in cases), path.name


@pytest.mark.parametrize(("data", "case"), _class_cases())
def test_hoststate_reads_each_class_as_real_vllm_did(data, case):
    parsed, declared = hoststate_view(data, case)
    if case["outcome"] == "refused":
        assert parsed.refusals or declared.refused, f"vLLM refuses ({case['stage']}: {case['error']})"
        return
    assert not parsed.refusals and not declared.refused, (parsed.refusals, declared.refused)
    assert declared.mode == case["cudagraph_mode"], declared.because
    assert args_agree(data, case, parsed.args) == []
