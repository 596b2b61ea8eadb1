"""Resolve vLLM command lines with vLLM's own code and record the outcome as test data.

Run with a Python whose environment holds exactly one vLLM version (see
fixtures/vllm/oracle/README.md).  Each command line in scripts/vllm_oracle_cases.json goes
through vLLM's unmodified argument parser (the `vllm serve` subcommand, or the OpenAI
api_server module's parser), `validate_parsed_serve_args`, `AsyncEngineArgs.from_cli_args`
and `create_engine_config`, so VllmConfig.__post_init__ decides the final cudagraph mode.

Nothing of vLLM is edited.  What a GPU host would answer is stubbed at run time:
- the platform: a CUDA platform object answering as one node of 8x H100 80GB (capability
  9.0), installed as `vllm.platforms.current_platform` before the rest of vLLM is imported;
  `vllm._C` (compiled kernels, which need libcuda) is an empty module, and so are the other
  compiled modules a version's config resolution imports (COMPILED_MODULES); module constants
  that say what the GPU build holds (CONFIG_CONSTANTS: Triton) answer as on such a host;
- the model hub: an offline Hugging Face cache in a temporary directory holding canned
  config.json files, with HF_HUB_OFFLINE=1, so vLLM's own config loading reads them.
Every case runs in a forked child, so one case cannot leak state into the next.
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import importlib
import io
import json
import os
import pickle
import re
import shlex
import sys
import tempfile
import traceback
import types
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
CASES_FILE = HERE / "vllm_oracle_cases.json"
SNAPSHOT = "0" * 40
CASE_TIMEOUT_S = 300

PLATFORM = {
    "device_name": "NVIDIA H100 80GB HBM3",
    "device_count": 8,
    "capability": [9, 0],
    "total_memory_bytes": 85520809984,
    "fully_connected": True,
    "host_memory_bytes": 2 * 1024**4,
    "device_type": "cuda",
    "stubbed": [
        "vllm.platforms.current_platform (CudaPlatform subclass answering the values above)",
        "torch.cuda.device_count, torch.cuda.is_available",
        "vllm cuda_device_count_stateless",
        "Hugging Face hub: offline cache holding the canned config.json of each model",
    ],
}


# Capability queries that vLLM's compiled kernels answer at import time (torch.ops._C.*),
# answered as the CUDA build does on capability 9.0.
KERNEL_QUERIES = {
    "cutlass_scaled_mm_supports_fp8": lambda capability: capability >= 89,
    "cutlass_scaled_mm_supports_block_fp8": lambda capability: capability >= 90,
    "cutlass_group_gemm_supported": lambda capability: capability >= 90,
    "cutlass_scaled_mm_supports_fp4": lambda capability: capability >= 100,
}
PLATFORM["stubbed"].append("torch.ops._C capability queries: " + ", ".join(KERNEL_QUERIES))


def write_hub_cache(root: Path, models: dict[str, Any]) -> None:
    """Lay out a Hugging Face hub cache holding each model's canned files."""
    for name, model in models.items():
        repo = root / "hub" / ("models--" + name.replace("/", "--"))
        snap = repo / "snapshots" / SNAPSHOT
        snap.mkdir(parents=True, exist_ok=True)
        (repo / "refs").mkdir(exist_ok=True)
        (repo / "refs" / "main").write_text(SNAPSHOT)
        files = {"config.json": model["config"], **model.get("files", {})}
        for rel, content in files.items():
            path = snap / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content if isinstance(content, str) else json.dumps(content))


def prepare_environment(models: dict[str, Any]) -> str:
    """Environment every case starts from: offline hub, no usage stats, quiet logs."""
    home = tempfile.mkdtemp(prefix="vllm-oracle-hf-")
    write_hub_cache(Path(home), models)
    os.environ.update(
        {
            "HF_HOME": home,
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "VLLM_NO_USAGE_STATS": "1",
            "DO_NOT_TRACK": "1",
            "VLLM_LOGGING_LEVEL": "ERROR",
            "VLLM_CACHE_ROOT": tempfile.mkdtemp(prefix="vllm-oracle-cache-"),
            "TOKENIZERS_PARALLELISM": "false",
        }
    )
    for name in ("CUDA_VISIBLE_DEVICES", "VLLM_ALL2ALL_BACKEND", "VLLM_USE_V1", "TORCH_COMPILE_DISABLE"):
        os.environ.pop(name, None)
    return home


