"""Fine-tune the teacher in MLX (`teacher train --backend mlx`), the native framework on a Mac.

The model is the MLX BERT (models/bert.py) loaded from the base checkpoint with a new head; the step
is distillation's compiled one (distill/step.py: AdamW, warmup then linear decay, clipping, CPU
streams) on the cross-entropy term alone, and the loop is distillation's too (distill/loop.py:
bucketed batches, the NaN guard, a checkpoint each epoch). The best epoch is written with Hugging
Face names (models/checkpoint.py), so `teacher label`, `distill`, `export` and transformers read it as
they read a PyTorch-trained teacher. One difference from the PyTorch path: AdamW's weight decay also
reaches biases and LayerNorms (0.01 x the learning rate per step: a negligible pull).
"""

from __future__ import annotations

import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import mlx.core as mx
import numpy as np
from mlx.utils import tree_map

from mlx_edge.data import bucketed_batches, collate
from mlx_edge.distill.config import TERMS, LoopConfig, Schedule
from mlx_edge.distill.loop import run_loop
from mlx_edge.distill.step import Trainable
from mlx_edge.errors import TeacherError
from mlx_edge.metrics import accuracy, macro_f1
from mlx_edge.models.bert import BertForSequenceClassification
from mlx_edge.models.checkpoint import copy_tokenizer_files, load_model, save_model
from mlx_edge.models.inference import BatchForward, predict_ids
from mlx_edge.runtime.devices import mlx_device
from mlx_edge.teacher.probe import fit_linear_head, probe_loss

WORK_NAME = "mlx-train-state"  # the loop's checkpoints, inside the staging directory until the end
PROBE_NAME = "probe-epoch-0"  # the linear-probe model (epoch 0), inside staging until the loop is done


@dataclass
class MlxTrainOutcome:
    best_epoch: int
    dev_accuracy: float
    dev_macro_f1: float
    samples_per_second: float
    history: list[dict]
    device: str  # "mlx-cpu" or "mlx-gpu"


def load_base(base: Path, labels: list[str], seed: int) -> BertForSequenceClassification:
    """The base checkpoint in the MLX BERT with a head for `labels`; a TeacherError when it is not one."""
    model = load_model(base, labels=labels, seed=seed)
    if not isinstance(model, BertForSequenceClassification) or model.config.quantization is not None:
        raise TeacherError(
            f"{base} is not a float BERT checkpoint the MLX backend can fine-tune",
            "train it with --backend torch",
        )
    return model


def freeze(model: BertForSequenceClassification, *, embeddings: bool, layers: int) -> None:
    """The word table (`embeddings`) and, with `layers` > 0, all embeddings and the bottom blocks stay as
    pretrained: MLX then takes no gradient below the first trained block."""
    if embeddings:
        model.bert.embeddings.word_embeddings.freeze()
    if layers:
        model.bert.embeddings.freeze()
        for layer in model.layers[:layers]:
            layer.freeze()


