"""What every subcommand shares."""

from __future__ import annotations


class CliError(Exception):
    """A user mistake or an unusable environment: reported as one line, exit ``status``."""

    def __init__(self, message: str, *, status: int = 2) -> None:
        super().__init__(message)
        self.status = status
