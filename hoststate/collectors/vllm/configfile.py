"""``--config FILE``: the YAML file read as vLLM reads it, and turned into arguments the way each version does.

vLLM (FlexibleArgumentParser._pull_args_from_config / load_config_file) pulls the file only for the exact token
``--config`` (``--config=FILE`` is an ordinary option it stores and never reads), refuses a second ``--config``,
a path not ending in .yaml/.yml and, for ``vllm serve``, a command with no model on the command line or in the
file. It then writes each key as ``--<key>`` tokens, by version (``Rules.config_file_style``):

- "str" (up to 0.12): true -> ``--key``; false -> nothing; a list -> ``--key item ...`` (empty: nothing); anything
  else, a nested mapping included, -> ``--key str(value)`` (a Python repr, which a JSON option then refuses);
- "json" (0.33): as above, but false -> ``--no-<key>`` when the parser that pulls the file has exactly that option
  string (else nothing), and a nested mapping -> ``--key json.dumps(value)``. For ``vllm serve`` that parser is the
  top-level ``vllm`` one, which has none of serve's options, so a false key writes nothing there either (recorded
  on 0.33.0: fixtures/vllm/oracle/classes/0.33.0.json, config-false-keys); the api_server's own parser has them.

The file is untrusted: parsed by PyYAML's safe loader only after a scan bounds its nesting depth and the number
of values its aliases expand to, so neither a deep file nor an alias bomb can exhaust the collector.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping
from typing import Any

import yaml

#: Deepest nesting of mappings and lists read; vLLM's options nest a few levels.
MAX_DEPTH = 32
#: Most values (scalars, mappings, lists) the file may expand to, aliases followed.
MAX_VALUES = 100_000


class ConfigError(ValueError):
    """The file cannot be used: the message is hoststate's own words (never the file's text). ``vllm_refuses``:
    vLLM itself stops on it (not YAML, not a mapping); otherwise only hoststate's bounds were exceeded."""

    def __init__(self, message: str, vllm_refuses: bool = True) -> None:
        super().__init__(message)
        self.vllm_refuses = vllm_refuses


def _scan(text: str) -> None:
    """Nesting depth from the event stream (no recursion, nothing built); a YAML error is reported by position."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=yaml.SafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise ConfigError(f"nested deeper than {MAX_DEPTH} levels: not read", vllm_refuses=False)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        raise ConfigError(f"not valid YAML{where}: {err.problem or 'parse error'}") from None
    except yaml.YAMLError:
        raise ConfigError("not valid YAML") from None


def _count(value: Any) -> int:
    """Values reachable from ``value`` counting every alias again (what writing it out would expand to), stopping
    once past MAX_VALUES."""
    seen, stack = 0, [value]
    while stack:
        item = stack.pop()
        seen += 1
        if seen > MAX_VALUES:
            break
        if isinstance(item, Mapping):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return seen


def parse_config_text(text: str) -> dict[str, Any]:
    """The file's text as the mapping ``yaml.safe_load`` gives vLLM; ConfigError when vLLM could not use it."""
    _scan(text)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        raise ConfigError("not valid YAML") from None
    if not isinstance(data, dict):
        # vLLM calls ``config.items()``: an empty file or a list stops it at startup
        raise ConfigError("not a YAML mapping of option names to values")
    if _count(data) > MAX_VALUES:
        raise ConfigError(f"expands to more than {MAX_VALUES} values (aliases followed): not read", vllm_refuses=False)
    return data


def config_tokens(data: Mapping[str, Any], style: str, option_strings: Collection[str]) -> list[str]:
    """The file's keys as the tokens vLLM inserts (``style`` per the module docstring)."""
    tokens: list[str] = []
    for key, value in data.items():
        flag = f"--{key}"
        if isinstance(value, bool):
            if value:
                tokens.append(flag)
            elif style == "json" and f"--no-{key}" in option_strings:
                tokens.append(f"--no-{key}")
        elif isinstance(value, list):
            if value:
                tokens += [flag, *(str(item) for item in value)]
        elif isinstance(value, dict) and style == "json":
            tokens += [flag, json.dumps(value)]
        else:
            tokens += [flag, str(value)]
    return tokens


def check_path(path: str) -> str | None:
    """vLLM's refusal of a path that does not name a YAML file, else None."""
    extension = path.split(".")[-1]
    if extension not in ("yaml", "yml"):
        return f"--config: Config file must be of a yaml/yml type. {extension} supplied"
    return None
