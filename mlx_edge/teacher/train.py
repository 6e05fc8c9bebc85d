"""Fine-tune the teacher with PyTorch: CUDA > MPS > CPU, and unchanged under `torchrun` (DDP).

On CUDA: bf16 autocast where supported, else fp16 with a grad scaler; MPS and CPU train in fp32.
AdamW, linear warmup then linear decay, gradient accumulation and clipping. Dev accuracy and
macro-F1 every epoch; the best epoch is what gets written. Only rank 0 writes or logs.
"""

from __future__ import annotations

import gc
import json
import math
import os
import shutil
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from functools import partial
from pathlib import Path

import numpy as np
import torch
from torch.nn.parallel import DistributedDataParallel

from mlx_edge.data import LabeledData, bucketed_batches, collate, epochs_for, load_splits
from mlx_edge.errors import ConfigError, ModelError, OutputError, TeacherError
from mlx_edge.fileio import atomic_write_json, refuse_overwriting_inputs, remove_stale_staging, staging_dir
from mlx_edge.manifest import MANIFEST_NAME, file_fingerprint, read_manifest, write_manifest
from mlx_edge.metrics import accuracy, keeps_last, macro_f1, majority_accuracy
from mlx_edge.models.builtin import resolve_model
from mlx_edge.models.checkpoint import ensure_vocab_txt
from mlx_edge.models.tokenizer import load_tokenizer, unknown_share, warn_unknown
from mlx_edge.progress import progress_bar
from mlx_edge.runtime.devices import torch_placement
from mlx_edge.runtime.distributed import init_ranks
from mlx_edge.settings import AUTO_LENGTHS, FEW_LABELS_BELOW, FEW_LABELS_BLEND, TEACHER, TeacherTrainSettings
from mlx_edge.teacher import self_train as self_training
from mlx_edge.teacher.probe import fit_linear_head, probe_loss
from mlx_edge.teacher.source import (
    check_local_model,
    check_tokenizer_files,
    has_trained_head,
    head_labels,
    is_local,
    load_for_training,
    transformers_progress,
    use_classifier_pooling,
)
from mlx_edge.teacher.train_mlx import train_mlx
from mlx_edge.transfer import transfer_set

METRICS_NAME = "metrics.jsonl"
# The settings of the optimization itself: in the manifest, and what the MLX backend passes on.
OPTIMIZATION = ("epochs", "batch_size", "learning_rate", "warmup_ratio", "weight_decay", "grad_accum", "max_grad_norm")


@dataclass
class TeacherTrainResult:
    out_dir: str
    best_epoch: int
    dev_accuracy: float
    dev_macro_f1: float
    majority_baseline: float
    train_samples_per_second: float
    device: str
    world_size: int
    epochs: int = 0  # the epochs run: --epochs, or more to reach --min-steps
    refit: bool = False  # trained again on every labeled row; the dev figures are the first fit's
    self_trained: int = 0  # pseudo-labeled unlabeled texts the teacher trained on too (self_train.py)


TABLE_FREEZE_MIN = 20_000_000  # weights: below this a table's optimizer update costs little


# head = "auto": the LP-FT probe head below this many training rows (measured at 100 and 300 to-do rows,
# docs/teacher.md), BERT's [CLS] pooler and a new head above (the demo's 3,000 rows: 95.2% dev)
PROBE_HEAD_BELOW = 1000


def resolve_head(head: str, train_rows: int) -> str:
    """`head` ("auto", "probe" or "new") as it applies to a training split of `train_rows` rows."""
    if head != "auto":
        return head
    return "probe" if train_rows < PROBE_HEAD_BELOW else "new"


def resolve_auto(
    settings: TeacherTrainSettings, train_rows: int, dev_rows: int, *, self_trains: bool = False
) -> TeacherTrainSettings:
    """`settings` with `head`, `select` and `blend` as they apply to these splits ("auto" decided): what
    both backends train by and what the manifest records. `self_trains`: the teacher learns from
    pseudo-labeled text too (its fits are never blended by "auto")."""
    last = keeps_last(settings.select, dev_rows)
    head = resolve_head(settings.head, train_rows)
    return replace(
        settings,
        head=head,
        select="last" if last else "best",
        blend=resolve_blend(settings.blend, head=head, train_rows=train_rows, last=last, self_trains=self_trains),
    )


def resolve_blend(blend: float | str, *, head: str, train_rows: int, last: bool, self_trains: bool) -> float:
    """`blend` as a share: "auto" is FEW_LABELS_BLEND for a probe-head teacher of fewer than
    FEW_LABELS_BELOW training rows whose dev split is too small to choose an epoch (the last is kept)
    and that does not self-train, else 1 (the fine-tuned weights alone)."""
    if blend != "auto":
        return float(blend)
    few = head == "probe" and few_labels(train_rows, last) and not self_trains
    return FEW_LABELS_BLEND if few else 1.0


