"""The one error hierarchy of mlx-edge.

Library code raises these with a message that says what is wrong and what to do; only the CLI
turns them into a single line on stderr and a non-zero exit code.
"""

from __future__ import annotations


class MlxEdgeError(Exception):
    """Base class: a problem the user can fix. `hint` says how."""

    exit_code = 1

    def __init__(self, message: str, hint: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class DataError(MlxEdgeError):
    """A labeled-data file that cannot be used as it is."""

    exit_code = 2


class ModelError(MlxEdgeError):
    """A model directory or config that is missing, broken or not BERT-like."""

    exit_code = 3


class DeviceError(MlxEdgeError):
    """A requested device that is not available here."""

    exit_code = 4


class EnvironmentProblem(MlxEdgeError):
    """A missing or incompatible package or system library."""

    exit_code = 5
