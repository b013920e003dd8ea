"""User-facing errors of the assistant package.

A `UserError` carries one clear line: what went wrong and with which file or setting.
The CLI prints it as ``error: <message>`` and exits non-zero, without a traceback
unless ``--debug`` is given.
"""

from __future__ import annotations

__all__ = ["UserError", "ConfigError", "ModelNotFoundError"]


class UserError(Exception):
    """An error caused by input or environment the user controls."""


class ConfigError(UserError):
    """Invalid configuration: names the key and the file it came from."""


class ModelNotFoundError(UserError):
    """A model could not be located; the message says how to install it."""