def few_labels(train_rows: int, last: bool) -> bool:
    """The few-label regime of `refit` and `blend` "auto": fewer than FEW_LABELS_BELOW training rows and
    a dev split too small to choose an epoch on (`last`: the last is kept)."""
    return last and train_rows < FEW_LABELS_BELOW


def table_is_most(table: int, total: int) -> bool:
    """Whether a word-embedding table of `table` weights holds most of the model's `total` and at least
    20M (multilingual-e5-small's 250k rows: 96M, 82%). Then AdamW's update of it is most of a CPU
    training step, and the table is kept as pretrained unless asked otherwise (the demo's teacher: 2.7x
    the samples/s, the same dev accuracy). A small table costs little to train, so it is trained."""
    return table >= TABLE_FREEZE_MIN and table > total / 2


def encoder_layers(net):
    """The transformer blocks of a transformers encoder, bottom first."""
    base = net.base_model
    for path in ("encoder.layer", "transformer.layer"):
        node = base
        for name in path.split("."):
            node = getattr(node, name, None)
        if node is not None:
            return list(node)
    raise TeacherError(f"cannot find the layers of a {type(net).__name__}", "train it with freeze_layers = 0")


def check_freeze_layers(n: int, layers: int) -> None:
    if n >= layers:
        raise TeacherError(
            f"freeze_layers {n} would keep every block of a {layers}-layer teacher as pretrained",
            f"use at most {layers - 1}, so at least the top block and the head learn the task",
        )


def freeze_bottom(net, n: int) -> None:
    """Keep the embeddings and the bottom `n` blocks as pretrained: backward then stops above them."""
    layers = encoder_layers(net)
    check_freeze_layers(n, len(layers))
    for param in net.base_model.embeddings.parameters():
        param.requires_grad_(False)
    for layer in layers[:n]:
        for param in layer.parameters():
            param.requires_grad_(False)


def auto_max_length(tokenizer, texts) -> int:
    """The smallest of AUTO_LENGTHS that holds 99% of `texts` whole (the bundle's input length follows it)."""
    return length_for(
        [len(ids) for ids in tokenizer(list(texts), truncation=True, max_length=AUTO_LENGTHS[-1])["input_ids"]]
    )


def length_for(lengths: list[int]) -> int:
    """The smallest of AUTO_LENGTHS that holds 99% of these token counts."""
    needed = float(np.percentile(lengths, 99)) if lengths else 0.0
    return next((n for n in AUTO_LENGTHS if n >= needed), AUTO_LENGTHS[-1])


