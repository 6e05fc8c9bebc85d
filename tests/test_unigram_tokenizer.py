"""SentencePiece Unigram tokenizers (the XLM-R pipeline multilingual-e5 uses) work wherever a tokenizer
is used: loading, special ids, the same ids as transformers, and an export whose check passes."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from transformers import AutoTokenizer

from mlx_edge.cli import main
from mlx_edge.errors import ModelError
from mlx_edge.models.tokenizer import load_tokenizer
from tests.helpers.cli import assert_one_line_error
from tests.helpers.tiny import CORPUS, build_tiny_unigram_bert, build_unigram

TEXTS = CORPUS + [
    "",
    "   spaces   between  ",
    "ＦＵＬＬ－ＷＩＤＴＨ １２３",
    "emoji 🙂 and 👩‍💻",
    "cafe\u0301 naïve",
    "x" * 300,
]


@pytest.fixture(scope="module")
def unigram_dir(tmp_path_factory):
    return build_unigram(tmp_path_factory.mktemp("unigram"))


def test_unigram_ids_and_specials_equal_transformers(unigram_dir):
    ours = load_tokenizer(unigram_dir)
    reference = AutoTokenizer.from_pretrained(unigram_dir)
    assert ours.settings.kind == "unigram"
    assert (ours.cls_id, ours.pad_id, ours.sep_id, ours.unk_id) == (0, 1, 2, 3)
    expected = reference(TEXTS, truncation=True, max_length=32)["input_ids"]
    assert ours.encode_batch(TEXTS, max_length=32) == expected
    assert all(row[0] == 0 and row[-1] == 2 for row in expected)


def test_a_unigram_vocabulary_without_unk_is_refused(unigram_dir, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    for f in unigram_dir.iterdir():
        (broken / f.name).write_bytes(f.read_bytes())
    data = json.loads((broken / "tokenizer.json").read_text())
    data["model"]["vocab"][3][0] = "<nope>"  # the piece unk_id points at is no longer <unk>
    (broken / "tokenizer.json").write_text(json.dumps(data))
    with pytest.raises(ModelError, match="unk"):
        load_tokenizer(broken)


def test_a_malformed_unigram_tokenizer_is_one_line(unigram_dir, tmp_path):
    broken = tmp_path / "malformed"
    broken.mkdir()
    (broken / "tokenizer.json").write_text('{"model": {"type": "Unigram", "vocab": 5}')  # cut short
    data = tmp_path / "d.tsv"
    data.write_text("Pay the bill\tfinance\nRun in the park\thealth\n" * 3)
    result = CliRunner().invoke(main, ["data", str(data), "--dev", str(data), "--tokenizer", str(broken)])
    assert_one_line_error(result, "tokenizer.json")


@pytest.mark.slow
def test_a_unigram_student_exports_and_passes_check(tmp_path):
    student = build_tiny_unigram_bert(tmp_path / "student", seed=3, initializer_range=0.2)
    out = tmp_path / "bundle"
    args = ["export", str(student), "--out", str(out), "--seq-len", "32", "--texts", "8", "--quiet"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["tokenizer"]["type"] == "unigram"
    assert (manifest["tokenizer"]["pad_id"], manifest["tokenizer"]["unk_token"]) == (1, "<unk>")
    assert manifest["tokenizer"]["vocab_file"] is None and "tokenizer.json" in manifest["tokenizer"]["files"]
    check = CliRunner().invoke(main, ["check", str(out), "--json"])
    assert check.exit_code == 0, check.output
    assert json.loads(check.output)["ok"] is True


@pytest.mark.parametrize("missing", ["<s>", "<pad>"])
def test_a_unigram_vocabulary_without_its_special_tokens_is_one_line(unigram_dir, tmp_path, missing):
    broken = tmp_path / "nospecial"
    broken.mkdir()
    data = json.loads((unigram_dir / "tokenizer.json").read_text())
    data["model"]["vocab"] = [[p if p != missing else "xx-gone", s] for p, s in data["model"]["vocab"]]
    data["added_tokens"] = [t for t in data["added_tokens"] if t["content"] != missing]
    data["post_processor"] = None
    (broken / "tokenizer.json").write_text(json.dumps(data))
    (broken / "tokenizer_config.json").write_text((unigram_dir / "tokenizer_config.json").read_text())
    rows = tmp_path / "d.tsv"
    rows.write_text("Pay the bill\tfinance\nRun in the park\thealth\n" * 3)
    result = CliRunner().invoke(main, ["data", str(rows), "--dev", str(rows), "--tokenizer", str(broken)])
    assert_one_line_error(result, missing, "special tokens are missing")