# vLLM's compiled kernel modules (they need libcuda), by the first version whose config resolution
# imports them: the CUDA platform module imports vllm._C_stable_libtorch from 0.33, and 0.33's model
# registry inspects architectures in-process, through modules that need the flash-attention kernels.
COMPILED_MODULES = {
    "vllm._C": (0, 0),
    "vllm._C_stable_libtorch": (0, 33),
    "vllm.vllm_flash_attn._vllm_fa2_C": (0, 33),
    "vllm.vllm_flash_attn._vllm_fa3_C": (0, 33),
}


def installed_vllm() -> tuple[int, ...]:
    """(major, minor) of the installed vLLM, read from its metadata (vLLM is not imported yet)."""
    from importlib.metadata import version

    return tuple(int(part) for part in re.findall(r"\d+", version("vllm"))[:2])


def install_platform_stub() -> None:
    """Make vLLM see a CUDA node of 8x H100 before any of its modules resolves the platform."""
    stubbed = [name for name, since in COMPILED_MODULES.items() if installed_vllm() >= since]
    for name in stubbed:
        sys.modules.setdefault(name, types.ModuleType(name))
    PLATFORM["stubbed"].insert(1, f"{', '.join(stubbed)} (empty)")
    import torch

    torch.cuda.device_count = lambda: PLATFORM["device_count"]
    for name, answer in KERNEL_QUERIES.items():
        setattr(torch.ops._C, name, answer)
    torch.cuda.is_available = lambda: True
    import vllm.platforms as platforms
    from vllm.platforms import cuda
    from vllm.platforms.interface import DeviceCapability

    major, minor = PLATFORM["capability"]

    class StubCudaPlatform(cuda.NonNvmlCudaPlatform):
        @classmethod
        def get_device_capability(cls, device_id: int = 0) -> DeviceCapability:
            return DeviceCapability(major=major, minor=minor)

        @classmethod
        def get_device_name(cls, device_id: int = 0) -> str:
            return PLATFORM["device_name"]

        @classmethod
        def get_device_total_memory(cls, device_id: int = 0) -> int:
            return PLATFORM["total_memory_bytes"]

        @classmethod
        def is_fully_connected(cls, physical_device_ids: list[int]) -> bool:
            return PLATFORM["fully_connected"]

        @classmethod
        def device_count(cls) -> int:
            return PLATFORM["device_count"]

        @classmethod
        def log_warnings(cls) -> None:
            return None

    platforms.current_platform = StubCudaPlatform()


# Host queries vLLM makes through its own helpers, replaced wherever a module imported them.
HOST_QUERIES = {
    "cuda_device_count_stateless": lambda *a, **k: PLATFORM["device_count"],
    "_cuda_device_count_stateless": lambda *a, **k: PLATFORM["device_count"],
    "get_cpu_memory": lambda *a, **k: PLATFORM["host_memory_bytes"],
}
PLATFORM["stubbed"].append("host helpers in every vllm module: " + ", ".join(HOST_QUERIES))


def patch_host_queries() -> None:
    """Replace vLLM's host helpers in every loaded vllm module (they are imported by name)."""
    for modname, module in list(sys.modules.items()):
        if module is None or not (modname == "vllm" or modname.startswith("vllm.")):
            continue
        for name, answer in HOST_QUERIES.items():
            if callable(getattr(module, name, None)):
                setattr(module, name, answer)


def _import_first(*names: str) -> Any:
    """Return the first attribute found among 'module:attr' names (modules moved between versions)."""
    for spec in names:
        mod, attr = spec.split(":")
        with contextlib.suppress(ImportError, AttributeError):
            return getattr(__import__(mod, fromlist=[attr]), attr)
    raise ImportError(f"none of {names}")


def _cli_args(name: str) -> tuple[str, ...]:
    """Where the serve parser's helpers live: openai.cli_args, common.cli_args from 0.33."""
    return (f"vllm.entrypoints.openai.cli_args:{name}", f"vllm.entrypoints.common.cli_args:{name}")


