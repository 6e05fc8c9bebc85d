"""The teacher's `head = "probe"` (LP-FT): a mean-pooled head that starts as a linear probe.

The mean pooling must be the same function in every place that runs a teacher or a model of its kind:
the MLX BERT (models/bert.py), transformers' BERT as mlx-edge loads it (teacher/source.py, which the
torch label path and `teacher train` use) and the PyTorch mirror (bridges, ONNX). References are
written out here in NumPy from the hidden states; the padded rows make the mask matter. Nothing is
mocked: the models are tiny random BERTs built in the test."""

from __future__ import annotations

import json
from dataclasses import replace

import mlx.core as mx
import numpy as np
import pytest
import torch
from transformers import BertForSequenceClassification

from bridges.torch_mirror import load_mirror, read_student_weights
from mlx_edge.distill.student import student_config
from mlx_edge.errors import ModelError
from mlx_edge.models.bert import BertConfig
from mlx_edge.models.checkpoint import load_model
from mlx_edge.teacher.probe import fit_linear_head
from mlx_edge.teacher.source import load_classifier, use_classifier_pooling
from tests.helpers.tiny import build_tiny_bert


@pytest.fixture(scope="module")
def mean_teacher(tmp_path_factory):
    directory = build_tiny_bert(tmp_path_factory.mktemp("mean-teacher"), seed=3, classifier_pooling="mean")
    assert json.loads((directory / "config.json").read_text())["classifier_pooling"] == "mean"
    return directory


def _batch():
    rng = np.random.default_rng(0)
    ids = rng.integers(5, 90, size=(3, 12)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 7:] = 0  # padded rows: the mean must skip these positions
    mask[2, 3:] = 0
    ids[mask == 0] = 0
    return ids, mask


def _numpy_mean_logits(hidden: np.ndarray, mask: np.ndarray, weight: np.ndarray, bias: np.ndarray) -> np.ndarray:
    keep = mask[..., None].astype(np.float64)
    pooled = (hidden * keep).sum(axis=1) / keep.sum(axis=1)
    return pooled @ weight.T + bias


def test_mean_pooling_is_the_same_in_mlx_transformers_and_the_mirror(mean_teacher):
    ids, mask = _batch()
    ours = load_model(mean_teacher, require_head=True)
    ours.eval()
    assert ours.config.classifier_pooling == "mean"
    out = ours(mx.array(ids), mx.array(mask))
    weights = read_student_weights(mean_teacher)
    want = _numpy_mean_logits(np.array(out.last_hidden), mask, weights["classifier.weight"], weights["classifier.bias"])
    np.testing.assert_allclose(np.array(out.logits), want, atol=1e-5)
    net = load_classifier(mean_teacher).eval()
    with torch.no_grad():
        theirs = net(input_ids=torch.tensor(ids).long(), attention_mask=torch.tensor(mask).long()).logits.numpy()
    np.testing.assert_allclose(theirs, want, atol=1e-4)
    # the same directory read as transformers' own class pools [CLS]: different logits, so the check sees pooling
    plain = BertForSequenceClassification.from_pretrained(mean_teacher).eval()
    with torch.no_grad():
        cls = plain(input_ids=torch.tensor(ids).long(), attention_mask=torch.tensor(mask).long()).logits.numpy()
    assert np.abs(cls - want).max() > 1e-3
    mirror = load_mirror(weights, ours.config, source=mean_teacher)
    with torch.no_grad():
        _, logits = mirror(torch.tensor(ids), torch.tensor(mask))
    np.testing.assert_allclose(logits.numpy(), want, atol=1e-4)


def test_the_config_names_mean_pooling_only_when_it_is_on():
    base = BertConfig(hidden_size=32, num_attention_heads=4, intermediate_size=48, num_hidden_layers=2)
    assert "classifier_pooling" not in base.to_dict()  # a plain BERT's config.json as transformers writes it
    mean = replace(base, classifier_pooling="mean")
    assert BertConfig.from_dict(mean.to_dict()).classifier_pooling == "mean"
    with pytest.raises(ModelError, match="classifier_pooling 'max'"):
        BertConfig.from_dict({**base.to_dict(), "classifier_pooling": "max"})
    # a student keeps BERT's [CLS] pooler, the head the export path (mirror, CoreML) is checked with
    half, _ = student_config("half", mean)
    assert half.classifier_pooling == "cls" and half.num_hidden_layers == 1


