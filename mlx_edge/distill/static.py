"""`distill_static(...)`: teacher + labeled text (+ a targets cache) -> a static-embedding student.

The student (models/static.py) is a token table, mean-pooled, and the classifier head. Its table
starts model2vec style from the teacher (distill/static_table.py); then table and head learn the
teacher's soft labels (KD) and the hard labels (CE) in the same compiled loop as a BERT student
(distill/loop.py: warmup/decay AdamW, best dev epoch kept, NaN guard). The vocabulary is pruned as
for a BERT student (models/prune.py) and the student's tokenizer files are the pruned ones, so the
app tokenizes exactly as it does for a BERT bundle.

An interrupted run starts over (a run takes a minute or two, most of it the teacher's states).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, replace
from pathlib import Path

import mlx.core as mx
import numpy as np

from mlx_edge.data import LabelMap
from mlx_edge.distill.api import (
    DistillReport,
    check_run_inputs,
    data_record,
    new_student_plan,
    run_report,
    student_rows,
    teacher_confidence,
    teacher_held_out,
)
from mlx_edge.distill.config import Schedule, with_select
from mlx_edge.distill.loop import LoopConfig, run_loop
from mlx_edge.distill.static_settings import STATIC
from mlx_edge.distill.static_table import (
    alone_states,
    context_states,
    initial_table,
    live_hidden,
    sif_weights,
    with_context,
)
from mlx_edge.distill.step import Trainable
from mlx_edge.errors import DistillError, TargetsError
from mlx_edge.manifest import read_manifest, write_manifest
from mlx_edge.metrics import accuracy, macro_f1, softening_temperature
from mlx_edge.models.checkpoint import load_model, save_model
from mlx_edge.models.inference import predict_ids
from mlx_edge.models.prune import write_pruned_tokenizer
from mlx_edge.models.static import MODEL_TYPE, StaticConfig, StaticModel
from mlx_edge.models.tokenizer import load_tokenizer
from mlx_edge.runtime.devices import mlx_device
from mlx_edge.settings import DISTILL
from mlx_edge.targets import TargetsCache, text_hash
from mlx_edge.teacher.source import file_hash_of_weights, tokenizer_hash

STUDENT = MODEL_TYPE  # `--student static`


LAYER_TERMS = ("hidden", "attention", "embedding")  # the losses a token table has nothing to match


def static_loop(base: LoopConfig | None = None, **changes) -> LoopConfig:
    """The loop a static student trains with: `base` (distill's defaults when None) with STATIC's learning
    rate and epochs, no step budget (a token table learns slower: its best dev epoch came at 5-9) and no layer
    losses or two-stage phase (distill's defaults are a transformer's), then `changes`."""
    base = base or LoopConfig()
    weights = {**base.weights, **{k: Schedule(0.0) for k in LAYER_TERMS}}
    fixed = {
        "learning_rate": STATIC.learning_rate,
        "epochs": STATIC.epochs,
        "weights": weights,
        "two_stage_epochs": 0,
        "step_budget": 0,
    }
    return replace(base, **{**fixed, **changes})


def distill_static(
    *,
    teacher: Path,
    train: Path,
    out: Path,
    dev: Path | None = None,
    targets: Path | None = None,
    dim: int = STATIC.dim,
    vocab: str = DISTILL.vocab,
    vocab_extra: int = STATIC.vocab_extra,
    freeze_table: bool = False,
    table_from: str = "alone",
    max_length: int | None = DISTILL.max_length,
    loop: LoopConfig | None = None,
    dev_fraction: float = DISTILL.dev_fraction,
    text_column: str | None = None,
    label_column: str | None = None,
    device: str = DISTILL.device,
    force: bool = False,
    progress: bool = True,
    on_step=None,
    on_epoch=None,
    measure_speed: bool = True,
) -> DistillReport:
    """Distill `teacher` into a static student of width `dim` and write it to `out`.

    `vocab`/`vocab_extra`: the kept pieces, as for a BERT student (auto: seen+script).
    `freeze_table`: the table stays as the teacher's embeddings made it; only the head learns.
    `table_from`: "alone" (each piece read alone, model2vec's way) or "context" (the mean of its
    states in the training texts where it occurs: from the cache when it holds the last layer).
    `loop`: None takes STATIC's learning rate and epochs; only the kd and ce losses apply.
    """
    loop = loop or static_loop()
    _check_loop(loop)
    if table_from not in ("alone", "context"):
        raise DistillError(f"table_from {table_from!r} is not alone or context")
    if not 2 <= dim <= 4096:
        raise DistillError(f"static width {dim} is out of range", "use e.g. --static-dim 128 (2 to 4096)")
    teacher, out = Path(teacher), Path(out)
    mlx_device(device)
    check_run_inputs(teacher, out, force, train, dev, targets)
    started = time.perf_counter()
    teacher_model = load_model(teacher, require_head=True)
    labels = teacher_model.config.labels
    rows = student_rows(teacher, train, dev, labels, dev_fraction, loop.seed, text_column, label_column)
    train_data, dev_data, dev = rows.train, rows.dev, rows.dev_path
    loop = with_select(loop, len(dev_data.texts))
    cache = _open_cache(targets, teacher, labels, max_length) if targets is not None else None
    max_length = max_length or (cache.manifest["max_length"] if cache is not None else None)
    max_length = min(
        max_length or (read_manifest(teacher) or {}).get("max_length", 128),
        teacher_model.config.max_position_embeddings,
    )
    tokenizer = load_tokenizer(teacher)

    def encode(tk, texts):
        return [np.asarray(x, np.int32) for x in tk.encode_batch(texts, max_length=max_length)]

    teacher_train_ids, teacher_dev_ids = encode(tokenizer, train_data.texts), encode(tokenizer, dev_data.texts)
    plan = new_student_plan(teacher, train_data.texts, vocab, vocab_extra)
    work = out.with_name(f".{out.name}.work")
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        write_pruned_tokenizer(teacher, work / "tokenizer", plan)
        student_tokenizer = load_tokenizer(work / "tokenizer")
        train_ids = [plan.remap[x] for x in teacher_train_ids]  # the same segmentation, renumbered
        dev_ids = encode(student_tokenizer, dev_data.texts)  # unseen text may split differently, as in the app
        label_map = LabelMap(labels)
        train_y, dev_y = label_map.encode(train_data.labels), label_map.encode(dev_data.labels)
        teacher_logits = (
            _cached_logits(cache, train_data.texts, targets)
            if cache is not None
            else predict_ids(teacher_model, teacher_train_ids, tokenizer.pad_id)[0]
        )

        states = alone_states(teacher_model, plan.keep, tokenizer.cls_id, tokenizer.sep_id)
        if table_from == "context":
            hidden = teacher_hidden(cache, teacher_model, train_data.texts, teacher_train_ids, tokenizer.pad_id)
            states = with_context(states, *context_states(hidden, plan.remap))
        sif = sif_weights(json.loads((teacher / "tokenizer.json").read_text(encoding="utf-8")), plan.keep)
        table = initial_table(states, sif, dim)
        config = StaticConfig(
            vocab_size=len(plan.keep),
            hidden_size=table.shape[1],
            pad_token_id=student_tokenizer.pad_id,
            max_position_embeddings=max_length,
            id2label=dict(enumerate(labels)),
        )
        mx.random.seed(loop.seed)
        model = StaticModel(config)
        model.table.weight = mx.array(table)
        model.classifier.weight = mx.zeros_like(model.classifier.weight)  # the table's scale sets the logits'
        if freeze_table:
            model.table.freeze()
        _, teacher_dev_pred, _ = predict_ids(teacher_model, teacher_dev_ids, tokenizer.pad_id)
        held_out = teacher_held_out(teacher, rows)
        confidence = teacher_confidence(teacher_dev_pred, dev_y, held_out)
        soften = softening_temperature(teacher_logits, confidence) if loop.calibrate and len(dev_y) else 1.0
        teacher_logits = teacher_logits / soften  # an over-confident teacher's, as sure as it is right
        pad = student_tokenizer.pad_id

        def evaluate() -> dict:
            pred = predict_ids(model, dev_ids, pad)[1]
            return {
                "dev_accuracy": accuracy(pred, dev_y),
                "dev_macro_f1": macro_f1(pred, dev_y, len(labels)),
                "teacher_agreement": accuracy(pred, teacher_dev_pred),
            }

        result = run_loop(
            trainable=Trainable(model, teacher_model.config.hidden_size, False, False),
            config=loop,
            layer_map={},
            terms_on={k for k, w in loop.weights.items() if w.ever_on},
            train_ids=train_ids,
            train_labels=train_y,
            pad_id=pad,
            max_width=max_length,
            targets=lambda rows, input_ids, mask: {"logits": teacher_logits[rows]},
            evaluate=evaluate,
            save_best=lambda: save_model(model, work / "best", tokenizer_from=work / "tokenizer"),
            work=work,
            progress=progress,
            on_step=on_step,
            on_epoch=on_epoch,
        )
        report = run_report(
            out=out,
            work=work,
            teacher=teacher,
            teacher_model=teacher_model,
            teacher_ids=teacher_dev_ids,
            teacher_pad=tokenizer.pad_id,
            teacher_pred=teacher_dev_pred,
            student_ids=dev_ids,
            student_pad=pad,
            dev_y=dev_y,
            result=result,
            resumed=False,
            dev_source=rows.dev_source,
            measure_speed=measure_speed,
            soft_label_temperature=soften,
            teacher_held_out=held_out,
        )
        _finish(
            work,
            out,
            report,
            teacher=teacher,
            train=train,
            dev=dev,
            split=rows.split,
            targets=targets,
            max_length=max_length,
            dim=dim,
            freeze_table=freeze_table,
            table_from=table_from,
            vocab=plan.to_dict(),
            loop=loop,
            seconds=time.perf_counter() - started,
        )
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    mx.clear_cache()
    return report


def _check_loop(loop: LoopConfig) -> None:
    """A static student has no layers: only the prediction losses can teach it."""
    layered = [k for k in LAYER_TERMS if loop.weights[k].ever_on]
    if layered:
        raise DistillError(
            f"--{layered[0]}-weight has nothing to match in a static student (it has no layers)",
            "drop it: a static student learns from the kd and ce losses only",
        )
    if loop.two_stage_epochs:
        raise DistillError("--two-stage trains layers a static student does not have", "drop --two-stage")


def _open_cache(targets: Path, teacher: Path, labels: list[str], max_length: int | None) -> TargetsCache:
    cache = TargetsCache.open(targets)
    cache.check_compatible(
        tokenizer_hash=tokenizer_hash(teacher), max_length=max_length or cache.manifest["max_length"], labels=labels
    )
    if cache.manifest["teacher_hash"] != file_hash_of_weights(teacher):
        raise TargetsError(
            f"targets in {targets} were made by another teacher (weights differ)",
            "label again with this teacher, or pass the teacher that made them",
        )
    return cache


def _cached_logits(cache: TargetsCache, texts: list[str], targets: Path) -> np.ndarray:
    """The teacher's logits for each training text, in order (only logits: a static student has no layers)."""
    row_of = cache.row_of_hash()
    rows = [row_of.get(text_hash(t)) for t in texts]
    missing = sum(r is None for r in rows)
    if missing:
        raise DistillError(
            f"{missing} of {len(texts)} training texts are not in the targets cache {targets}",
            "label the same training file(s): mlx-edge teacher label --data ...",
        )
    return cache.load(("logits",))["logits"][np.array(rows)]


def teacher_hidden(cache: TargetsCache | None, teacher, texts: list[str], teacher_ids: list[np.ndarray], pad_id: int):
    """The teacher's last hidden states of the training texts: from the targets cache when it holds
    that layer (labelled with --hidden-layers ...,N), else computed (the longest part of a run)."""
    last = teacher.config.num_hidden_layers
    if cache is None or last not in cache.available()[0]:
        yield from live_hidden(teacher, teacher_ids, pad_id)
        return
    row_of = cache.row_of_hash()
    rows = np.array([row_of[text_hash(t)] for t in texts])  # every text is there: _cached_logits checked
    for start in range(0, len(texts), 256):
        batch = teacher_ids[start : start + 256]
        width = max(len(x) for x in batch)
        yield batch, cache.gather(rows[start : start + 256], width, [f"hidden.{last}"])[f"hidden.{last}"]


def _finish(work: Path, out: Path, report: DistillReport, **inputs) -> None:
    best = work / "best"
    shutil.copyfile(work / "metrics.jsonl", best / "metrics.jsonl")
    (best / "report.json").write_text(json.dumps(asdict(report), indent=2) + "\n")
    loop = inputs.pop("loop")
    write_manifest(
        best,
        "student",
        labels=json.loads((best / "config.json").read_text())["id2label"],
        teacher=str(inputs["teacher"]),
        max_length=inputs["max_length"],
        student=STUDENT,
        init="teacher states (model2vec style: PCA, SIF weights)",
        static={"dim": inputs["dim"], "freeze_table": inputs["freeze_table"], "table_from": inputs["table_from"]},
        vocab=inputs["vocab"],
        data=data_record(inputs["train"], inputs["dev"], inputs["split"]),
        targets=str(inputs["targets"]) if inputs["targets"] else None,
        loop={**asdict(loop), "weights": {k: asdict(v) for k, v in loop.weights.items()}},
        seconds=inputs["seconds"],
        report=asdict(report),
    )
    if out.exists():
        shutil.rmtree(out)
    os.replace(best, out)
    shutil.rmtree(work)
