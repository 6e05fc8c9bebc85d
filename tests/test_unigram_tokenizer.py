"""SentencePiece Unigram tokenizers (the XLM-R pipeline multilingual-e5 uses) work wherever a tokenizer
is used: loading, special ids, the same ids as transformers, and an export whose check passes, with
the spec MLXEdgeKit tokenizes from (a tampered spec fails check; a tokenizer Swift cannot follow is
refused at export)."""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner
from transformers import AutoTokenizer

from mlx_edge.check import check_bundle
from mlx_edge.cli import main
from mlx_edge.errors import ModelError
from mlx_edge.fileio import sha256_file
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


def _export_unigram(tmp, *extra: str):
    student = build_tiny_unigram_bert(tmp / "student", seed=3, initializer_range=0.2)
    out = tmp / "bundle"
    args = ["export", str(student), "--out", str(out), "--seq-len", "32", "--n-texts", "8", "--quiet", *extra]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def unigram_bundle(tmp_path_factory):
    """The default bundle: the spec is the one tokenizer file (no tokenizer.json)."""
    return _export_unigram(tmp_path_factory.mktemp("unigram-export"))


@pytest.fixture(scope="module")
def unigram_bundle_with_json(tmp_path_factory):
    """--extras tokenizer-json: the student's tokenizer.json beside the spec, which check compares."""
    return _export_unigram(tmp_path_factory.mktemp("unigram-export-json"), "--extras", "tokenizer-json")


@pytest.mark.slow
def test_a_unigram_student_exports_and_passes_check(unigram_bundle):
    manifest = json.loads((unigram_bundle / "manifest.json").read_text())
    tokenizer = manifest["tokenizer"]
    assert tokenizer["type"] == "unigram"
    assert (tokenizer["pad_id"], tokenizer["unk_token"]) == (1, "<unk>")
    assert tokenizer["vocab_file"] is None and tokenizer["files"] == ["tokenizer_config.json", "unigram_spec.json"]
    assert tokenizer["spec_file"] == "unigram_spec.json" and "unigram_spec.json" in manifest["files"]
    assert not (unigram_bundle / "tokenizer.json").exists()  # the app reads the spec: one tokenizer file
    spec = json.loads((unigram_bundle / "unigram_spec.json").read_text(encoding="utf-8"))
    assert len(spec["pieces"]) == tokenizer["vocab_size"] and spec["pad_id"] == 1
    assert next(r for r in manifest["checks"]["results"] if r["name"] == "tokenizer.spec")["ok"]
    check = CliRunner().invoke(main, ["check", str(unigram_bundle), "--json"])
    assert check.exit_code == 0, check.output
    report = json.loads(check.output)
    assert report["ok"] is True
    spec_result = next(r for r in report["results"] if r["name"] == "tokenizer.spec")
    assert spec_result["ok"] and "rebuilds into the tokenizer it describes" in spec_result["detail"]


@pytest.mark.slow
def test_the_bundle_tokenizes_from_its_spec_as_the_student_does(unigram_bundle):
    """Python reads the bundle's tokenizer from the spec alone (as the app does): the same ids as the
    student's own tokenizer.json on mixed text, probes of normalization included."""
    from mlx_edge.bundle.tokenizer_spec import PROBES

    texts = ["Pay the electricity bill", "ｱｲｳ ＡＢＣ ﬁne", "  two  spaces ", "<s> raw </s>", *PROBES]
    student = unigram_bundle.parent / "student"
    ours = load_tokenizer(unigram_bundle).encode_batch(texts, max_length=64)
    assert ours == load_tokenizer(student).encode_batch(texts, max_length=64)
    assert any(len(ids) > 2 for ids in ours)


@pytest.mark.slow
def test_with_extras_the_tokenizer_json_rides_along_and_is_compared(unigram_bundle_with_json):
    manifest = json.loads((unigram_bundle_with_json / "manifest.json").read_text())
    assert (
        "tokenizer.json" in manifest["tokenizer"]["files"] and (unigram_bundle_with_json / "tokenizer.json").is_file()
    )
    result = next(r for r in check_bundle(unigram_bundle_with_json, n_texts=2).results if r.name == "tokenizer.spec")
    assert result.ok and "is tokenizer.json's spec" in result.detail


