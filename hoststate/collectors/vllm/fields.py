"""The input fields of the config classes vLLM builds from dict-valued options, per version, and what it does with a
key that is none of them.

``--compilation-config`` is validated into CompilationConfig when parsed (vllm/engine/arg_utils.py
parse_dataclass), ``--speculative-config`` into SpeculativeConfig when the engine's config is built
(EngineArgs.create_speculative_config: ``SpeculativeConfig(**value)``). Both are pydantic dataclasses: up to 0.12.0
with pydantic's default ``extra="ignore"`` (a key that is no field is dropped: the server without it), in 0.33.0
through ``vllm.config.utils.config`` with ``extra="forbid"`` (refused). The fields are read from each version's
source by scripts/vllm_config_fields.py into hoststate/data/vllm_config_fields.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from hoststate.collectors.vllm_release import load_data, recorded_for

DATA = "vllm_config_fields.json"


def config_fields_for(version: str | None, dest: str) -> dict[str, Any] | None:
    """Exactly ``version``'s table for the option ``dest``: ``fields`` (the class's input fields), ``nested`` (the
    fields of the config classes it nests, by field name) and ``extra`` ("ignore" or "forbid"); None for a version
    or an option not recorded."""
    found = recorded_for(load_data(DATA)["versions"], version)
    return None if found is None else found[1].get(dest)


def unknown_keys(value: Mapping[str, Any], version: str | None, dest: str) -> tuple[str, ...]:
    """The keys of ``value`` (dotted below a nested config such as pass_config) that are no input field of
    ``version``'s class for ``dest``; empty where the version or the option is not recorded."""
    table = config_fields_for(version, dest)
    if table is None:
        return ()
    fields, nested = set(table["fields"]), table["nested"]
    keys = [key for key in value if key not in fields]
    for head, known in nested.items():
        if isinstance(value.get(head), Mapping):
            keys += [f"{head}.{key}" for key in value[head] if key not in known]
    return tuple(keys)


def forbids(version: str | None, dest: str) -> bool:
    """Whether ``version`` refuses a key that is no field of ``dest``'s class (else it ignores it)."""
    table = config_fields_for(version, dest)
    return table is not None and table["extra"] == "forbid"
