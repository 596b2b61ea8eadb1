"""log.py against the message formats recorded from each vLLM version's own source.

fixtures/vllm/log-formats/<version>.json is written by scripts/vllm_log_formats.py from an installed,
unmodified vLLM tree. Each fact of log._FACTS is associated here, by this file's own wording table
(not log.py's regexes), with the recorded formats that log it; each format is rendered the way vLLM's
logger renders it (``msg % args``, or the f-string's fields), given vLLM's record prefix, and must be
read by parse_log with the sample value, from the file vLLM logs it from.
"""

from __future__ import annotations

import json
import re
import string
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from hoststate.collectors.vllm import log as log_module
from hoststate.collectors.vllm.log import LogFacts, parse_log
from tests.conftest import FIXTURES

FORMATS = FIXTURES / "vllm" / "log-formats"
VERSIONS = sorted(p.stem for p in FORMATS.glob("*.json"))
RECORDED = {v: json.loads((FORMATS / f"{v}.json").read_text(encoding="utf-8")) for v in VERSIONS}

API_PREFIX = "(APIServer pid=5) "
ENGINE_PREFIX = "(EngineCore_DP0 pid=7) "
CONFIG = "model='m', tensor_parallel_size=2, compilation_config={'cudagraph_mode': 'FULL'}"
NON_DEFAULT = "{'model': 'm', 'tensor_parallel_size': 2}"
MOE_FILE = "E=8,N=14336,device_name=NVIDIA_H200.json"
MOE_PATH = "/opt/vllm/model_executor/layers/fused_moe/configs/" + MOE_FILE
_CONVERSION = re.compile(r"%(?:\(\w+\))?[-#0 +]*\d*(?:\.\d+)?[a-zA-Z]")


def _backend_name(msg: str) -> str:
    """The backend a rendered attention message names: ``Using X [attention ]backend...``."""
    m = re.match(r"Using ([\w ]+?)(?: attention)? backend", msg)
    assert m, msg
    return m.group(1)


def _downgrade_target(msg: str) -> str:
    return re.search(r"setting cudagraph_mode=(\w+)", msg).group(1)  # type: ignore[union-attr]


@dataclass(frozen=True)
class Fact:
    """How this test recognises a fact's formats and what parse_log must read from a rendering."""

    wording: str  # regex matched at the format's start: the fact's distinguishing words
    samples: tuple[tuple[str, tuple[Any, ...]], ...]  # (regex on the format, arguments in order); first match
    check: Callable[[LogFacts, str], bool]  # (facts, rendered message) -> read as expected
    engine_side: bool = True
    where: str = ""  # when set, only formats from files whose path matches it
    without: str = r"(?!)"  # formats that start alike but are not this fact (matched anywhere)
    also: tuple[tuple[str, str], ...] = ()  # (file regex, wording regex): formats of this fact worded otherwise