def test_mean_pooling_refuses_a_model_without_a_bert_pooler(mean_teacher):
    class NotBert(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.config = type("C", (), {"classifier_pooling": "mean"})()

    with pytest.raises(ModelError, match="needs a BERT classifier"):
        use_classifier_pooling(NotBert())


def test_the_linear_head_separates_features_of_any_scale():
    rng = np.random.default_rng(1)
    centers = rng.normal(size=(3, 8)) * 4
    y = rng.integers(0, 3, size=300)
    x = centers[y] + rng.normal(size=(300, 8))
    x[:, 0] *= 1000.0  # features on very different scales: the standardization is folded into the weights
    x[:, 1] *= 0.001
    weight, bias = fit_linear_head(x, y, 3)
    assert weight.shape == (3, 8) and bias.shape == (3,)
    assert ((x @ weight.T + bias).argmax(axis=1) == y).mean() > 0.97
    # a constant head would score at most the majority share
    assert ((x @ weight.T + bias).argmax(axis=1) == y).mean() > np.bincount(y).max() / len(y) + 0.3


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_teacher_train_with_the_probe_head_on_both_backends(base_dir, toy_data, tmp_path, backend):
    from click.testing import CliRunner

    from mlx_edge.cli import main
    from mlx_edge.models.tokenizer import load_tokenizer

    train, dev = toy_data
    out = tmp_path / "t"
    args = ["teacher", "train", "--model", str(base_dir), "--train", str(train), "--dev", str(dev), "--out", str(out),
            "--epochs", "2", "--min-steps", "0", "--learning-rate", "1e-3", "--batch-size", "16", "--backend", backend,
            "--head", "probe", "--select", "best", "--quiet"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    epochs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in epochs] == [0, 1, 2]  # epoch 0: the linear probe, judged on dev
    manifest = json.loads((out / "mlx_edge_manifest.json").read_text())
    best = max(epochs, key=lambda e: (e["dev_accuracy"], e["dev_macro_f1"]))  # the first of equals
    assert manifest["result"]["best_epoch"] == best["epoch"]
    assert manifest["result"]["dev_accuracy"] == best["dev_accuracy"]
    assert json.loads((out / "config.json").read_text())["classifier_pooling"] == "mean"
    assert not list(out.glob("probe-epoch-0")) and not list(out.parent.glob(".*partial"))
    # what was written answers the same in MLX and in transformers as mlx-edge loads it, padding included
    texts = [json.loads(line)["text"] for line in dev.read_text().splitlines()][:6]
    ids = load_tokenizer(out).encode_batch(texts, max_length=32)
    width = max(len(x) for x in ids)
    batch = np.zeros((len(ids), width), np.int32)
    mask = np.zeros_like(batch)
    for i, row in enumerate(ids):
        batch[i, : len(row)], mask[i, : len(row)] = row, 1
    assert (mask == 0).any()
    model = load_model(out, require_head=True)
    model.eval()
    ours = np.array(model(mx.array(batch), mx.array(mask)).logits)
    net = load_classifier(out).eval()
    with torch.no_grad():
        theirs = net(input_ids=torch.tensor(batch).long(), attention_mask=torch.tensor(mask).long()).logits.numpy()
    np.testing.assert_allclose(ours, theirs, atol=1e-4)
    assert np.ptp(ours) > 1e-3  # a head, not a constant


def test_the_few_label_defaults_resolve_by_the_data_size():
    from mlx_edge.metrics import SMALL_DEV, keeps_last
    from mlx_edge.teacher.train import PROBE_HEAD_BELOW, resolve_head

    assert resolve_head("auto", 300) == "probe" and resolve_head("auto", PROBE_HEAD_BELOW) == "new"
    assert resolve_head("new", 10) == "new" and resolve_head("probe", 10**6) == "probe"
    assert keeps_last("auto", 30) and not keeps_last("auto", SMALL_DEV)
    assert keeps_last("last", 10**6) and not keeps_last("best", 3)


@pytest.mark.parametrize("backend", ["torch", "mlx"])
def test_a_small_dev_split_keeps_the_last_epoch(base_dir, toy_data, tmp_path, backend):
    """`--head auto` on 240 rows and the default select on a 60-row dev split: the probe head, and the last
    epoch kept whatever dev says (the saved model predicts dev as the last epoch's line reports)."""
    from click.testing import CliRunner

    from mlx_edge.cli import main
    from mlx_edge.models.tokenizer import load_tokenizer

    train, dev = toy_data
    out = tmp_path / "t"
    args = ["teacher", "train", "--model", str(base_dir), "--train", str(train), "--dev", str(dev), "--out", str(out),
            "--epochs", "3", "--min-steps", "0", "--learning-rate", "1e-3", "--batch-size", "16", "--backend", backend,
            "--head", "auto", "--quiet"]  # fmt: skip
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    epochs = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [e["epoch"] for e in epochs] == [0, 1, 2, 3]  # auto chose the probe head: epoch 0 is the probe
    manifest = json.loads((out / "mlx_edge_manifest.json").read_text())
    assert manifest["result"]["best_epoch"] == 3
    assert manifest["result"]["dev_accuracy"] == epochs[-1]["dev_accuracy"]
    assert manifest["hyperparameters"]["head"] == "probe" and manifest["hyperparameters"]["select"] == "last"
    assert not list(out.glob("probe-epoch-0"))
    rows = [json.loads(line) for line in dev.read_text().splitlines()]
    ids = load_tokenizer(out).encode_batch([r["text"] for r in rows], max_length=32)
    width = max(len(x) for x in ids)
    batch, mask = np.zeros((len(ids), width), np.int32), np.zeros((len(ids), width), np.int32)
    for i, row in enumerate(ids):
        batch[i, : len(row)], mask[i, : len(row)] = row, 1
    model = load_model(out, require_head=True)
    model.eval()
    pred = np.array(model(mx.array(batch), mx.array(mask)).logits).argmax(axis=1)
    labels = json.loads((out / "config.json").read_text())["id2label"]
    gold = np.array([int(next(k for k, v in labels.items() if v == r["label"])) for r in rows])
    assert abs((pred == gold).mean() - epochs[-1]["dev_accuracy"]) < 1e-6