def train_mlx(
    *,
    base: Path,
    labels: list[str],
    train_ids: list[np.ndarray],
    train_y: np.ndarray,
    dev_ids: list[np.ndarray],
    dev_y: np.ndarray,
    pad_id: int,
    max_length: int,
    staging: Path,
    epochs: int,
    batch_size: int,
    learning_rate: float,
    warmup_ratio: float,
    weight_decay: float,
    grad_accum: int,
    max_grad_norm: float,
    seed: int,
    device: str,
    freeze_embeddings: bool,
    freeze_layers: int,
    probe_head: bool = False,
    keep_last: bool = False,
    blend: float = 1.0,
    progress: bool = True,
    on_epoch=None,
) -> MlxTrainOutcome:
    """Train; the best epoch's weights (`keep_last`: the last epoch's), config.json and tokenizer files end
    up in `staging`."""
    where = "mlx-gpu" if mlx_device(device) == mx.gpu else "mlx-cpu"
    mx.random.seed(seed)
    model = load_base(base, labels, seed)
    freeze(model, embeddings=freeze_embeddings, layers=freeze_layers)
    model.train()
    trainable = Trainable(model, model.config.hidden_size, with_hidden=False, with_embedding=False)
    weights = {k: Schedule(1.0 if k == "ce" else 0.0) for k in TERMS}
    config = LoopConfig(
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        warmup_ratio=warmup_ratio,
        weight_decay=weight_decay,
        grad_accum=grad_accum,
        max_grad_norm=max_grad_norm,
        seed=seed,
        weights=weights,
        two_stage_epochs=0,
        patience=None,
        checkpoint_every=0,
        select="last" if keep_last else "best",
    )
    labels_count = len(labels)

    def targets(rows, input_ids, mask):  # no teacher: the cross-entropy term reads only the gold labels
        return {"logits": np.zeros((len(rows), labels_count), np.float32)}

    start = None  # the probe's weights, once fitted: what a blended teacher mixes back in

    def evaluate() -> dict:
        with blended(model, start, blend):
            _, pred, _ = predict_ids(model, dev_ids, pad_id, batch_size=batch_size * 2)
        return {"dev_accuracy": accuracy(pred, dev_y), "dev_macro_f1": macro_f1(pred, dev_y, labels_count)}

    def save_best() -> None:
        with blended(model, start, blend):
            save_model(model, staging)
        copy_tokenizer_files(base, staging)

    probe = (
        _probe_epoch(model, train_ids, train_y, pad_id, batch_size, evaluate, staging, on_epoch, keep=not keep_last)
        if probe_head
        else None
    )
    if probe is not None and blend < 1.0:
        start = tree_map(lambda x: mx.array(x), model.trainable_parameters())
    work = staging / WORK_NAME
    work.mkdir(parents=True, exist_ok=True)
    result = run_loop(
        trainable=trainable,
        config=config,
        layer_map={},
        terms_on={"ce"},
        train_ids=train_ids,
        train_labels=np.asarray(train_y, dtype=np.int32),
        pad_id=pad_id,
        max_width=max_length,
        targets=targets,
        evaluate=evaluate,
        save_best=save_best,
        work=work,
        progress=progress,
        on_epoch=on_epoch,
    )
    shutil.rmtree(work, ignore_errors=True)
    best, best_epoch = result.best_metrics, result.best_epoch
    if probe is not None:
        # as in the PyTorch path, a later epoch must beat an earlier one: a tie keeps the probe
        better = (probe["dev_accuracy"], probe["dev_macro_f1"]) >= (best["dev_accuracy"], best["dev_macro_f1"])
        if better and not keep_last:  # under keep_last the probe was never saved
            for path in (staging / PROBE_NAME).iterdir():
                path.replace(staging / path.name)
            best, best_epoch = probe, 0
        shutil.rmtree(staging / PROBE_NAME, ignore_errors=True)
    return MlxTrainOutcome(
        best_epoch, best["dev_accuracy"], best["dev_macro_f1"], result.samples_per_second, result.history, where
    )


@contextmanager
def blended(model, start, share: float):
    """Inside, `model`'s trainable weights are `share` of their own plus the rest of `start`'s (WiSE-FT;
    teacher/train.py's `blend`); back as they were on leaving. No-op when `start` is None."""
    if start is None or share >= 1.0:
        yield
        return
    current = model.trainable_parameters()
    model.update(tree_map(lambda s, c: (1.0 - share) * s + share * c, start, current))
    try:
        yield
    finally:
        model.update(current)


def _probe_epoch(
    model, train_ids, train_y, pad_id, batch_size, evaluate, staging: Path, on_epoch, *, keep: bool = True
) -> dict:
    """LP-FT's first half (teacher/probe.py): mean pooling, the head fitted as a linear probe on the frozen
    model's features, judged on dev as epoch 0 and (`keep`: it may still be the best epoch) kept in
    staging/PROBE_NAME until the loop's epochs are in."""
    start = time.perf_counter()
    model.config.classifier_pooling = "mean"
    model.bert.pooler.freeze()  # unused by a mean-pooled head
    model.eval()
    features = np.zeros((len(train_ids), model.config.hidden_size), np.float32)
    forward = BatchForward(model, batch_size=batch_size * 2)
    for batch in bucketed_batches(np.array([len(x) for x in train_ids]), batch_size * 2, shuffle=False):
        input_ids, mask = collate([train_ids[j] for j in batch], pad_id=pad_id)
        features[batch] = np.array(forward(input_ids, mask).pooled)
    weight, bias = fit_linear_head(features, np.asarray(train_y), model.config.num_labels)
    model.classifier.weight = mx.array(weight)
    model.classifier.bias = mx.array(bias)
    metrics = {"epoch": 0, **evaluate(), "train_ce": probe_loss(features, weight, bias, train_y)}
    metrics["samples_per_second"] = len(train_ids) / max(time.perf_counter() - start, 1e-9)
    model.train()
    if keep:
        save_model(model, staging / PROBE_NAME)
    if on_epoch is not None:
        on_epoch(metrics)
    return metrics
