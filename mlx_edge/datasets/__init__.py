"""Datasets shipped with mlx-edge."""

from pathlib import Path

TODO_DIR = Path(__file__).with_name("todo")
TODO_SPLITS = ("train", "dev", "test")


def todo_split(name: str) -> Path:  # "train" | "dev" | "test"
    """Return the path of one split of the bundled to-do classification set."""
    if name not in TODO_SPLITS:
        raise ValueError(f"unknown todo split {name!r}; expected one of {', '.join(TODO_SPLITS)}")
    return TODO_DIR / f"{name}.jsonl"
