"""scripts/vllm_sources.py unpacks only an sdist's ``vllm/**.py`` and never a path outside its folder."""

from __future__ import annotations

import io
import pathlib
import tarfile

from tests.conftest import data_script


def _sdist(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_only_the_packages_python_files_are_unpacked(tmp_path: pathlib.Path) -> None:
    script = data_script("vllm_sources")
    data = _sdist({"vllm-9.9/vllm/config/utils.py": b"x = 1\n", "vllm-9.9/vllm/csrc/kernel.cu": b"//",
                   "vllm-9.9/setup.py": b"", "vllm-9.9/vllm/../../escape.py": b"", "other/vllm/a.py": b""})
    assert script.unpack(data, "9.9", tmp_path) == 1
    assert [p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()] == [
        "vllm-9.9/vllm/config/utils.py"]
