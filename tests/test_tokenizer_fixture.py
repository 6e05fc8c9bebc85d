"""The Swift tokenizer's parity fixture agrees with the Python side as installed here.

If transformers/tokenizers move, this fails first: regenerate with
`.venv/bin/python scripts/make_tokenizer_fixture.py` and let the Swift tests judge the new ids.
"""

from __future__ import annotations

import json
import shutil
from importlib import metadata
from pathlib import Path

import pytest

from mlx_edge.models.tokenizer import load_tokenizer

FIXTURES = Path(__file__).resolve().parents[1] / "swift" / "Tests" / "MLXEdgeKitTests" / "Fixtures"
FIXTURE = json.loads((FIXTURES / "tokenizer_fixture.json").read_text(encoding="utf-8"))


def test_fixture_versions_match_the_installed_tokenizer():
    meta = FIXTURE["meta"]
    assert meta["transformers_version"] == metadata.version("transformers")
    assert meta["tokenizers_version"] == metadata.version("tokenizers")


@pytest.mark.parametrize("config", FIXTURE["configs"], ids=lambda c: c["name"])
def test_mlx_edge_tokenizer_reproduces_the_fixture(tmp_path, config):
    """The ids the Swift side must match are also what mlx-edge itself feeds the model."""
    shutil.copyfile(FIXTURES / config["vocab_file"], tmp_path / "vocab.txt")
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "do_lower_case": config["do_lower_case"],
                "strip_accents": config["strip_accents"],
                "tokenize_chinese_chars": config["tokenize_chinese_chars"],
            }
        )
    )
    tokenizer = load_tokenizer(tmp_path)
    max_length = FIXTURE["max_length"]
    texts = [case["text"] for case in config["cases"]]
    ours = tokenizer.encode_batch(texts, max_length=max_length)
    for case, ids in zip(config["cases"], ours):
        expected = [i for i, m in zip(case["input_ids"], case["attention_mask"]) if m]
        assert ids == expected, f"{case['text']!r}"