def build_parser(argv: list[str]) -> tuple[Any, list[str], str]:
    """The parser vLLM itself builds for this program, the arguments it parses, and its kind."""
    flexible = _import_first("vllm.utils.argparse_utils:FlexibleArgumentParser", "vllm.utils:FlexibleArgumentParser")
    make_arg_parser = _import_first(*_cli_args("make_arg_parser"))
    if len(argv) >= 3 and argv[1] == "-m":
        if argv[2] != "vllm.entrypoints.openai.api_server":
            raise SystemExit(f"unsupported module {argv[2]}")
        parser = make_arg_parser(flexible(description="vLLM OpenAI-Compatible RESTful API server."))
        return parser, argv[3:], "api_server"
    parser = flexible(description="vLLM CLI")
    subparsers = parser.add_subparsers(required=False, dest="subparser")
    for modname in ("vllm.entrypoints.cli.serve",):
        module = importlib.import_module(modname)
        for cmd in module.cmd_init():
            cmd.subparser_init(subparsers).set_defaults(dispatch_function=cmd.cmd)
    return parser, argv[1:], "cli"


def jsonable(value: Any) -> Any:
    """A JSON form of a parsed argument value (enums by name, objects by their JSON or repr)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [jsonable(v) for v in value]
    for attr in ("model_dump", "to_dict"):
        if hasattr(value, attr):
            with contextlib.suppress(Exception):
                return jsonable(getattr(value, attr)())
    if hasattr(value, "__dataclass_fields__"):
        import dataclasses

        with contextlib.suppress(Exception):
            return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return repr(value)


def non_default_args(args: argparse.Namespace) -> dict[str, Any]:
    """vLLM's own 'non-default args': every dest whose value differs from the serve parser default."""
    flexible = _import_first("vllm.utils.argparse_utils:FlexibleArgumentParser", "vllm.utils:FlexibleArgumentParser")
    make_arg_parser = _import_first(*_cli_args("make_arg_parser"))
    defaults = vars(make_arg_parser(flexible()).parse_args([]))
    out = {}
    for dest, default in defaults.items():
        value = getattr(args, dest, default)
        with contextlib.suppress(Exception):
            if value != default:
                out[dest] = jsonable(value)
    return out


def raised_at(exc: BaseException) -> str | None:
    """The innermost vLLM frame of a traceback: 'vllm/config/vllm.py:123 in __post_init__'."""
    where = None
    for frame in traceback.extract_tb(exc.__traceback__):
        path = frame.filename.replace(os.sep, "/")
        if "/vllm/" in path:
            where = f"vllm/{path.rsplit('/vllm/', 1)[1]}:{frame.lineno} in {frame.name}"
    return where


def _refusal(stage: str, exc: BaseException, stderr: str) -> dict[str, Any]:
    if isinstance(exc, SystemExit):
        # argparse prints usage, then 'prog: error: message' (which may span lines)
        text = stderr.strip()
        start = text.find(": error:")
        start = text.rfind("\n", 0, start) + 1 if start >= 0 else 0
        message = " ".join(text[start:].split()) or f"exit {exc.code}"
        error_type = "SystemExit"
    else:
        message, error_type = " ".join(str(exc).split()), type(exc).__name__
    message = re.sub(r" at 0x[0-9a-f]+", "", message)
    return {
        "outcome": "refused",
        "stage": stage,
        "error_type": error_type,
        "error": message[:300],
        "raised_at": raised_at(exc),
    }


# How vLLM says no: argparse exits, config validation raises these (pydantic's ValidationError
# is a ValueError).  Anything else (AttributeError, ImportError, RuntimeError...) means the
# stubbed platform lacks something, and is reported as an oracle error, never as a refusal.
REFUSALS = (SystemExit, ValueError, NotImplementedError, AssertionError, KeyError, argparse.ArgumentError)


# A ValueError that only says the stub lacks something: vLLM could not import a model class (its
# log holds the ImportError), which on a GPU host it can.
STUB_GAP = re.compile(r"failed to be inspected")


