"""`mlx-edge check` holds what the app trusts in manifest.json to the models themselves.

The labels (the app names its probabilities from them) and the vocabulary (it tokenizes with it)
must be the ones export built the models with, even when the manifest's sha256 list is recomputed;
and no path the manifest names, nor a symlink in the bundle, may lead out of the bundle.
A random tiny student stands in for a distilled one (see tests/helpers/exports.py).
"""

from __future__ import annotations

import json
import os

import pytest
from click.testing import CliRunner

from mlx_edge.bundle.layout import TOKENIZER_KEY, unsafe_path
from mlx_edge.cli import main
from mlx_edge.errors import CHECK_FAILED, BundleError
from mlx_edge.fileio import sha256_file
from tests.helpers.cli import assert_one_line_error
from tests.helpers.exports import copy_bundle, exported

ENCODER_SPEC = "Encoder.mlpackage/Data/com.apple.CoreML/model.mlmodel"
CLASSIFIER_SPEC = "Classifier.mlpackage/Data/com.apple.CoreML/model.mlmodel"


@pytest.fixture()
def bundle(tmp_path):
    # with the classifier: the labels and the vocabulary must agree with every model that records them
    return copy_bundle(exported("--precision", "fp32", "--extras", "classifier,onnx"), tmp_path / "bundle")


def _check(bundle, *, exit_code: int) -> dict:
    result = CliRunner().invoke(main, ["check", str(bundle), "--n-texts", "2", "--json"])
    assert result.exit_code == exit_code, result.output
    return {r["name"]: r for r in json.loads(result.output)["results"]}


def _failed(results: dict) -> set[str]:
    return {name for name, r in results.items() if not r["ok"]}


def _edit_manifest(bundle, change) -> None:
    path = bundle / "manifest.json"
    manifest = json.loads(path.read_text(encoding="utf-8"))
    change(manifest)
    path.write_text(json.dumps(manifest, ensure_ascii=False), encoding="utf-8")


def _reseal(bundle, *names: str) -> None:
    """Recompute the manifest's sha256 and size of `names`, as someone covering an edit would."""

    def update(manifest):
        for name in names:
            path = bundle / name
            manifest["files"][name] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}

    _edit_manifest(bundle, update)


def test_the_untouched_export_passes(bundle):
    results = _check(bundle, exit_code=0)
    labels, vocab = results["labels"], results["tokenizer.vocabulary"]
    assert labels["ok"] and not labels["skipped"]
    assert "Encoder.mlpackage, Classifier.mlpackage, Head.mlmodel, the student's config" in labels["detail"]
    assert vocab["ok"] and not vocab["skipped"], vocab["detail"]
    assert f"{_tokens(bundle)} tokens, the encoder's embedding rows" in vocab["detail"]


def test_a_lean_bundle_is_held_to_the_models_it_has(tmp_path):
    bundle = copy_bundle(exported("--precision", "fp32"), tmp_path / "lean")
    results = _check(bundle, exit_code=0)
    assert "in the order Encoder.mlpackage, Head.mlmodel, the student's config record" in results["labels"]["detail"]
    assert results["tokenizer.vocabulary"]["ok"] and not results["tokenizer.vocabulary"]["skipped"]


def _swap_first_two(labels):
    labels[0], labels[1] = labels[1], labels[0]


@pytest.mark.parametrize(
    "change, message",
    [
        (_swap_first_two, 'labels[0] is "health" in manifest.json but "finance" in Encoder.mlpackage'),
        (lambda labels: labels.__setitem__(3, "school"), 'labels[3] is "school" in manifest.json but "study"'),
        (lambda labels: labels.pop(), "manifest.json has 5 labels, Head.mlmodel computes 6 probabilities"),
    ],
    ids=["reordered", "renamed", "dropped"],
)
def test_labels_that_differ_from_the_models_fail(bundle, change, message):
    _edit_manifest(bundle, lambda manifest: change(manifest["labels"]))
    results = _check(bundle, exit_code=CHECK_FAILED)
    assert _failed(results) == {"labels"}
    detail = results["labels"]["detail"]
    assert message in detail and "\n" not in detail, detail


def _tokens(bundle) -> int:
    return len((bundle / "vocab.txt").read_text(encoding="utf-8").splitlines())


def _vocab_edit(bundle, change) -> list[str]:
    path = bundle / "vocab.txt"
    tokens = path.read_text(encoding="utf-8").splitlines()
    change(tokens)
    path.write_text("\n".join(tokens) + "\n", encoding="utf-8")
    _reseal(bundle, "vocab.txt")
    return tokens


def _swap(i, j):
    def change(tokens):
        tokens[i], tokens[j] = tokens[j], tokens[i]

    return change