def train_teacher(
    *,
    model: str,
    train: Path,
    out: Path,
    dev: Path | None = None,
    epochs: int = TEACHER.epochs,
    min_steps: int = TEACHER.min_steps,
    batch_size: int = TEACHER.batch_size,
    learning_rate: float = TEACHER.learning_rate,
    max_length: int | None = TEACHER.max_length,
    warmup_ratio: float = TEACHER.warmup_ratio,
    weight_decay: float = TEACHER.weight_decay,
    grad_accum: int = TEACHER.grad_accum,
    max_grad_norm: float = TEACHER.max_grad_norm,
    seed: int = TEACHER.seed,
    device: str = TEACHER.device,
    dev_fraction: float = TEACHER.dev_fraction,
    text_column: str | None = None,
    label_column: str | None = None,
    force: bool = False,
    trust_remote_code: bool = TEACHER.trust_remote_code,
    freeze_embeddings: bool | None = TEACHER.freeze_embeddings,
    freeze_layers: int = TEACHER.freeze_layers,
    backend: str = TEACHER.backend,
    head: str = TEACHER.head,
    select: str = TEACHER.select,
    refit: str = TEACHER.refit,
    blend: float | str = TEACHER.blend,
    self_train: str = TEACHER.self_train,
    unlabeled: Sequence[Path] = (),
    unlabeled_column: str | None = None,
    held_out_texts: Sequence[str] = (),
    progress: bool = True,
    on_epoch: Callable[[dict], None] | None = None,
) -> TeacherTrainResult:
    """Fine-tune `model` (hub id, directory or built-in name) on labeled data; write the best epoch to `out`.

    When `refit` applies ("yes"; or "auto" with no dev file, the last epoch kept and fewer than
    FEW_LABELS_BELOW training rows, a dev split too small to choose an epoch on being worth more as
    training rows), it trains twice: on the training rows, measured on dev (the
    result's dev figures and the manifest's `refit.held_out` are that fit's), then again from the
    base model on every labeled row, dev included, with the same settings (the best epoch's count of
    epochs when the first kept its best); the second is what `out` holds. `blend` ("auto" or a share:
    resolve_blend) mixes the probe it started as back into a probe-head teacher.

    When `self_train` applies ("yes"; or "auto" below SELF_TRAIN_BELOW training rows) and `unlabeled`
    files are given, it trains twice too: the first fit labels their texts (none equal to a labeled
    row, a dev text or one of `held_out_texts`, such as the test set's), and the second trains from the
    base model on the training rows plus the first fit's surest answers (self_train.py); dev judges it
    as usual, and it is what `out` holds. It comes before `refit = "auto"`, which then does not refit."""

    out = Path(out)
    settings = TeacherTrainSettings(  # refuses a value out of range (ConfigError) before any work
        epochs=epochs,
        min_steps=min_steps,
        batch_size=batch_size,
        learning_rate=learning_rate,
        max_length=max_length,
        warmup_ratio=warmup_ratio,
        weight_decay=weight_decay,
        grad_accum=grad_accum,
        max_grad_norm=max_grad_norm,
        seed=seed,
        device=device,
        dev_fraction=dev_fraction,
        trust_remote_code=trust_remote_code,
        freeze_embeddings=freeze_embeddings,
        freeze_layers=freeze_layers,
        backend=backend,
        head=head,
        select=select,
        refit=refit,
        blend=blend,
        self_train=self_train,
    )
    refuse_overwriting_inputs(out, train, dev, model if is_local(model) else None)  # --force would delete it
    if out.exists() and not force:
        raise OutputError(f"{out} already exists", "pass --force to replace it, or choose another --out")
    run = partial(
        _train_with_mlx if backend == "mlx" else _train_with_torch,
        model=model,
        train=train,
        dev=dev,
        text_column=text_column,
        label_column=label_column,
        progress=progress,
    )
    if settings.self_train == "yes" and not unlabeled:
        raise ConfigError(
            "self_train = yes needs unlabeled text to learn from", "pass --unlabeled FILE ([data] unlabeled)"
        )
    if unlabeled and settings.self_train != "no" and settings.refit != "yes":
        train_data, dev_data = _splits(train, dev, settings, text_column, label_column)
        if self_training.applies(settings.self_train, len(train_data), bool(unlabeled)):
            return _self_train(
                run, settings, out, train_data, dev_data, files=unlabeled, column=unlabeled_column,
                held_out=held_out_texts, on_epoch=on_epoch, progress=progress,
            )  # fmt: skip
    elif unlabeled and settings.self_train == "yes":
        raise ConfigError(
            "self_train and refit = yes both ask for a second fit", "choose one: self_train = no, or refit = no"
        )
    if settings.refit == "no" or (settings.refit == "auto" and dev is not None):
        return run(settings, out=out, on_epoch=on_epoch)
    train_rows, dev_rows = _split_rows(train, dev, settings, text_column, label_column)
    if settings.refit == "auto" and not few_labels(train_rows, keeps_last(settings.select, dev_rows)):
        return run(settings, out=out, on_epoch=on_epoch)
    # both fits by the first's head and epoch choice (the refit's extra rows must not flip "auto")
    settings = resolve_auto(settings, train_rows, dev_rows)
    main = os.environ.get("RANK", "0") == "0"  # rank 0 writes (torchrun's process group is the fits' own)
    held = out.with_name(f".{out.name}.held-out")  # the first fit: only its dev figures are kept
    if held.exists() and main:
        shutil.rmtree(held)
    first = run(settings, out=held, on_epoch=on_epoch)
    if settings.select == "best":  # the epochs that were best on dev, the last of them kept
        settings = replace(settings, epochs=max(1, first.best_epoch), min_steps=0, select="last")
    refit_epoch = None if on_epoch is None else (lambda metrics: on_epoch(metrics | {"refit": True}))
    with warnings.catch_warnings():  # the same rows: what the first fit said about them holds
        warnings.simplefilter("ignore")
        second = run(settings, out=out, fit_all=True, on_epoch=refit_epoch)
    if main:
        _record_refit(out, first, dev_rows)
        shutil.rmtree(held, ignore_errors=True)
    return replace(second, dev_accuracy=first.dev_accuracy, dev_macro_f1=first.dev_macro_f1, refit=True)


def _split_rows(train, dev, settings: TeacherTrainSettings, text_column, label_column) -> tuple[int, int]:
    """How many rows the teacher trains on and is measured on (the dev file's, or the split's)."""
    train_data, dev_data = _splits(train, dev, settings, text_column, label_column)
    return len(train_data.texts), len(dev_data.texts)


def _splits(train, dev, settings: TeacherTrainSettings, text_column, label_column) -> tuple[LabeledData, LabeledData]:
    """The rows the teacher trains on and is measured on (the dev file's, or the split's), as the fits read them."""
    with warnings.catch_warnings():  # what the data looks like is said once, by the fit that reads it
        warnings.simplefilter("ignore")
        train_data, dev_data, _ = load_splits(
            train,
            dev,
            dev_fraction=settings.dev_fraction,
            seed=settings.seed,
            text_column=text_column,
            label_column=label_column,
        )
    return train_data, dev_data