FACTS: dict[str, Fact] = {
    "start": Fact(r"vLLM (?:API )?server version", (("", ("9.8.7", "org/model")),),
                  lambda f, _: f.version == "9.8.7", engine_side=False),
    "listening": Fact(r"Starting vLLM (?:API )?server", (("", (1, "http://0.0.0.0:8000")),),
                      lambda f, _: True, engine_side=False),
    "non_default": Fact(r"non-default args", (("", (NON_DEFAULT,)),),
                        lambda f, _: f.non_default_args == {"model": "m", "tensor_parallel_size": 2},
                        engine_side=False),
    "engine": Fact(r"Initializing an? (?:V\d )?LLM engine", (("", ("9.8.7", CONFIG, True)),),
                   lambda f, _: f.version == "9.8.7" and f.config.get("tensor_parallel_size") == 2
                   and f.config_cudagraph_mode == "FULL"),
    "downgrade": Fact(r"CUDAGraphMode\.\{\} is not supported", (
        ("", ("FULL", "FlashInferBackend", "AttentionCGSupport.UNIFORM_SINGLE_TOKEN_DECODE")),),
        lambda f, msg: f.downgraded_to == _downgrade_target(msg), without=r"^(?!.*; setting cudagraph_mode=)"),
    "captured": Fact(r"Graph capturing finished", (("", (12.0, 1.5)),),
                     lambda f, _: f.ran.get("graph_capture_secs") == 12 and f.ran.get("graph_memory_gib") == 1.5),
    "attention": Fact(r"Using (?:%s|\{\}|[\w ]+?) (?:[Aa]ttention )?backend\b",
                      (("%s.*%s", ("FLASHINFER", "[FLASH_ATTN, FLASHINFER]")), ("%s|\\{\\}", ("FLASHINFER",)),
                       ("", ())),
                      lambda f, msg: f.attention_backends == [_backend_name(msg)],
                      where=r"^vllm/(?:platforms/|(?:v1/)?attention/selector\.py)", without=r"ViT|vit attention"),
    "kv_memory": Fact(r"Available KV cache memory", (("", (61.25,)),),
                      lambda f, _: f.ran.get("kv_cache_memory_gib") == 61.25),
    "kv_tokens": Fact(r"(?:GPU|%s) KV cache size", (("%s.*%s.*%s", ("GPU", "1,234,567", "32,768", 37.68)),
                                                    ("", ("1,234,567",))),
                      lambda f, _: f.ran.get("kv_cache_tokens") == 1234567, without=r"Multiplying"),
    "concurrency": Fact(r"(?:Maximum concurrency for|%s KV cache size: %s tokens, Maximum concurrency)",
                        (("%s.*%s.*%s", ("GPU", "1,234,567", "32,768", 37.68)), ("", ("32,768", 37.68))),
                        lambda f, _: f.ran.get("max_concurrency") == 37.68 and f.ran.get("max_model_len") == 32768),
    "kv_blocks": Fact(r"(?:# GPU blocks|Engine %03d: vllm cache_config_info|%d Engines: vllm cache_config_info)",
                      (("^# GPU", (4096, 512)), ("", (2, 4096))),
                      lambda f, _: f.ran.get("kv_cache_blocks") == 4096),
    "nccl": Fact(r"vLLM is using nccl==", (("", ("2.27.3",)),), lambda f, _: f.ran.get("nccl_version") == "2.27.3"),
    "allreduce": Fact(r"(?:Custom allreduce is disabled|Disabled the custom all-reduce)", (("", (6, [2, 4, 8])),),
                      lambda f, msg: f.ran.get("custom_all_reduce") == "disabled"
                      and all(r in msg for r in f.ran["custom_all_reduce_disabled_because"])),
    "moe_default": Fact(r"Using default (?:\w+ )?MoE config", (("", (MOE_PATH,)),),
                        lambda f, _: f.ran.get("moe_default_config") == [MOE_FILE]),
    "moe_tuned": Fact(r"Using (?:configuration from %s for MoE|tuned \w+ MoE config from)", (("", (MOE_PATH,)),),
                      lambda f, _: f.ran.get("moe_tuned_config") == [MOE_FILE]),
    "moe_backend": Fact(r"Using (?!configuration from|default |tuned )[^\n]*MoE", (
        ("%s.*%s", ("DEEPGEMM", "W4A8")), ("%s|\\{\\}", ("DEEPGEMM",)), ("", ())),
        lambda f, msg: f.ran.get("moe_backends") == [msg.strip().rstrip(".")], without=r"FusedMoEConfig::",
        also=((r"/quantization/mxfp4\.py$", r"Using [\w ]+ backend"),)),
}

#: (version, fact) a version does not log at all, with the reason; anything else missing fails.
ABSENT: dict[tuple[str, str], str] = {
}


def formats(version: str, name: str) -> list[dict[str, Any]]:
    """The recorded formats of ``version`` that this test's table associates with fact ``name``."""
    fact = FACTS[name]
    return [f for f in RECORDED[version]["formats"]
            if (re.match(fact.wording, f["format"]) and re.search(fact.where, f["file"])
                and not re.search(fact.without, f["format"]))
            or any(re.search(path, f["file"]) and re.match(words, f["format"]) for path, words in fact.also)]


def samples(fact: Fact, fmt: dict[str, Any]) -> tuple[Any, ...]:
    for pattern, args in fact.samples:
        if re.search(pattern, fmt["format"]):
            return args
    raise AssertionError(f"no sample arguments for {fmt['format']!r}")


def render(fmt: dict[str, Any], args: tuple[Any, ...]) -> str:
    """The message vLLM's logger writes: ``msg % args`` (logging's getMessage), or the f-string's fields."""
    if fmt["style"] == "{}":
        return fmt["format"].format(*args[: len(fmt["exprs"])])
    count = len(_CONVERSION.findall(fmt["format"].replace("%%", "")))
    return fmt["format"] % args[:count] if count else fmt["format"]


def generic_args(fmt: dict[str, Any]) -> tuple[Any, ...]:
    """A backend-like word for each string field, 3 for each numeric one."""
    if fmt["style"] == "{}":
        specs = [spec for _text, field, spec, _conv in string.Formatter().parse(fmt["format"]) if field is not None]
        return tuple(3 if spec and spec[-1] in "bcdoxXn" else 3.0 if spec and spec[-1] in "eEfFgG%" else "FLASHINFER"
                     for spec in specs)
    return tuple(3 if c[-1] in "dif" else "FLASHINFER" for c in _CONVERSION.findall(fmt["format"].replace("%%", "")))


def record_line(fmt: dict[str, Any], message: str, engine_side: bool) -> str:
    """One log record as vLLM writes it; a multi-line message repeats the prefix after ``\\r\\n``."""
    prefix = (ENGINE_PREFIX if engine_side else API_PREFIX) + f"{fmt['level']} 12-03 06:00:00 "
    prefix += f"[{fmt['basename']}:{fmt['line']}] "
    return "\r\n".join(prefix + part for part in message.split("\n"))


