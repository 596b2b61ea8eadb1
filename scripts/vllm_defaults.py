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
OUT = REPO / "hoststate" / "data" / "vllm_defaults.json"


def derive(recorded: Path = RECORDED) -> dict[str, Any]:
    """{"versions": {version: {dest: default}}} from the recorded parsers; a dest whose actions disagree on
    the default has none (left out)."""
    versions: dict[str, dict[str, Any]] = {}
    for path in sorted(recorded.glob("*.json")):
        data = json.loads(path.read_text())
        table: dict[str, Any] = {}
        for dest, info in sorted(data["dests"].items()):
            defaults = {json.dumps(action["default"], sort_keys=True) for action in info["actions"]}
            if len(defaults) == 1:
                table[dest] = json.loads(defaults.pop())
        versions[data["vllm_version"]] = table
    return {
        "about": "Each recorded vLLM version's `vllm serve` parser defaults by dest, derived by "
                 "scripts/vllm_defaults.py from fixtures/vllm/oracle/options/<version>.json (recorded from vLLM's "
                 "own parser by scripts/vllm_oracle.py --options-out).",
        "versions": versions,
    }


def render(table: dict[str, Any]) -> str:
    return json.dumps(table, indent=1, sort_keys=True) + "\n"


def main(argv: list[str]) -> int:
    text = render(derive())
    if "--check" in argv:
        return 0 if OUT.exists() and OUT.read_text() == text else 1
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
