"""``[packages]``: installed versions of the inference stack, from distribution metadata names.

Never ``pip list`` and never ``import torch``: one pass over the ``*.dist-info`` directories on the
import path. For a running vLLM server the same scan reads the server's own files: its import path
is derived from its argv, environment (PYTHONPATH, HOME), its executable's ``pyvenv.cfg`` and the
standard ``lib/pythonX.Y/site-packages`` layout, all read through the process's view
(hoststate.procfiles) with its user's rights. Nothing of the server's is ever executed.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from hoststate.collectors import Context, Section
from hoststate.coverage import source
from hoststate.procfiles import ProcView
from hoststate.text import clean

#: Distributions recorded by name (PEP 503 normalised: lower case, ``-``).
STACK: tuple[str, ...] = (
    "vllm", "torch", "triton", "pytorch-triton", "flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache",
    "flash-attn", "vllm-flash-attn", "xformers", "arctic-inference", "transformers", "tokenizers",
    "huggingface-hub", "safetensors", "accelerate", "compressed-tensors", "bitsandbytes", "deep-gemm", "deep-ep",
    "xgrammar", "llguidance", "outlines", "lm-format-enforcer", "mistral-common", "ray", "nixl", "lmcache",
    "nvidia-ml-py", "pynvml", "numpy", "cupy-cuda12x", "cupy-cuda13x", "torchvision", "torchaudio", "cuda-python",
    "cuda-bindings", "pyperf", "hoststate",
)
#: Every distribution whose normalised name starts with one of these is recorded too.
PREFIXES: tuple[str, ...] = ("nvidia-", "cuda-", "vllm-", "flashinfer-", "triton-")

Lister = Callable[[str], "list[str] | None"]
Reader = Callable[[str], "str | None"]


def normalise_name(name: str) -> str:
    """PEP 503: lower case, runs of ``-_.`` as one ``-``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _metadata_version(text: str) -> str | None:
    """The ``Version:`` header of a METADATA/PKG-INFO file (headers end at the first blank line)."""
    for line in text.splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        if key.strip().lower() == "version" and value.strip():
            return value.strip()
    return None


def scan(path: list[str], listdir: Lister, read: Reader) -> dict[str, str]:
    """The stack's versions on an import path, from ``name-version.dist-info``/``.egg-info`` names.

    The version comes from the directory name (what importlib.metadata matches on); only a legacy
    name without one makes us open its METADATA/PKG-INFO. The first distribution of a name on the
    path wins, as import would. ``listdir``/``read`` decide how files are reached (directly for
    this interpreter, through a process's view for a server's).
    """
    out: dict[str, str] = {}
    for base in path:
        entries = listdir(base or ".")
        for entry in entries or []:
            if not entry.endswith((".dist-info", ".egg-info")):
                continue
            # a name is anyone's to choose: undecodable bytes (surrogateescape) become \\xNN (hoststate.text)
            stem = clean(entry).rsplit(".", 1)[0]
            raw_name, _, version = stem.partition("-")
            name = normalise_name(raw_name)
            if name in out or not (name in STACK or name.startswith(PREFIXES)):
                continue
            version = version.split("-")[0]
            if not version:
                where = f"{base.rstrip('/')}/{entry}"
                text = None
                for meta in ("METADATA", "PKG-INFO"):
                    text = read(f"{where}/{meta}")
                    if text is not None:
                        break
                if text is None and entry.endswith(".egg-info"):
                    text = read(where)  # a single-file egg-info is the PKG-INFO itself
                version = _metadata_version(text or "") or ""
            if version:
                out[name] = clean(version)
    return dict(sorted(out.items()))


#: An import-path entry that cannot be listed hides every distribution in it: the section is unknown, never
#: "none installed". A missing entry or a zip file on sys.path (ENOENT, ENOTDIR) holds no dist-info folder and
#: is not recorded.
SOURCES = (source(r".+", "**"),)
_NOT_A_FOLDER = frozenset({2, 20})  # ENOENT, ENOTDIR


def _lister(unreadable: dict[str, str] | None) -> Callable[[str], list[str] | None]:
    def listdir(path: str) -> list[str] | None:
        try:
            return sorted(os.listdir(path))
        except OSError as err:
            if unreadable is not None and err.errno not in _NOT_A_FOLDER:
                import errno

                unreadable[path] = errno.errorcode.get(err.errno or 0, type(err).__name__)
            return None
    return listdir


def _local_listdir(path: str) -> list[str] | None:
    return _lister(None)(path)


def _local_read(path: str) -> str | None:
    try:
        with open(path, "rb") as fh:
            return fh.read(1 << 20).decode("utf-8", "replace")
    except OSError:
        return None


def installed(unreadable: dict[str, str] | None = None) -> dict[str, str]:
    """The stack's versions in this interpreter (first distribution of a name wins, as import would); an import
    path entry that could not be listed is added to ``unreadable`` with its errno name."""
    return scan(list(sys.path), _lister(unreadable), _local_read)


# --------------------------------------------------------------------------------------------
# A running server's interpreter, from its files

#: Interpreter options that take a value (``-X dev``, ``-W error``).
_OPTS_WITH_VALUE = frozenset("XWQ")


@dataclass
class ServerPython:
    """What a process's files say about its interpreter, and the import path derived from them."""

    executable: str | None = None
    version: str | None = None
    prefix: str | None = None
    venv: str | None = None
    path: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _flags(argv: list[str]) -> tuple[set[str], bool]:
    """(single-letter interpreter flags, whether ``-m``/``-c`` runs) from argv[1:], up to the script."""
    flags: set[str] = set()
    i = 1
    while i < len(argv):
        tok = argv[i]
        if not tok.startswith("-") or tok in ("-", "--"):
            return flags, False
        letters = tok[1:]
        for j, letter in enumerate(letters):
            if letter in "mc":
                return flags, True
            flags.add(letter)
            if letter in _OPTS_WITH_VALUE:
                if j == len(letters) - 1:
                    i += 1
                break
        i += 1
    return flags, False


