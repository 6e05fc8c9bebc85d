#!/usr/bin/env python3
"""Write examples/pipeline.toml: what `mlx-edge init` writes for the shipped to-do data.

tests/test_init.py fails when the file differs from this text (a setting added, a default changed, a
comment edited in mlx_edge/config_file.py). Regenerate from the repository root:

    .venv/bin/python scripts/write_example_config.py
"""

from __future__ import annotations

from pathlib import Path

from mlx_edge.config_file import write_config
from mlx_edge.fileio import atomic_write_text

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "pipeline.toml"
DATA = ROOT / "mlx_edge" / "datasets" / "todo"


def example_text() -> str:
    """The config `mlx-edge init examples/pipeline.toml --train ... --dev ... --test ...` writes."""
    return write_config(
        train=DATA / "train.jsonl", dev=DATA / "dev.jsonl", test=DATA / "test.jsonl", config_path=EXAMPLE
    )


if __name__ == "__main__":
    atomic_write_text(EXAMPLE, example_text())
    print(f"wrote {EXAMPLE.relative_to(ROOT)}")
