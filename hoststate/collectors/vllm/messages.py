"""hoststate's own messages about a vLLM command line, worded from the redacted command line.

A message such as "--api-key: expected one argument" or "only flat 'key: value' lines" is hoststate's text, not a
user value; passing the finished message through the redactor took its wording for a ``key: value`` secret and
printed "--api-key: <redacted>". So the command line is read twice: once as given, for what it means (the
arguments, the declared mode, vLLM's refusal), and once redacted (hoststate.redact.redact_argv: every secret value
replaced where it is taken in), for what is said about it. The second reading's messages quote only redacted values;
they are marked ``Own`` and no later pass redacts them again. Where the two readings disagree (a redacted value
reads differently), the messages are not shown, and the snapshot says how many there were.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from hoststate.redact import Own, redact_value


class Replay:
    """A ``--config`` loader called by the first reading; the redacted reading gets the same results, redacted,
    without reading the file again."""

    def __init__(self, loader: Callable[[str], Mapping[str, Any]]) -> None:
        self._loader = loader
        self._results: list[Mapping[str, Any] | Exception] = []

    def load(self, path: str) -> Mapping[str, Any]:
        try:
            data = self._loader(path)
        except Exception as err:
            self._results.append(err)
            raise
        self._results.append(data)
        return data

    def again(self, path: str) -> Mapping[str, Any]:
        result = self._results.pop(0) if self._results else ValueError("not read")
        if isinstance(result, Exception):
            raise result  # hoststate's words (configfile.ConfigError, "not read (EACCES)"): no file text
        return redact_value(result)


def own(real: list[str], shown: list[str], what: str = "message") -> list[Own]:
    """The redacted reading's messages, where both readings found as many; else one line saying how many."""
    if len(real) == len(shown):
        return [Own(text) for text in shown]
    return [Own(f"{len(real)} {what}(s) not shown: the command line reads differently once its secrets are "
                "redacted (see vllm.argv)")]


def own_text(real: str | None, shown: str | None, what: str) -> Own | None:
    """One message of the first reading, in the redacted reading's words when both have one."""
    if real is None:
        return None
    return Own(shown) if shown is not None else Own(f"{what} not shown: the command line reads differently once its "
                                                    "secrets are redacted (see vllm.argv)")