def resolve(argv: list[str]) -> dict[str, Any]:
    """One command line through vLLM's parser, EngineArgs and create_engine_config."""
    stage = "parse"
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            parser, args_in, kind = build_parser(argv)
            args = parser.parse_args(args_in)
            validate = _import_first(*_cli_args("validate_parsed_serve_args"))
            if kind == "cli" and getattr(args, "subparser", None) != "serve":
                raise SystemExit(f"not a serve command: {args_in[:1]}")
            validate(args)
            if getattr(args, "model_tag", None) is not None:
                args.model = args.model_tag
            nda = non_default_args(args)
            stage = "engine_args"
            engine_args_cls = _import_first("vllm.engine.arg_utils:AsyncEngineArgs")
            usage_context = _import_first("vllm.usage.usage_lib:UsageContext")
            engine_args = engine_args_cls.from_cli_args(args)
            stage = "config"
            config = engine_args.create_engine_config(usage_context=usage_context.OPENAI_API_SERVER)
    except REFUSALS as exc:  # vLLM refuses by raising; argparse by exiting
        if not STUB_GAP.search(str(exc)):
            return _refusal(stage, exc, err.getvalue())
        return {"outcome": "oracle_error", "stage": stage, "error": f"{type(exc).__name__}: {exc}"[:300],
                "traceback": traceback.format_exc()[-3000:]}
    except Exception as exc:  # noqa: BLE001 - not a refusal: the stub is missing something
        return {
            "outcome": "oracle_error",
            "stage": stage,
            "error": f"{type(exc).__name__}: {exc}"[:300],
            "traceback": traceback.format_exc()[-3000:],
        }
    return describe(config, nda)


def describe(config: Any, nda: dict[str, Any]) -> dict[str, Any]:
    """What the resolved VllmConfig says about graphs and compilation."""
    cc = config.compilation_config
    mode = getattr(cc, "mode", None)
    if mode is None:
        mode = getattr(cc, "level", None)
    cg = getattr(cc, "cudagraph_mode", None)
    spec = getattr(config, "speculative_config", None)
    parallel = config.parallel_config
    runner_v2 = None
    with contextlib.suppress(Exception):  # Model Runner V2 (0.33+); absent before
        runner_v2 = getattr(config, "use_v2_model_runner", None)
    return {
        "outcome": "ok",
        "cudagraph_mode": cg.name if cg is not None else None,
        "compilation_mode": int(mode) if mode is not None else None,
        "splitting_ops": jsonable(cc.splitting_ops),
        "enforce_eager": bool(config.model_config.enforce_eager),
        "non_default_args": nda,
        "runner_type": jsonable(getattr(config.model_config, "runner_type", None)),
        "cudagraph_capture_sizes": jsonable(getattr(cc, "cudagraph_capture_sizes", None)),
        "use_cudagraph": jsonable(getattr(cc, "use_cudagraph", None)),
        "full_cuda_graph": jsonable(getattr(cc, "full_cuda_graph", None)),
        "speculative_method": getattr(spec, "method", None) if spec is not None else None,
        "data_parallel_size": parallel.data_parallel_size,
        "all2all_backend": jsonable(getattr(parallel, "all2all_backend", None)),
        "model_runner_v2": runner_v2 if isinstance(runner_v2, bool) else None,
    }


# argparse names the program after sys.argv[0]; the console script is 'vllm'.
PROG = {"vllm.entrypoints.openai.api_server": "api_server.py"}


def run_case(argv: list[str], env: dict[str, str]) -> dict[str, Any]:
    """Resolve in a forked child (fresh state per case); the parent reads its JSON answer."""
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        code = 0
        sys.argv[0] = PROG.get(argv[2] if argv[1:2] == ["-m"] else "", "vllm")
        try:
            os.environ.update(env)
            result = resolve(argv)
        except BaseException as exc:  # noqa: BLE001 - the child must always answer
            result = {"outcome": "oracle_error", "error": f"{type(exc).__name__}: {exc}"[:300]}
            code = 1
        with os.fdopen(write_fd, "w") as out:
            out.write(json.dumps(result, default=repr))
        os._exit(code)
    os.close(write_fd)
    with os.fdopen(read_fd) as inp:
        text = inp.read()
    os.waitpid(pid, 0)
    if not text:
        return {"outcome": "oracle_error", "error": "child died without an answer"}
    return json.loads(text)


