"""Accept a host state as the new baseline, recording why: ``hoststate rebaseline BASELINE CURRENT -o NEW``.

A baseline is replaced only knowingly: every invalidating finding between the old baseline and CURRENT must match
an ``accept`` pattern (as for ``guard --accept``), or nothing is written. The new baseline is CURRENT's host state
(a guard file's ``[guard]`` table left out) with a ``[hoststate.rebaseline]`` table saying which baseline it
replaces (path, digest, sha256 of its bytes), which file it was made from, which findings were accepted and by
which pattern, by whom and when. ``hoststate.**`` is bookkeeping: the table never changes the digest or a diff.
The file is written atomically and never over an existing file without ``force``, nor over either input.
"""

from __future__ import annotations

import datetime as dt
import os
from collections.abc import Iterable, Sequence
from typing import Any

from hoststate.errors import GuardRefused
from hoststate.run.guard import GUARD_TABLE, Acceptance, GuardResult, evaluate, read_baseline
from hoststate.run.record import _finding_record

#: The provenance table's key under [hoststate].
TABLE = "rebaseline"


def who() -> str:
    """The person accepting: the sudo caller when run through sudo, else the login name of this uid."""
    import pwd

    sudo = os.environ.get("SUDO_USER")
    if sudo:
        return sudo
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return f"uid {os.getuid()}"


def provenance(result: GuardResult, current: str, current_sha256: str, *, by: str,
               at: dt.datetime) -> dict[str, Any]:
    """The ``[hoststate.rebaseline]`` table: what it replaces, made from what, which findings were accepted, by
    whom, when."""
    matcher = Acceptance(result.accept)
    return {
        "replaces": os.path.abspath(result.baseline),
        "replaces_digest": result.baseline_digest,
        "replaces_sha256": result.baseline_sha256,
        "from": os.path.abspath(current),
        "from_sha256": current_sha256,
        "by": by,
        "at": at,
        "accept": list(result.accept),
        "counts": {k: int(v) for k, v in result.diff.counts.items()},
        "accepted": [_finding_record(f, matcher.match(f.path)) for f in result.accepted],
    }


def rebaseline(baseline: str, current: str, *, accept: Iterable[str] = (), policy_files: Sequence[str] = (),
               by: str | None = None, at: dt.datetime | None = None) -> tuple[dict[str, Any], GuardResult]:
    """The new baseline snapshot (CURRENT with provenance) and the comparison it rests on.

    :raises GuardRefused: an invalidating finding matched no ``accept`` pattern (``.result`` is the GuardResult);
        nothing may be written.
    :raises InputError: a bad baseline, current snapshot, policy or pattern.
    """
    snap, sha = read_baseline(current)  # the same checks as a baseline: a regular file, a valid snapshot
    host = {k: v for k, v in snap.items() if k != GUARD_TABLE}
    result = evaluate(baseline, current=host, accept=Acceptance(accept), policy_files=policy_files)
    if result.refused:
        raise GuardRefused(f"{len(result.refused)} invalidating finding(s) not accepted; nothing written", result)
    when = at or dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    new = dict(host)
    new["hoststate"] = {**host["hoststate"], TABLE: provenance(result, current, sha, by=by or who(), at=when)}
    return new, result
