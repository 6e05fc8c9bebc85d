"""Assertions on what the CLI shows a user."""

from __future__ import annotations


def assert_one_line_error(result, *fragments):
    """A clean non-zero exit with exactly one "Error:" line holding every fragment; returns that line."""
    assert result.exit_code != 0, result.output
    assert isinstance(result.exception, SystemExit), f"raised {result.exception!r} instead of a clean exit"
    assert "Traceback" not in result.output
    error_lines = [line for line in result.output.splitlines() if line.startswith("Error:")]
    assert len(error_lines) == 1, result.output
    for fragment in fragments:
        assert fragment in error_lines[0], error_lines[0]
    return error_lines[0]