def _self_train(
    run, settings: TeacherTrainSettings, out: Path, train_data: LabeledData, dev_data: LabeledData, *,
    files: Sequence[Path], column: str | None, held_out: Sequence[str], on_epoch, progress: bool,
) -> TeacherTrainResult:  # fmt: skip
    """The first fit, its pseudo-labels on the unlabeled texts, then the second fit on both (self_train.py)."""
    if init_ranks().world > 1:
        raise TeacherError(
            "self-training labels the unlabeled text in one process; this run was started by torchrun",
            "run it without torchrun, or set self_train = no",
        )
    with warnings.catch_warnings():  # distill says what it drops from the same files, for the student
        warnings.simplefilter("ignore")
        pool = transfer_set(
            list(files), labeled=train_data.texts, held_out=[*dev_data.texts, *held_out], text_column=column
        )
    # both fits by the labeled rows' head and epoch choice (the pseudo-labeled rows must not flip "auto")
    settings = resolve_auto(settings, len(train_data), len(dev_data), self_trains=True)
    first_dir = out.with_name(f".{out.name}.first-fit")
    if first_dir.exists():
        shutil.rmtree(first_dir)
    first = run(settings, out=first_dir, on_epoch=on_epoch)
    texts = self_training.sample(pool.texts, settings.seed)
    if progress:
        print(f"self-training: the first fit labels {len(texts)} unlabeled texts", file=sys.stderr, flush=True)
    device = "cpu" if settings.device == "cpu" else "auto"  # MLX's choice: its GPU where there is one
    probabilities, labels = self_training.predict(
        first_dir, texts, max_length=read_manifest(first_dir)["max_length"], device=device
    )
    pseudo = self_training.pseudo_rows(texts, probabilities, labels)
    second_epoch = None if on_epoch is None else (lambda metrics: on_epoch(metrics | {"self_train": True}))
    with warnings.catch_warnings():  # the same labeled rows: what the first fit said about them holds
        warnings.simplefilter("ignore")
        second = run(settings, out=out, pseudo=pseudo, on_epoch=second_epoch)
    manifest = read_manifest(out)
    manifest["self_train"] = {
        "unlabeled_texts": len(pool.texts),
        "labeled_by_first_fit": len(texts),
        "pseudo_labeled": len(pseudo.texts),
        "share": self_training.SHARE,
        "first_fit": {
            "epoch": first.best_epoch,
            "dev_accuracy": first.dev_accuracy,
            "dev_macro_f1": first.dev_macro_f1,
        },
    }
    atomic_write_json(out / MANIFEST_NAME, manifest)
    shutil.rmtree(first_dir, ignore_errors=True)
    return replace(second, self_trained=len(pseudo.texts))


def _record_refit(out: Path, held_out: TeacherTrainResult, dev_rows: int) -> None:
    """The refit teacher's manifest: `refit.held_out`, the first fit's dev figures (the refit one saw
    the dev rows), and `result` with them, so that what reads the teacher's dev accuracy reads these."""
    manifest = read_manifest(out)
    record = {"epoch": held_out.best_epoch, "dev_accuracy": held_out.dev_accuracy, "dev_rows": dev_rows}
    manifest["refit"] = {"held_out": record | {"dev_macro_f1": held_out.dev_macro_f1}}
    manifest["result"] |= {"dev_accuracy": held_out.dev_accuracy, "dev_macro_f1": held_out.dev_macro_f1}
    atomic_write_json(out / MANIFEST_NAME, manifest)