def _which(view: ProcView, name: str, env: dict[str, str]) -> str | None:
    """``name`` as the process's PATH finds it (argv[0] without a slash), inside its root."""
    for directory in env.get("PATH", "").split(":"):
        if directory and view.kind(f"{directory.rstrip('/')}/{name}") == "file":
            return f"{directory.rstrip('/')}/{name}"
    return None


def _pyvenv(view: ProcView, executable: str) -> tuple[str | None, dict[str, str]]:
    """(venv directory, pyvenv.cfg keys) next to the unresolved executable or one level up, as Python looks."""
    here = os.path.dirname(executable)
    for directory in (here, os.path.dirname(here)):
        text, _ = view.read_text(f"{directory.rstrip('/')}/pyvenv.cfg")
        if text is not None:
            cfg = {}
            for line in text.splitlines():
                key, eq, value = line.partition("=")
                if eq:
                    cfg[key.strip().lower()] = value.strip()
            return directory, cfg
    return None, {}


def _xy(text: str | None) -> str | None:
    m = re.search(r"(\d+)\.(\d+)", text or "")
    return f"{m.group(1)}.{m.group(2)}" if m else None


def _lib_version(view: ProcView, prefix: str, hint: str | None) -> str | None:
    """The X.Y of ``prefix/lib/pythonX.Y``: the hint when that directory exists, else the only one."""
    entries, _ = view.listdir(f"{prefix.rstrip('/')}/lib")
    found = sorted(e[6:] for e in entries or [] if re.fullmatch(r"python\d+\.\d+", e))
    if hint and hint in found:
        return hint
    return found[0] if len(found) == 1 else hint


def server_python(view: ProcView, argv: list[str], env: dict[str, str]) -> ServerPython:
    """The interpreter and import path of a process, the way Python's getpath and site derive them."""
    out = ServerPython()
    flags, runs_module = _flags(argv)
    isolated = "I" in flags
    ignore_env = isolated or "E" in flags
    first = argv[0] if argv else ""
    if "/" in first:
        out.executable = first
    elif first:
        out.executable = _which(view, first, env)
    real, err = view.executable()
    if out.executable is None or not os.path.basename(out.executable).startswith("python"):
        if real is None:
            out.notes.append(f"executable: {err}")
            return out
        out.executable = real
    located, err = view.locate(out.executable)
    hint = _xy(os.path.basename(located or "")) or _xy(os.path.basename(real or ""))
    venv, cfg = _pyvenv(view, out.executable)
    home = None if ignore_env else env.get("PYTHONHOME")
    if venv is not None:
        out.venv = venv
        base_bin = cfg.get("home") or os.path.dirname(located or real or "")
        out.prefix = home or os.path.dirname(base_bin.rstrip("/"))
        hint = _xy(cfg.get("version") or cfg.get("version_info")) or hint
    else:
        out.prefix = home or os.path.dirname(os.path.dirname(located or real or out.executable))
    out.version = _lib_version(view, venv or out.prefix or "/", hint) or _lib_version(view, out.prefix or "/", hint)
    if out.version is None:
        out.notes.append("Python version of the server's interpreter not found")
        return out

    xy = out.version
    path: list[str] = []
    cwd = "."
    if runs_module and not isolated:
        path.append(cwd)  # -m and -c put the working directory first
    if not ignore_env:
        path += [p if p.startswith("/") else f"{cwd}/{p}" for p in env.get("PYTHONPATH", "").split(":") if p]
    user_site = not ({"s", "I"} & flags) and not (env.get("PYTHONNOUSERSITE") and not ignore_env)
    system = [f"{out.prefix}/lib/python{xy}/site-packages", f"{out.prefix}/local/lib/python{xy}/dist-packages",
              f"{out.prefix}/lib/python3/dist-packages", f"{out.prefix}/lib/python{xy}/dist-packages"]
    if venv is not None:
        path.append(f"{venv}/lib/python{xy}/site-packages")
        if cfg.get("include-system-site-packages", "false").lower() == "true":
            path += system
    else:
        if user_site and env.get("HOME"):
            path.append(f"{env['HOME'].rstrip('/')}/.local/lib/python{xy}/site-packages")
        path += system
    out.path = [p.replace("//", "/") for p in path]
    return out


def of_process(pid: int, argv: list[str], env: dict[str, str] | None) -> tuple[dict[str, str], str, str | None]:
    """(packages, where from, error) of a running process, read from its files with its user's rights."""
    with ProcView(pid) as view:
        if view.error:
            return {}, f"server process {pid}", view.error
        py = server_python(view, argv, env or {})
        where = f"server interpreter {py.executable or '?'} (pid {pid}), read from its files"
        if not py.path:
            return {}, where, "; ".join(py.notes) or "no import path could be derived"

        def listdir(path: str) -> list[str] | None:
            return view.listdir(path)[0]

        def read(path: str) -> str | None:
            return view.read_text(path)[0]

        return scan(py.path, listdir, read), where, None


def collect(ctx: Context) -> Section:
    if not ctx.live:
        return Section(status="skipped", reason="installed packages belong to this interpreter, not the --root tree")
    unreadable: dict[str, str] = {}
    packages = installed(unreadable)
    if not packages:
        sec = Section(status="absent", reason=f"none of the inference stack is installed for {sys.executable}")
    else:
        sec = Section(data=packages)
    sec.unreadable.update(unreadable)
    return sec
