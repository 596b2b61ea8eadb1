"""The library's exceptions. The CLI maps each class to one exit code (see cli.EXIT_CODES)."""

from __future__ import annotations


class HoststateError(Exception):
    """Base of every error the library raises on purpose; its message is one line for a user."""


class InputError(HoststateError):
    """Raised when a snapshot, policy or other input file cannot be read or is not valid."""

    def __init__(self, message: str, path: str | None = None):
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


class PolicyError(InputError):
    """Raised when a policy file is malformed; the message names the rule."""


class WriteError(HoststateError):
    """Raised when an output file could not be written (or exists and ``--force`` was not given)."""


class GuardRefused(HoststateError):
    """Raised by the guard API when the current host is not comparable with the baseline."""

    def __init__(self, message: str, result: object = None):
        super().__init__(message)
        self.result = result
