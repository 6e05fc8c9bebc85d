"""The Swift package's manifest fixtures still match what the exporter writes.

swift/Tests/MLXEdgeKitTests/Fixtures/bundle/manifest.json (WordPiece, a default lean export),
bundle_extras/manifest.json (the same with --extras classifier,onnx), bundle_unigram/manifest.json
(Unigram) and bundle_static/manifest.json (a static-embedding student) are real exports of tiny students; the Swift tests (BundleManifestTests,
BundleExtrasTests, ClassifierBundleTests, UnigramBundleTests) decode, validate and open them. If the exporter's manifest changes shape
(a key added, renamed or removed), the fixture is stale and these tests fail: regenerate it with
`.venv/bin/python scripts/make_bundle_manifest_fixture.py` and run the Swift tests
(`swift test` at the repository root), which judge whether MLXEdgeKit still reads the new contract.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from mlx_edge.bundle.layout import manifest_problems
from mlx_edge.fileio import sha256_file

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "make_bundle_manifest_fixture.py"
FIXTURES = ROOT / "swift" / "Tests" / "MLXEdgeKitTests" / "Fixtures"
FIXTURE = FIXTURES / "bundle"
REGENERATE = "regenerate it with `.venv/bin/python scripts/make_bundle_manifest_fixture.py`, then run the Swift tests"
# Free-form objects (the schema says only "object"): their keys are data, not the contract.
OPAQUE = {"checks.results[].figures"}


def _script():
    spec = importlib.util.spec_from_file_location("make_bundle_manifest_fixture", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def key_paths(value, prefix: str = "") -> set[str]:
    """Every key path of a JSON value: `models.head.loss.type`, list items as `[]`."""
    paths = set()
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{prefix}.{key}" if prefix else key
            paths.add(path)
            if path not in OPAQUE:
                paths |= key_paths(item, path)
    elif isinstance(value, list):
        for item in value:
            paths |= key_paths(item, f"{prefix}[]")
    return paths


@pytest.fixture(scope="module", params=["wordpiece", "unigram", "extras", "static"])
def variant(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def fixture_dir(variant) -> Path:
    return FIXTURES / _script().FIXTURE_DIRS[variant].name


@pytest.fixture(scope="module")
def fixture_manifest(fixture_dir) -> dict:
    path = fixture_dir / "manifest.json"
    assert path.is_file(), f"{path} is missing: {REGENERATE}"
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def fresh_manifest(variant, tmp_path_factory) -> dict:
    """The manifest the current exporter writes for the same tiny student (a few seconds)."""
    script = _script()
    bundle = script.export_tiny_bundle(tmp_path_factory.mktemp(f"swift-manifest-fixture-{variant}"), variant)
    return script.fixture_manifest(bundle)


def test_fixture_validates_against_the_schema(fixture_manifest):
    problems = manifest_problems(fixture_manifest)
    assert problems == [], f"the Swift fixture violates bundle_manifest.schema.json: {problems[:3]}; {REGENERATE}"


def test_fixture_has_the_keys_of_a_fresh_export(fixture_manifest, fresh_manifest):
    assert manifest_problems(fresh_manifest) == []
    ours, fresh = key_paths(fixture_manifest), key_paths(fresh_manifest)
    missing, extra = sorted(fresh - ours), sorted(ours - fresh)
    assert not missing and not extra, (
        f"the exporter's manifest changed: keys only in a fresh export {missing}, keys only in the Swift fixture "
        f"{extra}; {REGENERATE}"
    )


def test_fixture_describes_the_same_contract(fixture_manifest, fresh_manifest):
    """Beyond the keys: the names and shapes the Swift side reads."""
    for path in (
        ("labels",),
        ("max_length",),
        ("sequence_length",),
        ("models", "encoder", "inputs"),
        ("models", "encoder", "outputs"),
        ("models", "encoder", "embedding_output"),
        ("models", "head", "inputs"),
        ("models", "head", "outputs"),
        ("models", "head", "training_inputs"),
        ("models", "head", "embedding_input"),
        ("models", "head", "label_input"),
        ("models", "head", "probabilities_output"),
        ("models", "head", "loss"),
        ("tokenizer", "type"),
        ("tokenizer", "files"),
        ("tokenizer", "vocab_file"),
        ("tokenizer", "spec_file"),
        ("models", "classifier"),
        ("models", "onnx"),
    ):
        ours, fresh = fixture_manifest, fresh_manifest
        for key in path:
            ours, fresh = ours.get(key), fresh.get(key)
        assert ours == fresh, f"{'.'.join(path)}: fixture {ours!r}, fresh export {fresh!r}; {REGENERATE}"
    assert sorted(fixture_manifest["files"]) == sorted(fresh_manifest["files"]), REGENERATE


def test_fixture_files_match_their_manifest_entries(variant, fixture_dir, fixture_manifest):
    """The tokenizer files shipped with the fixture verify against its sha256 entries (the Swift tests rely on it)."""
    script = _script()
    names = script.fixture_files(fixture_manifest, variant)
    for name in names:
        entry = fixture_manifest["files"][name]
        path = fixture_dir / name
        assert path.is_file(), f"{path} is missing: {REGENERATE}"
        assert (sha256_file(path), path.stat().st_size) == (entry["sha256"], entry["bytes"]), f"{name}: {REGENERATE}"
    extra = [script.CASES_FILE] if variant == "unigram" else []
    assert sorted(p.name for p in fixture_dir.iterdir()) == sorted(["manifest.json", *names, *extra])


def test_unigram_fixture_records_the_scripts_texts():
    """The ids the Swift test expects are for the script's texts, padded to the fixture's length."""
    script = _script()
    cases = json.loads((FIXTURES / "bundle_unigram" / script.CASES_FILE).read_text(encoding="utf-8"))
    assert cases["max_length"] == script.SEQ_LEN and [c["text"] for c in cases["cases"]] == script.CASE_TEXTS, (
        REGENERATE
    )
    for case in cases["cases"]:
        assert len(case["input_ids"]) == len(case["attention_mask"]) == script.SEQ_LEN
        assert case["input_ids"][0] == 0 and 2 in case["input_ids"]  # <s> ... </s>, as XLM-R numbers them


def test_the_lean_fixture_has_no_extras_and_the_extras_fixture_both():
    lean = json.loads((FIXTURE / "manifest.json").read_text(encoding="utf-8"))
    extras = json.loads((FIXTURES / "bundle_extras" / "manifest.json").read_text(encoding="utf-8"))
    assert list(lean["models"]) == ["encoder", "head"]
    assert list(extras["models"]) == ["encoder", "head", "classifier", "onnx"]
    assert not any(f.startswith(("Classifier.mlpackage", "model.onnx")) for f in lean["files"])


def test_schema_wants_the_encoder_and_head_not_the_extras():
    extras = json.loads((FIXTURES / "bundle_extras" / "manifest.json").read_text(encoding="utf-8"))
    assert manifest_problems(extras) == []
    for key in ("classifier", "onnx"):
        lean = json.loads(json.dumps(extras))
        del lean["models"][key]
        assert manifest_problems(lean) == []
    del extras["models"]["head"]
    assert any("'head' is a required property" in p for p in manifest_problems(extras))


def test_schema_keeps_older_bundles_and_wants_a_spec_for_unigram():
    """A manifest without tokenizer.type (older WordPiece exports) is valid; a Unigram one needs its spec file."""
    wordpiece = json.loads((FIXTURE / "manifest.json").read_text(encoding="utf-8"))
    for key in ("type", "spec_file"):
        wordpiece["tokenizer"].pop(key)
    assert manifest_problems(wordpiece) == []
    unigram = json.loads((FIXTURES / "bundle_unigram" / "manifest.json").read_text(encoding="utf-8"))
    unigram["tokenizer"]["spec_file"] = None
    assert any("tokenizer" in p and "None is not of type 'string'" in p for p in manifest_problems(unigram))
    del unigram["tokenizer"]["spec_file"]
    assert any("'spec_file' is a required property" in p for p in manifest_problems(unigram))


def test_key_paths():
    assert key_paths({"a": {"b": 1}, "c": [{"d": 2}, {"e": 3}]}) == {"a", "a.b", "c", "c[].d", "c[].e"}
    assert key_paths({"checks": {"results": [{"figures": {"x": 1}}]}}) == {
        "checks",
        "checks.results",
        "checks.results[].figures",
    }