@pytest.mark.parametrize(
    "change, messages",
    [
        (_swap(100, 101), lambda n: ["vocab.txt is not the file Encoder.mlpackage was exported with"]),
        (_swap(2, 50), lambda n: ['tokenizer.cls_id is 2, vocab.txt has "[CLS]" at 50', "vocab.txt is not the file"]),
        (
            lambda tokens: tokens.append("extra"),
            lambda n: [f"vocab.txt's token count is {n + 1}, Encoder.mlpackage embeds {n}"],
        ),
    ],
    ids=["same-size-permutation", "special-token-moved", "one-more-token"],
)
def test_a_swapped_vocabulary_fails_even_with_the_manifest_resealed(bundle, change, messages):
    messages = messages(_tokens(bundle))
    _vocab_edit(bundle, change)
    results = _check(bundle, exit_code=CHECK_FAILED)
    assert _failed(results) == {"tokenizer.vocabulary"}  # files.sha256 passes: only the models can tell
    detail = results["tokenizer.vocabulary"]["detail"]
    assert all(m in detail for m in messages) and "\n" not in detail, detail


def test_a_bundle_from_before_the_recorded_sha256_is_read_with_a_note(bundle):
    from bridges.coreml_export import load_spec

    for package, spec_file in (("Encoder.mlpackage", ENCODER_SPEC), ("Classifier.mlpackage", CLASSIFIER_SPEC)):
        spec = load_spec(bundle / package)
        del spec.description.metadata.userDefined[TOKENIZER_KEY]
        (bundle / spec_file).write_bytes(spec.SerializeToString())
    _reseal(bundle, ENCODER_SPEC, CLASSIFIER_SPEC)
    vocab = _check(bundle, exit_code=0)["tokenizer.vocabulary"]
    assert vocab["skipped"] and "record no mlx_edge.tokenizer_sha256" in vocab["detail"]
    assert "export again" in vocab["detail"]


def _refused(bundle, *fragments) -> str:
    result = CliRunner().invoke(main, ["check", str(bundle), "--n-texts", "2"])
    assert result.exit_code == BundleError.exit_code, result.output
    return assert_one_line_error(result, *fragments)


@pytest.mark.parametrize(
    "change, fragment",
    [
        (
            lambda m: m["tokenizer"].update(vocab_file="../vocab.txt"),
            "manifest.json tokenizer.vocab_file '../vocab.txt' is a path with a '..' part",
        ),
        (
            lambda m: m["files"].update({"../vocab.txt": m["files"]["vocab.txt"]}),
            "manifest.json files key '../vocab.txt' is a path with a '..' part",
        ),
        (
            lambda m: m["tokenizer"]["files"].append("Encoder.mlpackage/../../vocab.txt"),
            "tokenizer.files[3] 'Encoder.mlpackage/../../vocab.txt' is a path with a '..' part",
        ),
        (
            lambda m: m["models"]["onnx"].update(file="/etc/hostname"),
            "models.onnx.file '/etc/hostname' is an absolute path",
        ),
    ],
    ids=["vocab_file", "files-key", "tokenizer-files", "absolute"],
)
def test_a_manifest_path_out_of_the_bundle_is_refused(bundle, change, fragment):
    (bundle.parent / "vocab.txt").write_text("[PAD]\n")  # there to be read, if check followed the path
    _edit_manifest(bundle, change)
    _refused(bundle, fragment)


@pytest.mark.parametrize(
    "link, target",
    [
        ("vocab.txt", "vocab.txt"),  # the same content outside: every sha256 still matches
        ("Encoder.mlpackage/Data", "Data"),  # a directory linked out
        ("manifest.json", "manifest.json"),
    ],
    ids=["file", "directory", "manifest"],
)
def test_a_symlink_out_of_the_bundle_is_refused(bundle, link, target):
    outside = bundle.parent / "outside" / target
    outside.parent.mkdir()
    os.replace(bundle / link, outside)
    (bundle / link).symlink_to(outside, target_is_directory=outside.is_dir())
    _refused(bundle, f"{link}", "outside the bundle")


@pytest.mark.parametrize(
    "path, problem",
    [
        ("vocab.txt", None),
        ("Encoder.mlpackage/Data/com.apple.CoreML/model.mlmodel", None),
        ("", "not a file name"),
        ("/abs/vocab.txt", "an absolute path"),
        ("a\\b.txt", "written with backslashes"),
        ("a//b", "a path with an empty part"),
        ("./vocab.txt", "a path with a '.' part"),
        ("x/../../vocab.txt", "a path with a '..' part"),
    ],
)
def test_unsafe_path_follows_the_swift_rule(path, problem):
    assert unsafe_path(path) == problem
