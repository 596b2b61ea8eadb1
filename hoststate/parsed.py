"""A shipped data file parsed once per content, not once per process.

The default policy is 90 kB of TOML: tomllib (pure Python) reads it in 11-12 ms on the project's 2-core VM, the same
data as JSON (read in C) in 0.3 ms. Its parsed form (for the shipped policy each rule's checked fields, so that
neither the TOML nor the checks are redone; ``form`` names it) is kept as JSON beside the package's bytecode, where
Python keeps its own ``.pyc`` files (``__pycache__``, or under ``sys.pycache_prefix``), named by the hash of the text
it came from that Python's hash-based ``.pyc`` files carry (``importlib.util.source_hash``: no hashlib, whose OpenSSL
costs a snap 4-5 ms to load): an edited file has another name, so a stale copy is never read; the copy holds that
hash too, so a copy renamed from another text's is not read either. The hash only tells texts apart; what keeps
out a forged copy is who may write it (below). Whoever can write that directory can already replace the
package's bytecode; a copy is still read only when it is a regular file of this user (or root) that no one else may
write. Nothing is written when bytecode is not (``PYTHONDONTWRITEBYTECODE``); any failure to read or write the copy
just means parsing the text.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import stat
import sys
from collections.abc import Callable
from typing import Any

#: Largest parsed copy read back (the default policy's is about 70 kB).
MAX_BYTES = 4 << 20


def _hash(text: str) -> str:
    return importlib.util.source_hash(text.encode("utf-8")).hex()


def cache_path(source: str, text: str, form: str = "") -> str:
    """Where the parsed copy of ``text``, read from the file ``source``, is kept; ``form`` names what the parse
    makes of it (a copy of one form is never read as another)."""
    return _path(source, form, _hash(text))


def _path(source: str, form: str, hashed: str) -> str:
    folder = os.path.dirname(importlib.util.cache_from_source(os.path.abspath(source)))
    name = os.path.basename(source).rsplit(".", 1)[0] + (f".{form}" if form else "")
    return os.path.join(folder, f"{name}.{hashed}.json")


def _read(path: str) -> Any:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid not in (0, os.geteuid()) or st.st_mode & 0o022 \
                or st.st_size > MAX_BYTES:
            return None
        with os.fdopen(os.dup(fd), "rb") as fh:
            return json.loads(fh.read(MAX_BYTES + 1))
    except (OSError, ValueError):
        return None
    finally:
        os.close(fd)


def _write(path: str, hashed: str, doc: dict[str, Any]) -> None:
    try:
        blob = json.dumps({"hash": hashed, "doc": doc}, ensure_ascii=False).encode("utf-8")
    except (TypeError, ValueError):
        return  # a value JSON cannot hold (a date): this file is parsed each time
    # a name no other process picks: a PID alone repeats across PID namespaces (containers, test workers) that
    # share the package's directory, and a name already taken must not be unlinked below as if it were ours
    tmp = f"{path}.{os.getpid()}.{os.urandom(6).hex()}.tmp"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, path)
    except OSError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def parse_once(source: str, text: str, parse: Callable[[str], dict[str, Any]], form: str = "") -> dict[str, Any]:
    """``parse(text)``, or its copy kept from an earlier process; the copy is written the first time. ``form``
    names what ``parse`` makes of the text, so that another parse of the same file keeps its own copy."""
    hashed = _hash(text)
    path = _path(source, form, hashed)
    kept = _read(path)
    if isinstance(kept, dict) and kept.get("hash") == hashed and isinstance(kept.get("doc"), dict):
        return kept["doc"]
    doc = parse(text)
    if not sys.dont_write_bytecode:
        _write(path, hashed, doc)
    return doc
