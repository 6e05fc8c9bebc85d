"""`teacher train --backend mlx`: the MLX BERT fine-tuned with distillation's compiled step, written as a
transformers directory. Its logits must be those of the same directory loaded by PyTorch, and the
stages after the teacher (label, distill, export) must take it as they take a PyTorch-trained one."""

from __future__ import annotations

import json

import mlx.core as mx
import numpy as np
import pytest
import torch
from click.testing import CliRunner
from safetensors.numpy import load_file
from transformers import AutoModelForSequenceClassification

from mlx_edge.cli import main
from mlx_edge.models.checkpoint import load_model
from mlx_edge.models.tokenizer import load_tokenizer
from mlx_edge.targets import TargetsCache
from tests.helpers.cli import assert_one_line_error


def _train(base_dir, toy_data, out, *extra):
    train, dev = toy_data
    # --select best: the best epoch on the 60-row dev split, which the tests compare; --head new: the
    # [CLS] head on both backends (the probe head: test_teacher_probe.py)
    args = ["teacher", "train", "--model", str(base_dir), "--train", str(train), "--dev", str(dev),
            "--out", str(out), "--backend", "mlx", "--min-steps", "0", "--learning-rate", "1e-3", "--batch-size", "16",
            "--select", "best", "--head", "new", "--quiet"]  # fmt: skip
    return CliRunner().invoke(main, args + list(extra))


@pytest.fixture(scope="module")
def mlx_teacher(base_dir, toy_data, tmp_path_factory):
    out = tmp_path_factory.mktemp("mlx-teacher") / "t"
    result = _train(base_dir, toy_data, out, "--epochs", "3")
    assert result.exit_code == 0, result.output
    return out


def test_mlx_teacher_learns_and_writes_what_torch_writes(mlx_teacher):
    manifest = json.loads((mlx_teacher / "mlx_edge_manifest.json").read_text())
    assert manifest["kind"] == "teacher" and manifest["hyperparameters"]["backend"] == "mlx"
    assert manifest["result"]["dev_accuracy"] > manifest["result"]["majority_baseline"] + 0.2
    epochs = [json.loads(line) for line in (mlx_teacher / "metrics.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in epochs] == [1, 2, 3]
    assert (
        manifest["result"]["best_epoch"] == max(epochs, key=lambda e: (e["dev_accuracy"], e["dev_macro_f1"]))["epoch"]
    )
    net, info = AutoModelForSequenceClassification.from_pretrained(mlx_teacher, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert net.config.id2label == {0: "finance", 1: "health"}
    assert (mlx_teacher / "tokenizer.json").is_file() and (mlx_teacher / "vocab.txt").is_file()
    assert not list(mlx_teacher.glob("mlx-train-state")) and not list(mlx_teacher.parent.glob(".*partial"))


def test_mlx_teacher_logits_equal_the_pytorch_loaded_copy(mlx_teacher, toy_data):
    texts = [json.loads(line)["text"] for line in toy_data[1].read_text().splitlines()][:24]
    ids = load_tokenizer(mlx_teacher).encode_batch(texts, max_length=64)
    model = load_model(mlx_teacher, require_head=True)
    net = AutoModelForSequenceClassification.from_pretrained(mlx_teacher).eval()
    for row in ids:  # one text at a time: no padding on either side
        ours = np.array(model(mx.array([row])).logits[0])
        with torch.no_grad():
            theirs = net(input_ids=torch.tensor([row])).logits[0].numpy()
        np.testing.assert_allclose(ours, theirs, atol=1e-4, rtol=0)
    assert np.ptp(np.array(model(mx.array([ids[0]])).logits)) > 1e-3  # a head that learned something


def test_label_distill_and_export_take_the_mlx_teacher(mlx_teacher, toy_data, tmp_path):
    train, dev = toy_data
    run = CliRunner().invoke
    targets = tmp_path / "targets"
    result = run(main, ["teacher", "label", "--teacher", str(mlx_teacher), "--data", str(train), "--out", str(targets),
                        "--hidden-layers", "1,2", "--attention-layers", "1,2", "--quiet"])  # fmt: skip
    assert result.exit_code == 0, result.output
    assert TargetsCache.open(targets).manifest["examples"] == 240
    student = tmp_path / "student"
    result = run(main, ["distill", "--teacher", str(mlx_teacher), "--train", str(train), "--dev", str(dev),
                        "--targets", str(targets), "--out", str(student), "--epochs", "1", "--quiet"])  # fmt: skip
    assert result.exit_code == 0, result.output
    bundle = tmp_path / "bundle"
    result = run(main, ["export", str(student), "--out", str(bundle), "--seq-len", "16", "--n-texts", "2", "--quiet"])
    assert result.exit_code == 0, result.output
    assert (bundle / "manifest.json").is_file()


def test_frozen_layers_stay_as_pretrained_on_both_backends(base_dir, toy_data, tmp_path):
    before = load_file(base_dir / "model.safetensors")
    for backend in ("torch", "mlx"):
        out = tmp_path / backend
        result = _train(base_dir, toy_data, out, "--epochs", "1", "--freeze-layers", "1", "--backend", backend)
        assert result.exit_code == 0, result.output
        after = load_file(out / "model.safetensors")
        frozen = "bert.encoder.layer.0.attention.self.query.weight"
        trained = "bert.encoder.layer.1.attention.self.query.weight"
        position = "bert.embeddings.position_embeddings.weight"
        for name, same in ((frozen, True), (position, True), (trained, False)):
            original = before.get(name, before.get(name.removeprefix("bert.")))
            assert np.array_equal(original, after[name]) == same, (backend, name)
        manifest = json.loads((out / "mlx_edge_manifest.json").read_text())
        assert manifest["hyperparameters"]["freeze_layers"] == 1


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_freezing_every_block_is_refused(base_dir, toy_data, tmp_path, backend):
    result = _train(base_dir, toy_data, tmp_path / "t", "--freeze-layers", "2", "--backend", backend)
    assert_one_line_error(result, "freeze_layers 2", "at most 1")
    assert not (tmp_path / "t").exists()


def test_mlx_backend_refuses_a_hub_id(toy_data, tmp_path):
    result = _train("someone/some-bert", toy_data, tmp_path / "t")
    assert_one_line_error(result, "local model directory or a built-in teacher", "--backend torch")
