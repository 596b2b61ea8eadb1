"""Write scripts/vllm_oracle_classes.json: the command lines of tests/test_vllm_oracle_classes.py's tables, as cases
for scripts/vllm_oracle.py --cases (run that with each recorded vLLM version, fixtures/vllm/oracle/README.md).

    python scripts/vllm_oracle_classes.py            # rewrite the file
    python scripts/vllm_oracle_classes.py --check    # exit 1 when it differs from the tables
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
OUT = REPO / "scripts" / "vllm_oracle_classes.json"
CONFIGS = "fixtures/vllm/oracle/configs/"


def derive() -> dict[str, Any]:
    from tests import test_vllm_oracle_classes as t

    base: list[dict[str, Any]] = []

    def add(case_id: str, cmd: str, model: str = t.LLAMA8) -> None:
        base.append({"id": case_id, "cmd": " ".join(cmd.split()), "model": model, "env": {}})

    for i, tail in enumerate(t.ABBREVIATED):
        add(f"abbrev-{i:02d}", f"vllm serve {t.LLAMA8} {tail}")
    for i, (tail, model, _) in enumerate(t.SPEC):
        add(f"spec-detected-{i}", f"vllm serve {model} {tail}", model)
    for i, (tail, _) in enumerate(t.CHUNKED):
        add(f"chunked-off-{i}", f"vllm serve {t.LLAMA8} {tail}")
    for case_id, tail in t.CONFIG_CASES:
        add(case_id, f"vllm serve {tail.format(c=CONFIGS, model=t.LLAMA8)}")
    for ckpt, given, _ in t.QUANT:
        model, tail = (t.DSV3, "-tp 8") if ckpt == "fp8" else (f"org/llama-{ckpt}", "")
        add(f"quant-{ckpt}-{given}", f"vllm serve {model} {tail} --quantization {given}", model)
    for case_id, model, tail in t.PROBED:
        add(f"probe-{case_id}", f"vllm serve {model} {tail}", model)
    extras: dict[str, list[dict[str, Any]]] = {}
    for version, tail, _ in t.O_CASES:
        rows = extras.setdefault(version, [])
        rows.append({"id": f"o-dotted-{len(rows)}", "cmd": f"vllm serve {t.LLAMA8} {tail}", "model": t.LLAMA8,
                     "env": {}})
    llama = json.loads((REPO / "scripts" / "vllm_oracle_cases.json").read_text())["models"][t.LLAMA8]
    models = {f"org/llama-{ckpt}": {**llama, "config": {**llama["config"], "torch_dtype": "float16",
                                                       "quantization_config": quant}}
              for ckpt, quant in (("awq", t.AWQ), ("gptq", t.GPTQ))}
    return {"about": "Command lines of the classes tests/test_vllm_oracle_classes.py covers, for vllm_oracle.py "
                     "--cases (models: those of vllm_oracle_cases.json, plus these); written by "
                     "scripts/vllm_oracle_classes.py.",
            "models_from": "vllm_oracle_cases.json", "models": models, "base": base, "extras": extras}


def render(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1) + "\n"


def main(argv: list[str]) -> int:
    text = render(derive())
    if "--check" in argv:
        return 0 if OUT.read_text() == text else 1
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
