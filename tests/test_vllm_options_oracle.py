"""Which options each vLLM version has, against vLLM's own `vllm serve` parser.

fixtures/vllm/oracle/options/<version>.json holds every option string of that version's parser and
its dest, as recorded by ``scripts/vllm_oracle.py --options-out`` from an unmodified vLLM. For each
recorded version, hoststate's reading of an option string (argv._dest_of with that version's row of
the table: OPTIONS, aliases, ``--disable-`` spellings, ``--no-`` spellings, missing_options) must
give the same dest for every string vLLM accepts, and must refuse every string vLLM's parser lacks.
A flag (no value) in vLLM must be a flag in hoststate and the other way round.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hoststate.collectors.vllm.argv import _dest_of, locate, normalise, option_table
from hoststate.collectors.vllm.options import BOOL, FALSE_BY_DEFAULT, OPTIONS
from hoststate.collectors.vllm.versions import Rules, rules_for

REPO = Path(__file__).resolve().parent.parent
RECORDED = REPO / "fixtures" / "vllm" / "oracle" / "options"

#: Option strings of vLLM's parser hoststate does not read as options, with why.
VLLM_ONLY: dict[str, str] = {
    "-h": "argparse's help: prints and exits, never a server command line",
    "--help": "argparse's help: prints and exits, never a server command line",
}
#: Option strings hoststate reads that vLLM's argparse does not have, by version, with why.
HOSTSTATE_ONLY: dict[tuple[str, str], str] = {
    ("0.12.0", "-O"): "FlexibleArgumentParser.parse_args rewrites -O<n>/-O <n> to --optimization-level before argparse",
    ("0.33.0", "-O"): "FlexibleArgumentParser.parse_args rewrites -O<n>/-O <n> to --optimization-level before argparse",
}
#: (version, dest) whose value kind differs, with why.
KIND_DIFFERS: dict[tuple[str, str], str] = {
    (v, d): "0.11.x keeps it as a deprecated option taking a value (type=bool); hoststate reads it as a flag "
    "(--no- is refused as in vLLM); it does not bear on the graph mode"
    for v in ("0.11.0", "0.11.1")
    for d in ("guided_decoding_disable_additional_properties", "guided_decoding_disable_any_whitespace",
              "guided_decoding_disable_fallback")
}

def _recorded() -> list[Path]:
    return sorted(RECORDED.glob("*.json"))


def _load(path: Path) -> tuple[dict[str, Any], Rules]:
    data = json.loads(path.read_text())
    rules, note = rules_for(data["vllm_version"])
    assert note is None, note  # every recorded version has its own row
    return data, rules


def _accepted(option: str, rules: Rules) -> str | None:
    """The dest hoststate reads ``option`` as for this version, or None when it refuses the option."""
    dest, _ = _dest_of(option, rules)
    return None if dest is None or dest in rules.missing_options else dest


def _hoststate_spellings(rules: Rules) -> set[str]:
    """Every option string hoststate could read as an option of some version."""
    spellings = set(rules.aliases) | set(rules.disable_flags)
    for dest in OPTIONS:
        spellings |= {"--" + dest.replace("_", "-"), "--no-" + dest.replace("_", "-")}
    return spellings


def test_every_version_with_a_row_and_its_parser_is_recorded() -> None:
    versions = {json.loads(p.read_text())["vllm_version"] for p in _recorded()}
    assert versions >= {"0.10.2", "0.11.0", "0.11.1", "0.12.0", "0.33.0"}
    for path in _recorded():
        assert path.stem == json.loads(path.read_text())["vllm_version"]


@pytest.mark.parametrize("path", _recorded(), ids=lambda p: p.stem)
def test_every_vllm_option_string_reads_as_vllms_dest(path: Path) -> None:
    data, rules = _load(path)
    wrong = {
        option: (dest, _accepted(option, rules))
        for option, dest in data["options"].items()
        if option not in VLLM_ONLY and _accepted(option, rules) != dest
    }
    assert wrong == {}, f"vLLM {rules.version}: option -> (vLLM's dest, hoststate's)"
    assert set(data["positionals"]) == {"model_tag"}


@pytest.mark.parametrize("path", _recorded(), ids=lambda p: p.stem)
def test_no_option_string_vllm_lacks_is_accepted(path: Path) -> None:
    data, rules = _load(path)
    extra = sorted(
        option
        for option in _hoststate_spellings(rules)
        if option not in data["options"] and _accepted(option, rules) is not None
        and (rules.version, option) not in HOSTSTATE_ONLY
    )
    assert extra == [], f"vLLM {rules.version} refuses these, hoststate accepts them"
    for (version, option) in HOSTSTATE_ONLY:
        if version == rules.version:  # an exception that no longer applies must be removed
            assert option not in data["options"] and _accepted(option, rules) is not None


@pytest.mark.parametrize("path", _recorded(), ids=lambda p: p.stem)
def test_flags_and_valued_options_agree(path: Path) -> None:
    data, rules = _load(path)
    differ = sorted(
        dest
        for dest, info in data["dests"].items()
        if dest in OPTIONS and (OPTIONS[dest] == BOOL) == info["takes_value"]
        and (rules.version, dest) not in KIND_DIFFERS
    )
    assert differ == [], f"vLLM {rules.version}: flag in one, option with a value in the other"
    for (version, dest) in KIND_DIFFERS:
        if version == rules.version:
            assert data["dests"][dest]["takes_value"] and OPTIONS[dest] == BOOL


def test_short_spellings_are_vllms() -> None:
    """The aliases of each recorded row are exactly vLLM's single-dash options (help and -O aside)."""
    for path in _recorded():
        data, rules = _load(path)
        vllm_short = {o: d for o, d in data["options"].items() if not o.startswith("--") and o not in VLLM_ONLY}
        ours = {o: d for o, d in rules.aliases.items()
                if not o.startswith("--") and (rules.version, o) not in HOSTSTATE_ONLY}
        assert ours == vllm_short, rules.version