def _train_with_torch(
    settings: TeacherTrainSettings, *, model, train, out, dev, text_column, label_column, progress, on_epoch,
    fit_all: bool = False, pseudo: LabeledData | None = None,
) -> TeacherTrainResult:  # fmt: skip
    """`train_teacher` with backend="torch": `out` is written whole, from rank 0. `fit_all`: the dev rows
    train too (a refit; its dev figures are then measured on rows it learned). `pseudo`: rows added to
    the training split (self-training's pseudo-labels)."""
    epochs, min_steps, batch_size = settings.epochs, settings.min_steps, settings.batch_size
    learning_rate, max_length, seed = settings.learning_rate, settings.max_length, settings.seed
    weight_decay, warmup_ratio, grad_accum = settings.weight_decay, settings.warmup_ratio, settings.grad_accum
    max_grad_norm, trust_remote_code = settings.max_grad_norm, settings.trust_remote_code
    freeze_embeddings, freeze_layers = settings.freeze_embeddings, settings.freeze_layers
    placement = torch_placement(settings.device)
    dist = init_ranks("nccl" if placement.device == "cuda" else "gloo")
    torch_device = torch.device(f"cuda:{dist.local_rank}" if placement.device == "cuda" else placement.device)
    if placement.device == "cuda":
        torch.cuda.set_device(torch_device)

    train_data, dev_data, label_map = load_splits(
        train, dev, dev_fraction=settings.dev_fraction, seed=seed, text_column=text_column, label_column=label_column
    )
    if fit_all:
        train_data = with_dev(train_data, dev_data)
    if pseudo is not None:
        train_data = with_dev(train_data, pseudo)
    torch.manual_seed(seed)
    transformers_progress(progress and dist.main)
    net, tokenizer = load_for_training(
        model, label_map.labels, trust_remote_code=trust_remote_code, progress=progress and dist.main
    )
    if max_length is None:
        max_length = auto_max_length(tokenizer, train_data.texts)
    max_length = min(max_length, getattr(net.config, "max_position_embeddings", max_length))
    if freeze_embeddings is None:
        freeze_embeddings = table_is_most(
            net.get_input_embeddings().weight.numel(), sum(p.numel() for p in net.parameters())
        )
    if freeze_embeddings:
        net.get_input_embeddings().weight.requires_grad_(False)
    if freeze_layers:
        freeze_bottom(net, freeze_layers)
    net.to(torch_device)

    def encode(texts):
        ids = tokenizer(list(texts), truncation=True, max_length=max_length)["input_ids"]
        return [np.asarray(x, dtype=np.int32) for x in ids]

    train_ids, dev_ids = encode(train_data.texts), encode(dev_data.texts)
    train_y, dev_y = label_map.encode(train_data.labels), label_map.encode(dev_data.labels)
    pad_id = tokenizer.pad_token_id or 0
    if dist.main:
        specials = set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}
        warn_unknown(unknown_share(train_ids, tokenizer.unk_token_id, specials), f"{train} ({model}'s tokenizer)")

    settings = resolve_auto(settings, len(train_ids), len(dev_ids))
    last = settings.select == "last"
    probe, start_state = None, None
    if settings.head == "probe" and not has_trained_head(model, label_map.labels):
        # LP-FT: mean pooling, the head fitted as a linear probe on the frozen features (before DDP wraps
        # the model: the unused pooler is frozen first)
        use_classifier_pooling(net, "mean")
        start = time.perf_counter()
        features = pooled_features(net, train_ids, pad_id=pad_id, device=torch_device, batch_size=batch_size * 2)
        weight, bias = fit_linear_head(features, train_y, len(label_map))
        with torch.no_grad():
            net.classifier.weight.copy_(torch.from_numpy(weight).to(torch_device))
            net.classifier.bias.copy_(torch.from_numpy(bias).to(torch_device))
        probe = (features, weight, bias, start)
        if settings.blend < 1.0:  # the probe's weights, which a blended teacher mixes back in
            start_state = {n: p.detach().clone() for n, p in net.named_parameters() if p.requires_grad}

    model_for_step = net
    if dist.world > 1:
        model_for_step = DistributedDataParallel(
            net, device_ids=[dist.local_rank] if placement.device == "cuda" else None
        )

    steps_per_epoch = math.ceil(len(train_ids) / (batch_size * dist.world) / grad_accum)
    epochs = epochs_for(epochs, min_steps, steps_per_epoch)
    total_steps = max(1, steps_per_epoch * epochs)
    optimizer, scheduler = _optimizer(net, learning_rate, weight_decay, warmup_ratio, total_steps)
    autocast_dtype = getattr(torch, placement.autocast_dtype) if placement.autocast_dtype else None
    scaler = torch.amp.GradScaler("cuda") if placement.needs_grad_scaler else None

    staging = None
    if dist.main:
        remove_stale_staging(out)  # what a killed run left (a live run's is kept)
        staging = staging_dir(out)
    best = {"epoch": -1, "accuracy": -1.0, "macro_f1": -1.0}
    seen, train_seconds, step = 0, 0.0, 0
    if probe is not None:  # epoch 0: the linear probe, on dev
        pred = predict_ids(net, dev_ids, pad_id=pad_id, device=torch_device, batch_size=batch_size * 2)
        metrics = probe_metrics(*probe, train_y, pred, dev_y, len(label_map))
        if dist.main:
            best = {"epoch": 0, "accuracy": metrics["dev_accuracy"], "macro_f1": metrics["dev_macro_f1"]}
            _epoch_done(staging, metrics, net, tokenizer, best_now=not last, on_epoch=on_epoch)
    lengths = np.array([len(x) for x in train_ids])
    for epoch in range(epochs):
        batches = bucketed_batches(lengths, batch_size, seed=seed, epoch=epoch)
        batches = batches[: len(batches) // dist.world * dist.world][dist.rank :: dist.world] or batches[:1]
        model_for_step.train()
        start = time.perf_counter()
        loss_sum = 0.0
        bar = progress_bar(
            len(batches), desc=f"epoch {epoch + 1}/{epochs}", unit="batch", enabled=progress and dist.main
        )
        for i, batch in enumerate(batches):
            input_ids, mask = collate([train_ids[j] for j in batch], pad_id=pad_id)
            inputs = {
                "input_ids": torch.from_numpy(input_ids).long().to(torch_device),
                "attention_mask": torch.from_numpy(mask).long().to(torch_device),
                "labels": torch.from_numpy(train_y[batch]).long().to(torch_device),
            }
            with torch.autocast(device_type="cuda", dtype=autocast_dtype, enabled=autocast_dtype is not None):
                loss = model_for_step(**inputs).loss / grad_accum
            value = loss.item() * grad_accum
            if not math.isfinite(value):
                _stop_bad_loss(value, step + 1, epoch + 1, out, staging, learning_rate)
            (scaler.scale(loss) if scaler else loss).backward()
            if (i + 1) % grad_accum == 0 or i + 1 == len(batches):
                step += 1
                if scaler:
                    scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(net.parameters(), max_grad_norm)
                if scaler:
                    scaler.step(optimizer)
                    scaler.update()
                else:
                    optimizer.step()
                scheduler.step()
                optimizer.zero_grad(set_to_none=True)
            loss_sum += value
            seen += len(batch) * dist.world
            if bar is not None:
                elapsed = train_seconds + time.perf_counter() - start
                bar.set_postfix(loss=f"{loss_sum / (i + 1):.4f}", samples_s=f"{seen / max(elapsed, 1e-9):.1f}")
                bar.update()
        if bar is not None:
            bar.close()
        train_seconds += time.perf_counter() - start
        with blended(net, start_state, settings.blend):  # the teacher as it would be written
            pred = predict_ids(net, dev_ids, pad_id=pad_id, device=torch_device, batch_size=batch_size * 2)
        metrics = {
            "epoch": epoch + 1,
            "train_loss": loss_sum / max(1, len(batches)),
            "dev_accuracy": accuracy(pred, dev_y),
            "dev_macro_f1": macro_f1(pred, dev_y, len(label_map)),
            "learning_rate": scheduler.get_last_lr()[0],
            "samples_per_second": seen / train_seconds,
        }
        if dist.main:
            if last:
                better = epoch == epochs - 1
            else:
                better = (metrics["dev_accuracy"], metrics["dev_macro_f1"]) > (best["accuracy"], best["macro_f1"])
            if better:
                best = {"epoch": epoch + 1, "accuracy": metrics["dev_accuracy"], "macro_f1": metrics["dev_macro_f1"]}
            with blended(net, start_state if better else None, settings.blend):
                _epoch_done(staging, metrics, net, tokenizer, best_now=better, on_epoch=on_epoch)

    result = TeacherTrainResult(
        str(out),
        best["epoch"],
        best["accuracy"],
        best["macro_f1"],
        majority_accuracy(train_y, dev_y),
        seen / max(train_seconds, 1e-9),
        placement.device,
        dist.world,
        epochs,
    )
    if dist.main:
        _finish(staging, out, model=model, train=train, dev=dev, labels=label_map.labels, max_length=max_length,
                settings=settings, freeze_embeddings=freeze_embeddings, backend="torch",
                autocast=placement.autocast_dtype, result=result)  # fmt: skip
    del net, model_for_step, optimizer, scheduler
    _empty_cache(placement.device)
    dist.barrier()
    return result


@contextmanager
def blended(net, start: dict | None, share: float):
    """Inside, `net`'s trainable weights are `share` of their own plus the rest of `start`'s, the
    weights it started from (WiSE-FT: the fine-tuned model and the linear probe it began as, mixed);
    back as they were on leaving. No-op when `start` is None."""
    if start is None or share >= 1.0:
        yield
        return
    params = dict(net.named_parameters())
    current = {n: params[n].detach().clone() for n in start}
    with torch.no_grad():
        for n, value in start.items():
            params[n].mul_(share).add_(value, alpha=1.0 - share)
    try:
        yield
    finally:
        with torch.no_grad():
            for n, value in current.items():
                params[n].copy_(value)


def _epoch_done(staging: Path, metrics: dict, net, tokenizer, *, best_now: bool, on_epoch) -> None:
    """Rank 0: the epoch's metrics line; the model into staging when it is the best so far."""
    with open(staging / METRICS_NAME, "a", encoding="utf-8") as f:
        f.write(json.dumps(metrics) + "\n")
    if best_now:
        net.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        ensure_vocab_txt(staging)
    if on_epoch is not None:
        on_epoch(metrics)


def pooled_features(net, ids: list[np.ndarray], *, pad_id: int, device, batch_size: int = 64) -> np.ndarray:
    """The head's input (net.bert's pooler output) for every row, in order, eval mode, no gradient."""
    was_training = net.training
    net.eval()
    out = np.zeros((len(ids), net.config.hidden_size), np.float32)
    with torch.no_grad():
        for batch in bucketed_batches(np.array([len(x) for x in ids]), batch_size, shuffle=False):
            input_ids, mask = collate([ids[j] for j in batch], pad_id=pad_id)
            hidden = net.bert(
                input_ids=torch.from_numpy(input_ids).long().to(device),
                attention_mask=torch.from_numpy(mask).long().to(device),
            )
            out[batch] = hidden.pooler_output.float().cpu().numpy()
    net.train(was_training)
    return out


def probe_metrics(features, weight, bias, start: float, train_y, dev_pred, dev_y, classes: int) -> dict:
    """Epoch 0's metrics line: the linear probe's training cross-entropy and its dev scores."""
    return {
        "epoch": 0,
        "train_loss": probe_loss(features, weight, bias, train_y),
        "dev_accuracy": accuracy(dev_pred, dev_y),
        "dev_macro_f1": macro_f1(dev_pred, dev_y, classes),
        "learning_rate": 0.0,
        "samples_per_second": len(features) / max(time.perf_counter() - start, 1e-9),
    }


def _train_with_mlx(
    settings: TeacherTrainSettings, *, model, train, out, dev, text_column, label_column, progress, on_epoch,
    fit_all: bool = False, pseudo: LabeledData | None = None,
) -> TeacherTrainResult:  # fmt: skip
    """`train_teacher` with backend="mlx" (teacher/train_mlx.py): one process, a local or built-in base."""
    if init_ranks().world > 1:
        raise TeacherError(
            "the MLX backend trains in one process; this run was started by torchrun",
            "run it without torchrun, or pass --backend torch",
        )
    base = Path(resolve_model(model, progress=progress)).expanduser()
    if not base.is_dir():
        raise TeacherError(
            f"the MLX backend fine-tunes a local model directory or a built-in teacher, and {model} is neither",
            "download it first (its directory then works here), or pass --backend torch",
        )
    config = check_local_model(base)
    check_tokenizer_files(base)
    check_freeze_layers(settings.freeze_layers, config["num_hidden_layers"])
    train_data, dev_data, label_map = load_splits(
        train,
        dev,
        dev_fraction=settings.dev_fraction,
        seed=settings.seed,
        text_column=text_column,
        label_column=label_column,
    )
    if fit_all:
        train_data = with_dev(train_data, dev_data)
    if pseudo is not None:
        train_data = with_dev(train_data, pseudo)
    existing = head_labels(config)
    if existing is not None and existing != label_map.labels:
        raise ModelError(
            f"the model's labels {existing} differ from the data's labels {label_map.labels}",
            "start from the base model, or use data with the model's labels",
        )
    tokenizer = load_tokenizer(base)
    max_length = settings.max_length
    if max_length is None:
        max_length = length_for([len(x) for x in tokenizer.encode_batch(train_data.texts, max_length=AUTO_LENGTHS[-1])])
    max_length = min(max_length, config.get("max_position_embeddings", max_length))

    def encode(texts):
        return [np.asarray(x, dtype=np.int32) for x in tokenizer.encode_batch(list(texts), max_length=max_length)]

    train_ids, dev_ids = encode(train_data.texts), encode(dev_data.texts)
    train_y, dev_y = label_map.encode(train_data.labels), label_map.encode(dev_data.labels)
    warn_unknown(unknown_share(train_ids, tokenizer.unk_id, tokenizer.special_ids), f"{train} ({model}'s tokenizer)")
    freeze_embeddings = settings.freeze_embeddings
    if freeze_embeddings is None:
        table = config["vocab_size"] * (config.get("embedding_size") or config["hidden_size"])
        freeze_embeddings = table_is_most(table, table + encoder_weights(config))
    remove_stale_staging(out)
    staging = staging_dir(out)
    metrics_file = staging / METRICS_NAME

    def epoch_done(metrics: dict) -> None:
        line = {
            "epoch": metrics["epoch"],
            "train_loss": metrics["train_ce"],
            "dev_accuracy": metrics["dev_accuracy"],
            "dev_macro_f1": metrics["dev_macro_f1"],
            "samples_per_second": metrics["samples_per_second"],
        }
        with open(metrics_file, "a", encoding="utf-8") as f:
            f.write(json.dumps(line) + "\n")
        if on_epoch is not None:
            on_epoch(line)

    steps_per_epoch = math.ceil(len(train_ids) / settings.batch_size / settings.grad_accum)
    epochs = epochs_for(settings.epochs, settings.min_steps, steps_per_epoch)
    settings = resolve_auto(settings, len(train_ids), len(dev_ids))
    outcome = train_mlx(
        base=base,
        labels=label_map.labels,
        train_ids=train_ids,
        train_y=train_y,
        dev_ids=dev_ids,
        dev_y=dev_y,
        pad_id=tokenizer.pad_id,
        max_length=max_length,
        staging=staging,
        freeze_embeddings=freeze_embeddings,
        progress=progress,
        on_epoch=epoch_done,
        probe_head=settings.head == "probe" and not has_trained_head(model, label_map.labels),
        keep_last=settings.select == "last",
        blend=settings.blend,
        **replace(settings, epochs=epochs).kwargs(*OPTIMIZATION, "seed", "device", "freeze_layers"),
    )
    result = TeacherTrainResult(
        str(out),
        outcome.best_epoch,
        outcome.dev_accuracy,
        outcome.dev_macro_f1,
        majority_accuracy(train_y, dev_y),
        outcome.samples_per_second,
        outcome.device,
        1,
        epochs,
    )
    _finish(staging, out, model=model, train=train, dev=dev, labels=label_map.labels, max_length=max_length,
            settings=settings, freeze_embeddings=freeze_embeddings, backend="mlx", autocast=None,
            result=result)  # fmt: skip
    return result


def with_dev(train: LabeledData, dev: LabeledData) -> LabeledData:
    """The training rows and the dev rows together (a refit; or the pseudo-labeled rows), in that order."""
    return LabeledData(train.texts + dev.texts, train.labels + dev.labels, source=train.source)


def encoder_weights(config: dict) -> int:
    """About how many weights a BERT config's blocks hold (the classifier's few aside)."""
    hidden, inner, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    return layers * (4 * hidden * hidden + 2 * hidden * inner)


def _finish(
    staging: Path, out: Path, *, model, train, dev, labels, max_length, settings: TeacherTrainSettings,
    freeze_embeddings: bool, backend: str, autocast: str | None, result: TeacherTrainResult,
) -> None:  # fmt: skip
    """The manifest into `staging` (the data, and the settings as resolved), then `staging` renamed into
    place as `out`."""
    write_manifest(
        staging,
        "teacher",
        base_model=str(model),
        labels=labels,
        max_length=max_length,
        data={
            "train": file_fingerprint(train),
            "dev": file_fingerprint(dev) if dev else None,
            "dev_fraction": None if dev else settings.dev_fraction,
            "seed": settings.seed,
        },
        hyperparameters={
            **settings.kwargs(
                *OPTIMIZATION, "min_steps", "freeze_layers", "head", "select", "refit", "blend", "self_train"
            ),
            "epochs_run": result.epochs,
            "freeze_embeddings": freeze_embeddings,
            "backend": backend,
            "autocast": autocast,
        },
        result=asdict(result),
    )
    if out.exists():
        shutil.rmtree(out)
    os.replace(staging, out)


def _stop_bad_loss(value: float, step: int, epoch: int, out: Path, staging: Path | None, learning_rate: float):
    """A NaN/inf loss: every later step would only spread it. Drop the unfinished teacher, leave `out` as it was."""
    if staging is not None:
        shutil.rmtree(staging, ignore_errors=True)
    raise TeacherError(
        f"step {step} (epoch {epoch}): loss went bad (loss={value}); training stopped and {out} is left as it was",
        f"lower --learning-rate (it was {learning_rate:g}), or check the data and the base model's weights",
    )


def _optimizer(net, learning_rate, weight_decay, warmup_ratio, total_steps):

    decay, no_decay = [], []
    for name, param in net.named_parameters():
        if not param.requires_grad:
            continue
        (no_decay if param.ndim < 2 or "LayerNorm" in name else decay).append(param)
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=learning_rate
    )
    warmup = int(total_steps * warmup_ratio)

    def schedule(step: int) -> float:  # linear warmup, then linear decay to 0
        if step < warmup:
            return (step + 1) / (warmup + 1)
        return max(0.0, (total_steps - step) / max(1, total_steps - warmup))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)


def predict_ids(net, ids: list[np.ndarray], *, pad_id: int, device, batch_size: int = 64) -> np.ndarray:
    """Argmax labels for pre-tokenized inputs, in their original order."""

    net.eval()
    pred = np.zeros(len(ids), dtype=np.int32)
    order = bucketed_batches(np.array([len(x) for x in ids]), batch_size, shuffle=False)
    with torch.no_grad():
        for batch in order:
            input_ids, mask = collate([ids[j] for j in batch], pad_id=pad_id)
            logits = net(
                input_ids=torch.from_numpy(input_ids).long().to(device),
                attention_mask=torch.from_numpy(mask).long().to(device),
            ).logits
            pred[batch] = logits.argmax(-1).cpu().numpy()
    return pred


def _empty_cache(device_kind: str) -> None:
    """Hand accelerator memory back once the model is dropped (a Mac shares it with everything)."""

    gc.collect()
    if device_kind == "cuda":
        torch.cuda.empty_cache()
    elif device_kind == "mps":
        torch.mps.empty_cache()
