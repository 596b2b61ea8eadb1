"""The digest: sha256 over every value the default policy rates invalidating (the verdict side).

Two snapshots with equal digests have no invalidating difference under the default policy. It is computed from a
snapshot's content, never trusted from its ``hoststate.digest``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from hoststate.paths import leaves
from hoststate.policy import default_policy
from hoststate.positions import canonical
from hoststate.snapshot import BOOKKEEPING, jsonable

# CPython's own SHA-256, as the standard library's random module takes its sha512: hashlib loads OpenSSL's libcrypto
# and makes every algorithm's constructor when imported (4-5 ms a snap on the project's VM), for a digest of a few kB.
try:
    from _sha2 import sha256  # CPython 3.12 and later
except ImportError:
    try:
        from _sha256 import sha256  # CPython 3.10 and 3.11
    except ImportError:  # an interpreter built without them: the same digest from OpenSSL
        from hashlib import sha256


def rate_ahead(name: str, table: Mapping[str, Any]) -> None:
    """Rate the leaves of one collected table under the default policy, filling the cache the digest reads: run
    on each section as its collector finishes, while a slower one (NVML) still waits. The digest itself still
    rates every leaf of the snapshot as written; this only makes its answers ready."""
    policy = default_policy()
    for path, _value in leaves(table, (name,)):
        policy.severity(path)


def digest(snap: Mapping[str, Any]) -> str:
    """sha256 over the sorted (path, value) pairs the default policy rates invalidating.

    The [hoststate], [collectors] and [guard] tables are bookkeeping and never part of the digest. GPUs are keyed
    by position (hoststate.positions), so nodes that differ only in GPU UUIDs and serials have equal digests.
    """
    policy = default_policy()
    snap = canonical(snap)
    pairs = [
        [list(path), jsonable(value)]
        for path, value in leaves({k: v for k, v in snap.items() if k not in BOOKKEEPING})
        if policy.severity(path) == "invalidating"
    ]
    blob = json.dumps(pairs, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return "sha256:" + sha256(blob.encode("utf-8")).hexdigest()
