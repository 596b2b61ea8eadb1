"""Records written out: what ``@dataclass`` generates for a record, without what defining one costs at import.

CPython compiles each method a dataclass generates with ``exec``: 0.4-1 ms a class on the project's VM, and a
guard defined seven on the path every guarded run waits for (docs/performance.md). A record here has its
``__init__`` written out (typed, its fields in order, a dict or list made per instance) and takes equality and
repr, and for a frozen one immutability and hashing, from these bases. tests/test_perf_shortcuts.py holds every
subclass to the dataclass it stands for. This module imports nothing: the child collecting the GPUs ahead
(hoststate.ahead) uses it before anything else is loaded.
"""

from __future__ import annotations

from typing import Any


class Record:
    """A mutable record, as an unfrozen ``@dataclass``: equal to a record of its own class with equal fields,
    shown by its fields, not hashable."""

    __hash__ = None  # type: ignore[assignment] - mutable, as an unfrozen dataclass

    def __eq__(self, other: object) -> bool:
        return vars(self) == vars(other) if other.__class__ is self.__class__ else NotImplemented

    def __repr__(self) -> str:
        return f"{type(self).__qualname__}({', '.join(f'{k}={v!r}' for k, v in vars(self).items())})"


class Frozen(Record):
    """An immutable record, as ``@dataclass(frozen=True)``: its ``__init__`` sets the fields through
    ``self.__dict__``; assigning or deleting one later raises ``dataclasses.FrozenInstanceError``; hashed by its
    fields."""

    def __setattr__(self, name: str, value: Any) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        from dataclasses import FrozenInstanceError

        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def __hash__(self) -> int:  # type: ignore[override] - immutable: hashed as a frozen dataclass is
        return hash(tuple(vars(self).values()))


def replace(record: Frozen, **changes: Any) -> Any:
    """A copy of ``record`` with ``changes``, as ``dataclasses.replace`` makes one (through ``__init__``)."""
    return type(record)(**{**vars(record), **changes})