def _tampered(bundle, dest, change, *, reseal: bool = True):
    """A copy of `bundle` whose spec `change` edits; `reseal` updates its sha256 in the manifest, so
    that only the spec check can notice."""
    shutil.copytree(bundle, dest)
    path = dest / "unigram_spec.json"
    spec = json.loads(path.read_text(encoding="utf-8"))
    change(spec)
    path.write_text(json.dumps(spec, ensure_ascii=False), encoding="utf-8")
    if reseal:
        manifest = json.loads((dest / "manifest.json").read_text())
        manifest["files"]["unigram_spec.json"] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
        (dest / "manifest.json").write_text(json.dumps(manifest))
    return dest


def _swap_pieces(spec):
    spec["pieces"][10], spec["pieces"][11] = spec["pieces"][11], spec["pieces"][10]


def _spec_result(bundle):
    report = check_bundle(bundle, n_texts=2)
    return report, next(r for r in report.results if r.name == "tokenizer.spec")


@pytest.mark.slow
@pytest.mark.parametrize(
    "change, message",
    [
        (_swap_pieces, "pieces[10] is"),
        (lambda spec: spec.update(scores=[s + 0.5 for s in spec["scores"]]), "scores[0] is 0.5"),
        (lambda spec: spec.update(pad_id=2), "pad_id is 2, tokenizer.json gives 1"),
        (lambda spec: spec["normalizer"].pop(0), "normalizer[0] is"),
    ],
    ids=["pieces", "scores", "pad id", "charsmap"],
)
def test_a_tampered_unigram_spec_fails_check(unigram_bundle_with_json, tmp_path, change, message):
    report, result = _spec_result(_tampered(unigram_bundle_with_json, tmp_path / "b", change))
    assert not report.ok and not result.ok and message in result.detail, result.detail
    # resealed: only the spec check and the sha256 the models recorded at export (bundle/trust.py) can tell
    assert [r.name for r in report.failed] == ["tokenizer.spec", "tokenizer.vocabulary"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "change, failed",
    [
        (_swap_pieces, ["tokenizer.vocabulary"]),
        (lambda spec: spec["normalizer"].pop(0), ["tokenizer.vocabulary"]),
        (lambda spec: spec.update(pad_id=2), ["tokenizer.spec", "tokenizer.vocabulary"]),
        (
            lambda spec: spec.update(scores=spec["scores"][:-1]),
            ["tokenizer.spec", "tokenizer.vocabulary", "tokenizer.load"],
        ),
    ],
    ids=["pieces", "charsmap", "pad id", "scores cut"],
)
def test_a_tampered_spec_alone_fails_check(unigram_bundle, tmp_path, change, failed):
    """Without tokenizer.json, the sha256 the models recorded at export catches any edit of the
    resealed spec; one that no longer rebuilds or disagrees with the manifest fails the spec check too."""
    report, _ = _spec_result(_tampered(unigram_bundle, tmp_path / "b", change))
    assert [r.name for r in report.failed] == failed


@pytest.mark.slow
def test_a_missing_or_unlisted_spec_fails_check(unigram_bundle, tmp_path):
    unsealed = _tampered(unigram_bundle, tmp_path / "unsealed", _swap_pieces, reseal=False)
    failed = {r.name for r in check_bundle(unsealed, n_texts=2).failed}
    assert failed == {"files.sha256", "tokenizer.vocabulary"}  # the swap still rebuilds: the digests tell
    missing = shutil.copytree(unigram_bundle, tmp_path / "missing")
    (missing / "unigram_spec.json").unlink()
    assert "unigram_spec.json (tokenizer.spec_file) is missing" in _spec_result(missing)[1].detail
    unlisted = shutil.copytree(unigram_bundle, tmp_path / "unlisted")
    manifest = json.loads((unlisted / "manifest.json").read_text())
    manifest["tokenizer"]["files"].remove("unigram_spec.json")
    (unlisted / "manifest.json").write_text(json.dumps(manifest))
    assert "is not listed in tokenizer.files" in _spec_result(unlisted)[1].detail


def test_a_unigram_tokenizer_swift_cannot_follow_is_refused_at_export(tmp_path):
    student = build_tiny_unigram_bert(tmp_path / "student", seed=3)
    data = json.loads((student / "tokenizer.json").read_text(encoding="utf-8"))
    data["normalizer"] = {"type": "NFKC"}  # what SentencePieceUnigramTokenizer trains with
    (student / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "out" / "bundle"
    result = CliRunner().invoke(main, ["export", str(student), "--out", str(out), "--seq-len", "16", "--quiet"])
    line = assert_one_line_error(result, "cannot be exported for MLXEdgeKit", "normalizer 'NFKC' is not supported")
    assert result.exit_code == 9, line
    assert list((tmp_path / "out").iterdir()) == []  # nothing left behind, not even the partial folder


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
