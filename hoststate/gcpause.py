"""The cyclic garbage collector paused while a large tree is built, compared or written.

A snapshot pair at the 8 MiB input cap is about 800,000 tables, keys and values, and its diff as many findings
again. None of them forms a reference cycle, so reference counting frees them; but each full pass of the cyclic
collector, triggered by allocations, walks every one of them, and passes come more often as the heap grows: 1.2 of
4.2 seconds of a diff at the cap on the 2-core VM (docs/performance.md). Paused, not disabled: it is enabled again
when the work ends (left alone where the caller had it off), so a long guarded run collects as usual.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """Pause the cyclic collector for a block (or, as a decorator, a call)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
