"""The README's main job, on a small sample: real MiniLM weights, the shipped dataset, the CLI."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from mlx_edge.cli import main
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


@pytest.mark.pretrained
def test_demo_end_to_end_on_a_sample(tmp_path, minilm_dir):
    result = CliRunner().invoke(main, ["demo", "--out", str(tmp_path), "--limit", "240", "--quiet"])
    assert result.exit_code == 0, result.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["encoder"]["parameters"] > 20e6 and report["blas"] in ("OpenBLAS", "Accelerate")
    for split in ("dev", "test"):
        r = report["results"][split]
        assert r["accuracy"] > r["majority_baseline"] + 0.2, r
    assert "test" in result.output and "linear probe accuracy" in result.output