def memoise_model_inspection() -> None:
    """Keep vLLM's answer about each model class for the whole run, where vLLM does not.

    vLLM inspects a model class (is it a text generation model, a pooling model, ...) by
    re-importing itself in a subprocess, about 10 s here.  From 0.11.0 on vLLM keeps each
    answer in VLLM_CACHE_ROOT/modelinfos, shared by every case of a run; before that (0.10.2)
    every case paid for it again.  There the answer, still computed by vLLM's own subprocess,
    is kept in the same run-wide cache directory, keyed by module and class.
    """
    registry = importlib.import_module("vllm.model_executor.models.registry")
    lazy = registry._LazyRegisteredModel
    if hasattr(lazy, "_load_modelinfo_from_cache"):
        return  # vLLM keeps its own cache
    inspect = lazy.inspect_model_cls

    def inspect_once(self: Any) -> Any:
        path = Path(os.environ["VLLM_CACHE_ROOT"]) / "oracle-modelinfos" / f"{self.module_name}.{self.class_name}"
        if path.exists():
            return pickle.loads(path.read_bytes())
        info = inspect(self)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.parent / f"{path.name}.{os.getpid()}.tmp"
        tmp.write_bytes(pickle.dumps(info))
        tmp.replace(path)
        return info

    lazy.inspect_model_cls = inspect_once
    PLATFORM["stubbed"].append("model class inspection kept per class for the run (vLLM before 0.11.0)")


def answer_flash_attention() -> None:
    """Flash-attention 2 and 3 present, as in vLLM's CUDA wheel on capability 9.0, where vLLM asks.

    Before 0.11.0, vLLM picks its V1 or V0 engine at config time, and ``--kv-cache-dtype fp8``
    keeps V1 only when flash-attention 3 is there (it is on an H100); the kernels cannot load on
    a machine without CUDA, so vLLM would fall back to V0 (no compilation, no graphs).
    """
    import torch
    import vllm

    if tuple(int(p) for p in re.findall(r"\d+", vllm.__version__)[:2]) >= (0, 11):
        return  # 0.11.0 no longer asks about the KV-cache dtype at config time

    fa = importlib.import_module("vllm.vllm_flash_attn.flash_attn_interface")
    fa.FA2_AVAILABLE = fa.FA3_AVAILABLE = True
    torch.cuda.get_device_capability = lambda device=None: tuple(PLATFORM["capability"])
    PLATFORM["stubbed"].append("flash-attention 2 and 3 kernels present, torch.cuda.get_device_capability "
                               "(vLLM before 0.11.0)")


# Answers of the GPU host's software that vLLM's config module reads as module constants (0.33+):
# Triton ships with the CUDA build of torch, and 0.33 picks its default model runner by it (Model
# Runner V2 needs Triton). A version whose config module lacks the name is left alone.
CONFIG_CONSTANTS = {"HAS_TRITON": True}


def patch_config_constants() -> None:
    module = sys.modules.get("vllm.config.vllm")
    patched = [name for name in CONFIG_CONSTANTS if module is not None and hasattr(module, name)]
    for name in patched:
        setattr(module, name, CONFIG_CONSTANTS[name])
    if patched:
        PLATFORM["stubbed"].append("vllm.config.vllm: " + ", ".join(f"{n} = {CONFIG_CONSTANTS[n]}" for n in patched))


def preload() -> None:
    """Import vLLM's parser and engine modules once, before forking, so each case starts fast."""
    build_parser(["vllm", "serve"])
    _import_first("vllm.engine.arg_utils:AsyncEngineArgs")
    _import_first("vllm.usage.usage_lib:UsageContext")
    memoise_model_inspection()
    answer_flash_attention()
    patch_host_queries()
    patch_config_constants()


def cases_for(data: dict[str, Any], version: str) -> list[dict[str, Any]]:
    """The base list plus the extras listed for this version."""
    rows = list(data["base"]) + list(data.get("extras", {}).get(version, []))
    ids = [row["id"] for row in rows]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise SystemExit(f"duplicate case ids: {sorted(dup)}")
    return rows


