"""`mlx-edge init`: write a complete, commented `mlx-edge run` config for your files. Imports only click
at module level."""

from __future__ import annotations

import shlex
from pathlib import Path

import click

from mlx_edge.config_file import write_config
from mlx_edge.fileio import atomic_write_text

DATA_FILE = click.Path(exists=True, dir_okay=False, path_type=Path)


@click.command()
@click.argument("config_path", metavar="CONFIG.toml", type=click.Path(dir_okay=False, path_type=Path))
@click.option("--train", required=True, type=DATA_FILE, help="Labeled training file (CSV, TSV or JSONL).")
@click.option("--dev", type=DATA_FILE, default=None, help="Labeled dev file; else the run splits one off --train.")
@click.option("--test", type=DATA_FILE, default=None, help="Labeled test file, scored in the final report.")
@click.option("--force", is_flag=True, help="Replace CONFIG.toml if it exists.")
def init(config_path, train, dev, test, force):
    """Write a config for `mlx-edge run`: every setting with its default, each with a comment.

    The paths in it are relative to the config's folder, so it runs from any directory. The teacher
    is the built-in multilingual-e5-small (offline); edit the file to change any setting.

    \b
    Examples:
      mlx-edge init my.toml --train train.csv
      mlx-edge init my.toml --train train.csv --dev dev.csv --test test.csv
      mlx-edge run my.toml
    """
    if config_path.exists() and not force:
        raise click.ClickException(f"{config_path} exists: pass --force to replace it")
    atomic_write_text(config_path, write_config(train=train, dev=dev, test=test, config_path=config_path))
    click.echo(f"Wrote {config_path}: every setting with its default. Next:")
    click.echo(f"  mlx-edge run {shlex.quote(str(config_path))}")
