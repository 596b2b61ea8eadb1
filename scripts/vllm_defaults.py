"""Write hoststate/data/vllm_defaults.json: each recorded vLLM version's ``vllm serve`` parser defaults.

The defaults are read from fixtures/vllm/oracle/options/<version>.json, which scripts/vllm_oracle.py
--options-out recorded from that version's unmodified parser (every action's ``default``). vLLM calls an argument
"non-default" when it differs from exactly these values (its ``log_non_default_args``), so an argument spelled at
its default is the same engine setting as no argument. tests/test_vllm_resolved.py checks the written file equals
what this script derives now.

    python scripts/vllm_defaults.py            # rewrite the file
    python scripts/vllm_defaults.py --check    # exit 1 when the file is stale
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RECORDED = REPO / "fixtures" / "vllm" / "oracle" / "options"
sys.path.insert(0, str(REPO / "scripts"))  # the shared datafile module beside this script
from datafile import write_or_check  # noqa: E402

OUT = REPO / "hoststate" / "data" / "vllm_defaults.json"


CHOICES = REPO / "hoststate" / "data" / "vllm_choices.json"

#: ``_optional_type`` dests whose "None" / "" argparse refuses although hoststate/data/vllm_choices.json (derived by
#: scripts/vllm_choices.py from each version's source) does not say so: kept by hand as hoststate read them before.
#: The versions where it holds, None for every version. Not ``quantization``: its config module binds
#: ``QuantizationMethods = Any`` at run time in 0.10.2-0.12.0 (the Literal is imported under TYPE_CHECKING only:
#: vllm/config/__init__.py of 0.10.2, vllm/config/model.py after), so argparse has no choices for it and takes None.
NONE_REFUSED_BY_HAND: dict[str, frozenset[str] | None] = {
    "tool_strict_level": None,  # a FrontendArgs option: vllm_choices.py reads EngineArgs only
    # enum-typed (AttentionBackendEnum): not read here, so kept as hoststate read them before
    "attention_backend": None, "mm_encoder_attn_backend": None,
}


def _none_refused(dest: str, version: str) -> bool:
    """argparse refuses optional_type's None: the version's derived choices hold no None object (the string "None"
    that 0.10.2-0.12.0 append is never equal to it), or NONE_REFUSED_BY_HAND says so."""
    choices = json.loads(CHOICES.read_text())["versions"].get(version, {}).get(dest)
    if choices is not None:
        return None not in choices
    hand = NONE_REFUSED_BY_HAND.get(dest, frozenset())
    return hand is None or version in hand


def _none_is_unset(dest: str, info: dict[str, Any], version: str) -> bool:
    """vLLM's optional_type (vllm/engine/arg_utils.py) reads "None" and "" as None, which is the parser default of
    these dests: a single value-taking action typed ``_optional_type`` whose default is None and that has no
    choices that refuse it (_none_refused)."""
    actions = info["actions"]
    refused = _none_refused(dest, version)
    return (len(actions) == 1 and actions[0]["type"] == "_optional_type" and actions[0]["nargs"] is None
            and actions[0]["default"] is None and not refused)


def derive(recorded: Path = RECORDED) -> dict[str, Any]:
    """{"versions": {version: {dest: default}}} from the recorded parsers; a dest whose actions disagree on
    the default has none (left out). ``none_is_unset``: {version: [dest]} whose value "None" or "" vLLM parses
    as None, the parser default (_none_is_unset)."""
    versions: dict[str, dict[str, Any]] = {}
    none_is_unset: dict[str, list[str]] = {}
    for path in sorted(recorded.glob("*.json")):
        data = json.loads(path.read_text())
        table: dict[str, Any] = {}
        for dest, info in sorted(data["dests"].items()):
            defaults = {json.dumps(action["default"], sort_keys=True) for action in info["actions"]}
            if len(defaults) == 1:
                table[dest] = json.loads(defaults.pop())
        versions[data["vllm_version"]] = table
        none_is_unset[data["vllm_version"]] = sorted(
            dest for dest, info in data["dests"].items() if _none_is_unset(dest, info, data["vllm_version"]))
    return {
        "about": "Each recorded vLLM version's `vllm serve` parser defaults by dest, derived by "
                 "scripts/vllm_defaults.py from fixtures/vllm/oracle/options/<version>.json (recorded from vLLM's "
                 "own parser by scripts/vllm_oracle.py --options-out); none_is_unset: the dests whose value "
                 "\"None\" or \"\" vLLM's optional_type parses as None, their default.",
        "none_is_unset": none_is_unset,
        "versions": versions,
    }


def render(table: dict[str, Any]) -> str:
    return json.dumps(table, indent=1, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    return write_or_check(OUT, render(derive()), argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
