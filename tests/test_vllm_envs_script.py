"""scripts/vllm_envs.py reads a wheel's vllm/envs.py into names and the string each reads as when unset, and keeps
a default only where nothing else could tell a set default from an unset variable."""

from __future__ import annotations

import zipfile
from pathlib import Path

from scripts.vllm_envs import read_wheel

ENVS = '''
import os

def env_with_choices(name, default, choices):
    return lambda: os.getenv(name, default)

def is_set(name):
    return name in os.environ

environment_variables = {
    "VLLM_PLAIN": lambda: bool(int(os.getenv("VLLM_PLAIN", "1"))),
    'VLLM_QUOTED': lambda: os.getenv('VLLM_QUOTED', ""),
    "VLLM_SIZE": lambda: int(os.getenv("VLLM_SIZE", str(16 * 1024))),
    "VLLM_CHOSEN": env_with_choices("VLLM_CHOSEN", "naive", ["naive", "deepep"]),
    "VLLM_NONE": lambda: os.environ.get("VLLM_NONE", None),
    "VLLM_FALLBACK": lambda: os.getenv("VLLM_FALLBACK", os.getenv("VLLM_PLAIN_TOO", "x")),
    "VLLM_PLAIN_TOO": lambda: os.getenv("VLLM_PLAIN_TOO", "x"),
    "VLLM_TESTED": lambda: os.getenv("VLLM_TESTED", "0"),
    "VLLM_WRITTEN": lambda: os.getenv("VLLM_WRITTEN", "1"),
    "VLLM_OTHER": lambda: os.getenv("VLLM_SOMETHING_ELSE", "1"),
}

def uses():
    return is_set("VLLM_TESTED")
'''

OTHER = 'import os\nos.environ["VLLM_WRITTEN"] = "0"\n'


def test_a_default_is_kept_only_where_the_entry_alone_reads_the_variable(tmp_path: Path) -> None:
    wheel = tmp_path / "vllm-0.99.1-cp38-abi3-manylinux1_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("vllm/envs.py", ENVS)
        zf.writestr("vllm/executor.py", OTHER)
    version, names = read_wheel(str(wheel))
    assert version == "0.99.1"
    assert names == {
        "VLLM_CHOSEN": "naive", "VLLM_FALLBACK": None, "VLLM_NONE": None, "VLLM_OTHER": None, "VLLM_PLAIN": "1",
        "VLLM_PLAIN_TOO": None,  # also the fallback of another entry
        "VLLM_QUOTED": "", "VLLM_SIZE": "16384",
        "VLLM_TESTED": None,  # is_set elsewhere in envs.py
        "VLLM_WRITTEN": None,  # another file of vLLM names it
    }
