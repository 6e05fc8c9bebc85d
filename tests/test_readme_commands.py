"""Every `mlx-edge ...` command line in the README names a command and options that exist."""

from __future__ import annotations

import re
from pathlib import Path

import click

from mlx_edge.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_command_lines() -> list[tuple[click.Command, str, str]]:
    """(command, the flags part, the line) for each README line that runs an mlx-edge command."""
    text = README.read_text(encoding="utf-8").replace("\\\n", " ")  # join continued shell lines
    found = []
    for line in text.splitlines():
        match = re.search(r"mlx-edge\s+([a-z]+)(?:\s+([a-z]+))?([^`#]*)", line)
        if not match or match.group(1) not in main.commands:
            continue
        command, rest = main.commands[match.group(1)], match.group(3) or ""
        subcommands = getattr(command, "commands", {})  # a click.Group's, or `augment adapt`
        if match.group(2) in subcommands:
            command = subcommands[match.group(2)]
        elif isinstance(command, click.Group):
            continue
        elif match.group(2):
            rest = f" {match.group(2)}{rest}"
        found.append((command, rest, line.strip()))
    return found


def test_every_flag_in_the_readme_exists():
    lines = readme_command_lines()
    assert len(lines) >= 20  # the README shows every stage
    unknown = []
    for command, rest, line in lines:
        options = {o for p in command.params for o in [*getattr(p, "opts", []), *getattr(p, "secondary_opts", [])]}
        unknown += [(flag, line) for flag in re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", rest) if flag not in options]
    assert unknown == []
