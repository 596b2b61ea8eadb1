"""Unpack the Python sources of each vLLM version hoststate records from its sdist on PyPI, for the scripts that
derive hoststate/data from them (vllm_choices.py, vllm_config_fields.py) and for the tests that check those tables
are what the sources say (.ci/run runs this, so CI checks them too).

    python scripts/vllm_sources.py DEST    # DEST/vllm-<version>/vllm/**.py; versions already there are kept

Each archive is checked against the sha256 PyPI's simple index gives for it; only ``vllm/**.py`` is unpacked,
never a path outside DEST. Nothing of vLLM is imported or run.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
import urllib.request
from pathlib import Path

INDEX = "https://pypi.org/simple/vllm/"
VERSIONS = ("0.10.2", "0.11.0", "0.11.1", "0.12.0", "0.33.0")


def _get(url: str, accept: str = "*/*") -> bytes:
    with urllib.request.urlopen(urllib.request.Request(url, headers={"Accept": accept}), timeout=300) as r:
        return r.read()


def sdists() -> dict[str, tuple[str, str]]:
    """file name -> (URL, sha256) of every vLLM sdist on the index (PEP 691 JSON)."""
    index = json.loads(_get(INDEX, "application/vnd.pypi.simple.v1+json"))
    return {f["filename"]: (f["url"], f["hashes"]["sha256"]) for f in index["files"]
            if f["filename"].endswith(".tar.gz")}


def unpack(data: bytes, version: str, dest: Path) -> int:
    """The ``vllm/**.py`` members of the sdist ``data`` under ``dest/vllm-<version>/``; how many."""
    top = f"vllm-{version}/"
    count = 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        for member in tar.getmembers():
            inner = member.name.removeprefix(top)
            if (member.isfile() and member.name.startswith(top + "vllm/") and inner.endswith(".py")
                    and ".." not in Path(inner).parts):
                out = dest / f"vllm-{version}" / inner
                out.parent.mkdir(parents=True, exist_ok=True)
                out.write_bytes(tar.extractfile(member).read())  # type: ignore[union-attr]
                count += 1
    return count


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        raise SystemExit(__doc__)
    dest = Path(argv[0])
    files = None
    for version in VERSIONS:
        if (dest / f"vllm-{version}" / "vllm").is_dir():
            continue
        files = files if files is not None else sdists()
        url, sha256 = files[f"vllm-{version}.tar.gz"]
        data = _get(url)
        if hashlib.sha256(data).hexdigest() != sha256:
            raise SystemExit(f"vllm-{version}.tar.gz: sha256 differs from the index's")
        print(f"vllm {version}: {unpack(data, version, dest)} files", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
