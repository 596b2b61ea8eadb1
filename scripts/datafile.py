"""What the scripts that derive hoststate/data/*.json share: write the table, or check the shipped one is it."""

from __future__ import annotations

from pathlib import Path


def source_dir(argv: list[str], default: str = "/tmp/vllm-src") -> Path:
    """The folder holding the unpacked vLLM sources (``--src DIR``): vllm-<version>/ each, as
    scripts/vllm_sources.py unpacks them."""
    return Path(argv[argv.index("--src") + 1]) if "--src" in argv else Path(default)


def write_or_check(out: Path, text: str, argv: list[str]) -> int:
    """Write ``text`` to ``out``; with ``--check`` write nothing and return 0 only where ``out`` already is it."""
    if "--check" in argv:
        return 0 if out.exists() and out.read_text(encoding="utf-8") == text else 1
    out.write_text(text, encoding="utf-8")
    return 0
