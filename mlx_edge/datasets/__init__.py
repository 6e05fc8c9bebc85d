"""Datasets shipped with mlx-edge."""

from pathlib import Path

TODO_DIR = Path(__file__).with_name("todo")
# broad English text for transfer sets: WordNet 3.0's example sentences, in a seeded shuffle (wordnet/README.md)
WORDNET_EXAMPLES = Path(__file__).with_name("wordnet") / "examples.txt"
WORDNET_SENTENCES = 34_761  # its lines
TODO_SPLITS = ("train", "dev", "test")


def todo_split(name: str) -> Path:  # "train" | "dev" | "test"
    """Return the path of one split of the bundled to-do classification set."""
    if name not in TODO_SPLITS:
        raise ValueError(f"unknown todo split {name!r}; expected one of {', '.join(TODO_SPLITS)}")
    return TODO_DIR / f"{name}.jsonl"


def broad_english(count: int) -> list[str]:
    """The first `count` of WordNet 3.0's 34,761 example sentences (a seeded shuffle, so any first N are a
    fair sample): broad English text that a transfer set adds to what a few labeled rows show."""
    if not 0 <= count <= WORDNET_SENTENCES:
        raise ValueError(f"broad_english takes 0 to {WORDNET_SENTENCES} sentences, not {count}")
    return WORDNET_EXAMPLES.read_text(encoding="utf-8").splitlines()[:count]
