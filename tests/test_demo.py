"""The dataset mlx-edge ships is what its README says."""

from __future__ import annotations

from mlx_edge.data import read_labeled
from mlx_edge.datasets import todo_split


def test_shipped_dataset_is_what_the_readme_says():
    splits = {name: read_labeled(todo_split(name)) for name in ("train", "dev", "test")}
    assert [len(s) for s in splits.values()] == [3000, 600, 600]
    labels = {"work", "life", "study", "health", "finance", "travel"}
    texts = set()
    for split in splits.values():
        counts = split.counts()
        assert set(counts) == labels
        assert max(counts.values()) <= 1.15 * len(split) / 6 and min(counts.values()) >= 0.85 * len(split) / 6
        assert texts.isdisjoint(split.texts)  # no example in two splits
        texts |= set(split.texts)
    zh = sum(any("\u4e00" <= c <= "\u9fff" for c in t) for t in texts)
    assert 0.3 < zh / len(texts) < 0.7