CASES = [(v, name) for v in VERSIONS for name in FACTS]


def test_every_fact_of_log_py_is_in_the_table():
    assert {name for name, _files, _pattern in log_module._FACTS} == set(FACTS)
    assert VERSIONS, "no recorded formats"


@pytest.mark.parametrize(("version", "name"), CASES)
def test_each_recorded_format_is_read(version, name):
    found = formats(version, name)
    if (version, name) in ABSENT:
        assert not found, f"{name} is logged by {version} after all: {[f['format'] for f in found]}"
        return
    assert found, f"vLLM {version} logs no format worded like {name!r}; add it to ABSENT with the reason"
    fact = FACTS[name]
    files = {f for n, f, _p in log_module._FACTS if n == name}
    for fmt in found:
        where = f"{version} {fmt['file']}:{fmt['line']} {fmt['format']!r}"
        accepted = set().union(*(f or () for f in files)) if None not in files else None
        assert accepted is None or fmt["basename"] in accepted, f"log.py ignores {name} from {where}"
        message = render(fmt, samples(fact, fmt))
        facts = parse_log(record_line(fmt, message, fact.engine_side))
        assert fact.check(facts, message), f"{name} not read from {where}: {message!r} -> {facts}"


@pytest.mark.parametrize("version", VERSIONS)
def test_the_listening_record_ends_the_start(version):
    """Nothing after ``Starting vLLM API server`` counts: a KV-cache record after it is not read."""
    kv = next(f for f in formats(version, "kv_tokens"))
    kv_line = record_line(kv, render(kv, samples(FACTS["kv_tokens"], kv)), True)
    for fmt in formats(version, "listening"):
        listening = record_line(fmt, render(fmt, samples(FACTS["listening"], fmt)), False)
        assert parse_log(kv_line).ran.get("kv_cache_tokens") == 1234567
        assert "kv_cache_tokens" not in parse_log(listening + "\n" + kv_line).ran, fmt


#: Formats that start like a fact but are another thing; log.py must not read them as that fact.
LOOKALIKES = [
    ("attention", r"ViT|vit attention|MLA prefill backend|DSpark drafter|KV cache layout for"),
    ("moe_backend", r"^Using FusedMoEConfig::"),
    ("kv_tokens", r"^Multiplying the GPU KV cache size"),
    ("allreduce", r"^Custom quick allreduce"),
]
_READ = {
    "attention": lambda f: f.attention_backends,
    "moe_backend": lambda f: f.ran.get("moe_backends"),
    "kv_tokens": lambda f: f.ran.get("kv_cache_tokens"),
    "allreduce": lambda f: f.ran.get("custom_all_reduce_disabled_because"),
}


@pytest.mark.parametrize(("name", "pattern"), LOOKALIKES)
def test_lookalike_formats_are_not_read_as_the_fact(name, pattern):
    seen = 0
    for version in VERSIONS:
        for fmt in RECORDED[version]["formats"]:
            if not re.search(pattern, fmt["format"]):
                continue
            seen += 1
            message = render(fmt, generic_args(fmt))
            assert not _READ[name](parse_log(record_line(fmt, message, True))), f"{version} {fmt['file']}: {message}"
    assert seen, f"no recorded format matches {pattern!r}"


def test_the_recorded_data_is_from_each_version():
    for version, data in RECORDED.items():
        assert data["vllm_version"] == version and data["count"] == len(data["formats"]) > 50


def _associated(version: str) -> set[tuple[str, int, str]]:
    return {(f["file"], f["line"], f["format"]) for name in FACTS for f in formats(version, name)}


def _anything_read(facts: LogFacts) -> list[str]:
    found = {"version": facts.version, "non_default_args": facts.non_default_args, "config": facts.config,
             "downgrades": facts.downgrades, "attention_backends": facts.attention_backends, "ran": facts.ran}
    return [k for k, v in found.items() if v]


@pytest.mark.parametrize("version", VERSIONS)
def test_no_other_recorded_format_is_read_as_a_fact(version):
    """Every recorded format this table does not associate with a fact (the keyword-wide rest: other
    backends, layouts, quick all-reduce, prefill selectors...) is read as nothing."""
    skip = _associated(version)
    wrong = []
    for fmt in RECORDED[version]["formats"]:
        if (fmt["file"], fmt["line"], fmt["format"]) in skip:
            continue
        message = render(fmt, generic_args(fmt))
        read = _anything_read(parse_log(record_line(fmt, message, True)))
        if read:
            wrong.append(f"{fmt['file']}:{fmt['line']} {message!r} -> {read}")
    assert not wrong, "\n".join(wrong)
