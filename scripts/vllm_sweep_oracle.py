"""Record how ``vllm bench sweep serve`` runs a wrapped ``--bench-cmd``, with vLLM's own code, as test data.

    python scripts/vllm_sweep_oracle.py VLLM_TREE VERSION   # VLLM_TREE: an unpacked vLLM wheel (pip download
                                                            # vllm==VERSION --no-deps; unzip)

vLLM's ``vllm/benchmarks/sweep/param_sweep.py`` is loaded as it is (it imports only the standard library); from
``serve.py`` the functions that build and run a cell (``_update_run_data``, ``run_benchmark``,
``_get_comb_base_path``, ``_get_comb_run_path``, ``run_comb``) are taken unmodified from its syntax tree and run
with a stand-in server whose ``run_subcommand`` writes a canned ``vllm bench serve`` result where the command line
says (vLLM's own server runs the command; no GPU here). Nothing of vLLM is edited or kept in this repository: the
output (fixtures/vllm/sweep/VERSION.json) holds the command lines vLLM built, each cell's result as vLLM rewrote it,
and which runs a resumed sweep reused.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import json
import shlex
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
FUNCTIONS = ("_update_run_data", "run_benchmark", "_get_comb_base_path", "_get_comb_run_path", "run_comb")
#: The wrapper a user gives --bench-cmd (docs/watch.md), and the bench options after it.
WRAPPED = ("hoststate guard --baseline=base.toml --watch --attach-from-argv -- "
           "vllm bench serve --model meta-llama/Llama-3.1-8B-Instruct --dataset-name random --num-prompts 100")
CASES = [
    {"name": "default", "bench_cmd": WRAPPED, "serve_comb": {}, "bench_comb": {}, "num_runs": 2},
    {"name": "overrides", "bench_cmd": WRAPPED, "serve_comb": {"max_num_seqs": 64},
     "bench_comb": {"request_rate": 10, "num_prompts": 200}, "num_runs": 1},
    # an override named like one of guard's options: guard's are given as --name=value, which vLLM never matches
    {"name": "colliding", "bench_cmd": WRAPPED.replace("--watch", "--watch --label=sweep"), "serve_comb": {},
     "bench_comb": {"label": "bench-label"}, "num_runs": 1},
]
RESULT = {"date": "20261203-120000", "backend": "vllm", "model_id": "meta-llama/Llama-3.1-8B-Instruct",
          "num_prompts": 100, "request_rate": "inf", "completed": 100, "failed": 0, "output_throughput": 1005.0}


def _load(tree: Path) -> dict[str, Any]:
    spec = importlib.util.spec_from_file_location("param_sweep", tree / "vllm/benchmarks/sweep/param_sweep.py")
    assert spec and spec.loader
    param_sweep = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(param_sweep)
    source = (tree / "vllm/benchmarks/sweep/serve.py").read_text()
    utils = (tree / "vllm/benchmarks/sweep/utils.py").read_text()
    namespace: dict[str, Any] = {"json": json, "Path": Path, "ParameterSweepItem": param_sweep.ParameterSweepItem,
                                 "ServerProcess": object, "__name__": "sweep_serve"}
    exec(compile(ast.parse(utils), "utils.py", "exec"), namespace)  # noqa: S102 - vLLM's own helper
    module = ast.parse(source)
    kept = [node for node in module.body if isinstance(node, ast.FunctionDef) and node.name in FUNCTIONS]
    exec(compile(ast.Module(body=kept, type_ignores=[]), "serve.py", "exec"), namespace)  # noqa: S102
    return namespace


class Server:
    """vLLM's ServerProcess runs the bench command; this one records it and writes the result it names."""

    def __init__(self) -> None:
        self.commands: list[list[str]] = []

    def run_subcommand(self, cmd: list[str]) -> None:
        self.commands.append(list(cmd))
        folder = cmd[len(cmd) - 1 - cmd[::-1].index("--result-dir") + 1]
        name = cmd[len(cmd) - 1 - cmd[::-1].index("--result-filename") + 1]
        Path(folder, name).write_text(json.dumps(RESULT))

    def after_bench(self) -> None:
        pass


def _run(ns: dict[str, Any], case: dict[str, Any], experiment: Path, server: Server) -> list[str]:
    item = ns["ParameterSweepItem"]
    serve, bench = item(case["serve_comb"]), item(case["bench_comb"])
    base = ns["_get_comb_base_path"](experiment, serve, bench)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        ns["run_comb"](server, shlex.split(case["bench_cmd"]), serve_comb=serve, bench_comb=bench, base_path=base,
                       num_runs=case["num_runs"], dry_run=False)
    return out.getvalue().splitlines()


def record(tree: Path, version: str) -> dict[str, Any]:
    ns = _load(tree)
    cases = []
    for case in CASES:
        with tempfile.TemporaryDirectory() as tmp:
            experiment = Path(tmp, "results", "20261203_120000")
            server = Server()
            _run(ns, case, experiment, server)
            files = {str(p.relative_to(experiment)): json.loads(p.read_text())
                     for p in sorted(experiment.rglob("*.json"))}
            resumed = Server()
            said = _run(ns, case, experiment, resumed)  # a resumed sweep: every run=N.json is found and reused
            cases.append({**case, "commands": [[a.replace(tmp, "TMP") for a in c] for c in server.commands],
                          "files": files, "resumed_commands": len(resumed.commands),
                          "resumed_said": [line for line in said if "existing" in line.lower()]})
    return {"vllm_version": version, "result": RESULT, "cases": cases}


def main(argv: list[str]) -> int:
    tree, version = Path(argv[0]), argv[1]
    out = HERE.parent / "fixtures" / "vllm" / "sweep" / f"{version}.json"
    out.write_text(json.dumps(record(tree, version), indent=1) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