def model_facts(models: dict[str, Any]) -> dict[str, Any]:
    return {
        name: {k: m[k] for k in ("architectures", "moe", "pooling", "encoder_decoder")} | {"config": m["config"]}
        for name, m in models.items()
    }


def serve_options() -> dict[str, Any]:
    """Every option string of vLLM's own `vllm serve` parser -> dest, and what each dest takes.

    Built as the cases build it (build_parser), so it is the parser that accepts or refuses them.
    """
    parser, _, _ = build_parser(["vllm", "serve"])
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve = subparsers.choices["serve"]
    # What argparse matches is its option table, not action.option_strings: 0.33's EnableDisableAction
    # registers --no-enable-X / --no-disable-X and then drops them from option_strings (help only).
    registered: dict[int, list[str]] = {}
    for option, action in serve._option_string_actions.items():
        registered.setdefault(id(action), []).append(option)
    options: dict[str, str] = {}
    dests: dict[str, dict[str, Any]] = {}
    positionals = []
    for action in serve._actions:
        if not action.option_strings:
            positionals.append(action.dest)
            continue
        strings = registered.get(id(action), [])
        for option in strings:
            options[option] = action.dest
        dests.setdefault(action.dest, {"actions": []})["actions"].append({
            "action": type(action).__name__,
            "nargs": action.nargs,
            "type": getattr(action.type, "__name__", None if action.type is None else repr(action.type)),
            "options": sorted(strings),
            "hidden": sorted(set(strings) - set(action.option_strings)),
            "default": jsonable(action.default),
        })
    for dest, info in dests.items():
        info["negatable"] = any(o.startswith("--no-") and options[o] == dest for o in options)
        info["takes_value"] = any(a["nargs"] != 0 for a in info["actions"])
    return {"options": options, "dests": dests, "positionals": sorted(positionals)}


def write_json(path: str, data: dict[str, Any]) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(path).with_suffix(".tmp")
    tmp.write_text(json.dumps(data, sort_keys=True, indent=1) + "\n")
    tmp.replace(path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="JSON file to write the cases' outcomes to")
    ap.add_argument("--options-out", help="JSON file to write the serve parser's options to (no cases run)")
    ap.add_argument("--only", nargs="*", help="case ids to run (for debugging)")
    ap.add_argument("--cases", default=str(CASES_FILE))
    opts = ap.parse_args()
    data = json.loads(Path(opts.cases).read_text())
    # a cases file may take the models of another one (``models_from``, beside it) and add its own
    shared = {}
    if "models_from" in data:
        shared = json.loads((Path(opts.cases).parent / data["models_from"]).read_text())["models"]
    models = data["models"] = {**shared, **data.get("models", {})}
    prepare_environment(models)
    install_platform_stub()
    import vllm

    version = vllm.__version__
    if opts.options_out:
        write_json(opts.options_out, {"vllm_version": version, "generated_by": "scripts/vllm_oracle.py --options-out",
                                      **serve_options()})
        return 0
    if not opts.out:
        ap.error("--out or --options-out is required")
    preload()
    base_env = dict(os.environ)
    records = []
    for row in cases_for(data, version):
        if opts.only and row["id"] not in opts.only:
            continue
        argv = shlex.split(row["cmd"])
        env = row.get("env", {})
        os.environ.clear()
        os.environ.update(base_env)
        result = run_case(argv, env)
        record = {"id": row["id"], "argv": argv, "env": env, "model": row["model"], **result}
        records.append(record)
        brief = result.get("cudagraph_mode") if result["outcome"] == "ok" else result.get("error", "")[:100]
        print(f"{row['id']:40} {result['outcome']:8} {brief}", file=sys.stderr, flush=True)
    out = {
        "vllm_version": version,
        "generated_by": "scripts/vllm_oracle.py",
        "platform": PLATFORM,
        "models": model_facts(models),
        "cases": records,
    }
    write_json(opts.out, out)
    errors = [r["id"] for r in records if r["outcome"] == "oracle_error"]
    print(f"{len(records)} cases, errors: {errors}", file=sys.stderr)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