def test_hidden_spellings_are_recorded_and_read():
    """0.33 registers ``--no-enable-X`` / ``--no-disable-X`` and hides them from help only: the recording takes the
    parser's option table, so they are there (about fifty), and hoststate reads each as vLLM's dest."""
    data, rules = _load(RECORDED / "0.33.0.json")
    hidden = {o for info in data["dests"].values() for action in info["actions"] for o in action["hidden"]}
    assert len(hidden) >= 50 and "--no-enable-prefix-caching" in hidden
    assert all(o.startswith("--no-") and _accepted(o, rules) == data["options"][o] for o in hidden)


def _false_default(info: dict[str, Any]) -> bool:
    return not info["takes_value"] and all(action["default"] is False for action in info["actions"])


@pytest.mark.parametrize("path", _recorded(), ids=lambda p: p.stem)
def test_false_by_default_is_the_parsers_default(path: Path) -> None:
    """FALSE_BY_DEFAULT, less the version's none_default_flags, holds exactly the flags whose parser default is
    False in that version (``--no-X`` then changes nothing; with a None default it is a setting vLLM records)."""
    data, rules = _load(path)
    flags = {d: info for d, info in data["dests"].items() if d in OPTIONS and OPTIONS[d] == BOOL}
    false_here = FALSE_BY_DEFAULT - rules.none_default_flags
    differ = sorted(d for d, info in flags.items()
                    if _false_default(info) != (d in false_here) and (rules.version, d) not in KIND_DIFFERS)
    assert differ == [], f"vLLM {rules.version}: parser default False <> FALSE_BY_DEFAULT"




@pytest.mark.parametrize(("version", "flag", "dest", "kept"), [
    ("0.12.0", "--no-async-scheduling", "async_scheduling", False),
    ("0.33.0", "--no-async-scheduling", "async_scheduling", True),
    ("0.12.0", "--no-disable-cascade-attn", "disable_cascade_attn", False),
    ("0.33.0", "--enable-cascade-attn", "disable_cascade_attn", True),
])
def test_a_flag_off_is_a_setting_where_vllm_decides_by_default(version, flag, dest, kept) -> None:
    """0.33's async_scheduling and disable_cascade_attn default to None (vLLM decides by itself): turning one off
    changes the server, so it stays in the normalised arguments and a baseline without it differs. Up to 0.12
    the default is False and the flag changes nothing, as vLLM's own non-default args say."""
    command = locate(["vllm", "serve", "m", flag])
    parsed = normalise(command.args, version, program=command.program or "")
    assert parsed.refusals == []
    assert parsed.args.get(dest, "unset") == (False if kept else "unset")


@pytest.mark.parametrize("path", _recorded(), ids=lambda p: p.stem)
def test_the_abbreviation_table_is_the_recorded_parsers_option_table(path: Path) -> None:
    """argparse matches an abbreviation against every option string of the parser (``allow_abbrev=True``), so the
    table hoststate matches against must be exactly the recorded one: a string missing would turn an ambiguous
    prefix into a unique one, an extra string a unique prefix into an ambiguous one."""
    data, rules = _load(path)
    assert set(option_table(rules)) == set(data["options"]), rules.version
    assert all(option_table(rules)[o][0] == d for o, d in data["options"].items() if o not in VLLM_ONLY)
