"""The errors stagegate reports to its user; each carries its exit code and says what to do."""

from __future__ import annotations


class StagegateError(Exception):
    """Base class: ``exit_code`` is what the command line returns."""

    exit_code = 2


class InputError(StagegateError):
    """A file stagegate must read is missing, unreadable or malformed."""


class MissingFileError(InputError):
    """A file a stage should have written is not there."""


class ConfigError(StagegateError):
    """A ``[tool.stagegate]`` value is invalid; the message names the key."""


class UsageError(StagegateError):
    """The command line asks for something that cannot be done."""


class InternalError(StagegateError):
    """stagegate itself failed: never a verdict."""

    exit_code = 3
