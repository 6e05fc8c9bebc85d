"""`distill(...)`: teacher + labeled text (+ a targets cache) → a small MLX student, as an HF directory.

Reading a cache imports no PyTorch: the teacher (needed for dev agreement and the speed report,
and for live targets without a cache) runs in the MLX BERT.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import mlx.core as mx
import numpy as np

from mlx_edge.data import LabeledData, LabelMap, collate, read_labeled, split_dev, warn_overlap
from mlx_edge.datasets import WORDNET_SENTENCES, broad_english
from mlx_edge.distill.config import with_select
from mlx_edge.distill.factorize import piece_weights, with_embedding_size
from mlx_edge.distill.loop import LoopConfig, Schedule, run_loop
from mlx_edge.distill.providers import cache_targets, live_targets, to_teacher_ids
from mlx_edge.distill.quant import fake_quantize_model, student_spec, to_quantized
from mlx_edge.distill.shrink import ShrinkPlan, check_shrinkable, plan_shrink, selection_matrix
from mlx_edge.distill.step import Trainable
from mlx_edge.distill.student import init_student, parse_layer_map, student_config
from mlx_edge.errors import DataError, DistillError, MlxEdgeWarning, TargetsError, WorkMismatch
from mlx_edge.fileio import fingerprint, refuse_overwriting_inputs, sha256_file
from mlx_edge.manifest import MANIFEST_NAME, file_fingerprint, held_out_accuracy, read_manifest, write_manifest
from mlx_edge.metrics import (
    accuracy,
    flat_soft_labels_note,
    macro_f1,
    majority_accuracy,
    smoothed_accuracy,
    smoothed_share,
    softening_temperature,
    softmax,
    trivial_note,
)
from mlx_edge.models.checkpoint import load_config, load_model, save_model
from mlx_edge.models.inference import compare_speed, predict_ids
from mlx_edge.models.prune import VocabPlan, plan_matching, plan_vocab, write_pruned_tokenizer
from mlx_edge.models.quantized import cpu_float, parameter_count
from mlx_edge.models.tokenizer import load_tokenizer, unknown_share, warn_unknown
from mlx_edge.runtime.cpu_streams import resolve_shards
from mlx_edge.runtime.devices import mlx_device
from mlx_edge.runtime.distributed import mlx_group
from mlx_edge.settings import DISTILL, NEW_STUDENT_VOCAB_EXTRA
from mlx_edge.targets import TargetsCache
from mlx_edge.teacher.source import check_local_model, file_hash_of_weights, file_state, head_labels, tokenizer_hash
from mlx_edge.transfer import NO_LABEL, transfer_set

# The vocabulary a new student keeps by default (see docs/distill.md "Vocabulary pruning" for the trade-off).
PRUNE_DEFAULT = "seen+script"
SPEED_PAIRS = 3  # interleaved (student, teacher) passes the speed-up is the median ratio of; each costs a teacher pass
SPEED_SAMPLE = 256  # dev rows the teacher/student speed-up is timed on (interleaved passes: compare_speed)


@dataclass
class DistillReport:
    out_dir: str
    teacher_dev_accuracy: float
    student_dev_accuracy: float
    retained: float  # student / teacher dev accuracy
    agreement: float  # share of dev texts where student and teacher pick the same label
    teacher_parameters: int
    student_parameters: int
    teacher_file_bytes: int
    student_file_bytes: int
    teacher_samples_per_second: float
    student_samples_per_second: float
    speedup: float
    best_epoch: int  # the epoch kept: the best on dev, or the last (`kept`)
    epochs_run: int
    steps: int
    train_samples_per_second: float
    stopped_early: bool
    resumed: bool
    dev: str = ""  # where the dev rows came from: a file, or a split of the training file
    transfer_rows: int = 0  # unlabeled training rows (--unlabeled): KD and the other teacher terms only
    soft_label_temperature: float = 1.0  # the teacher's logits were divided by it (calibrate; 1: as they were)
    kept: str = "best"  # "best" on dev or "last": the loop's select, "auto" decided
    # one line each: a teacher or student no better than chance or the majority label, flat soft labels
    notes: list[str] = field(default_factory=list)


def distill(
    *,
    teacher: Path,
    train: Path,
    out: Path,
    dev: Path | None = None,
    targets: Path | None = None,
    unlabeled: list[Path] | None = None,
    unlabeled_column: str | None = None,
    held_out: list[str] | None = None,
    student: str = DISTILL.student,
    init: str = DISTILL.init,
    vocab: str = DISTILL.vocab,
    vocab_extra: int | None = DISTILL.vocab_extra,
    freeze_embeddings: bool = DISTILL.freeze_embeddings,
    embedding_size: int | None = DISTILL.embedding_size,
    quantize: str | None = DISTILL.quantize,
    block_size: int = DISTILL.block_size,
    init_layers: list[int] | None = None,
    layer_map: str | None = DISTILL.layer_map,
    max_length: int | None = DISTILL.max_length,
    loop: LoopConfig | None = None,
    dev_fraction: float = DISTILL.dev_fraction,
    text_column: str | None = None,
    label_column: str | None = None,
    device: str = DISTILL.device,
    force: bool = False,
    restart: bool = False,
    progress: bool = True,
    on_step: Callable | None = None,
    on_epoch: Callable | None = None,
    measure_speed: bool = True,
) -> DistillReport | None:
    """Distill `teacher` into a `student` (preset, config JSON or directory) and write it to `out`.

    Under `mlx.launch` (several processes) the batches are spread over the processes (data parallel,
    distill/loop.py); rank 0 writes `out` and returns the report, the other ranks return None.

    `vocab`: the student's vocabulary (models/prune.py): auto (seen+script for a new student, its
    own for a continued one), seen, seen+chars, seen+script, or all (the teacher's, unpruned);
    `vocab_extra` more of the teacher's pieces in the data's scripts (a new student only): for the English rows'
    share the ones WordNet's example sentences use most, the rest the likeliest (models/prune.py).
    `freeze_embeddings`: the word-embedding table stays as initialized, so rows the training data never
    reaches (extra pieces) stay in the same space as the rest.
    `embedding_size`: factorize the word embeddings to this width (factorize.py: a frequency-weighted
    SVD of the table the student would have had, or of a continued student's own table).
    `quantize` ("int8", "int4"): train with the weights quantized in blocks of `block_size` as the
    app will hold them (quantization-aware distillation, distill/quant.py); the student is saved quantized.
    `measure_speed`: time the student against the teacher for the report (about 15 s on a CPU).
    `unlabeled`: files of text with no label, added to the training rows as a transfer set (transfer.py:
    learned from the teacher alone; a text equal to a dev text or one of `held_out`, e.g. a test set's,
    is dropped with a warning).
    """

    loop = loop or LoopConfig()
    teacher, out = Path(teacher), Path(out)
    mlx_device(device)
    check_run_inputs(teacher, out, force, train, dev, targets, student, *(unlabeled or ()))
    teacher_model = load_model(teacher, require_head=True)
    labels = teacher_model.config.labels
    label_map = LabelMap(labels)

    rows = student_rows(teacher, train, dev, labels, dev_fraction, loop.seed, text_column, label_column)
    train_data, dev_data, dev = rows.train, rows.dev, rows.dev_path
    extra = (
        transfer_set(
            [Path(p) for p in unlabeled],
            labeled=train_data.texts,
            held_out=dev_data.texts + list(held_out or ()),
            text_column=unlabeled_column,
        )
        if unlabeled
        else None
    )
    train_texts = train_data.texts + (extra.texts if extra else [])
    loop = with_select(loop, len(dev_data.texts))

    cache = None
    if targets is not None:
        cache = TargetsCache.open(targets)
        max_length = max_length or cache.manifest["max_length"]
        cache.check_compatible(tokenizer_hash=tokenizer_hash(teacher), max_length=max_length, labels=labels)
        if cache.manifest["teacher_hash"] != file_hash_of_weights(teacher):
            raise TargetsError(
                f"targets in {targets} were made by another teacher (weights differ)",
                "label again with this teacher, or pass the teacher that made them",
            )
    max_length = min(
        max_length or (read_manifest(teacher) or {}).get("max_length", 128),
        teacher_model.config.max_position_embeddings,
    )
    tokenizer = load_tokenizer(teacher)

    def encode(texts):
        return [np.asarray(x, dtype=np.int32) for x in tokenizer.encode_batch(texts, max_length=max_length)]

    train_ids, dev_ids = encode(train_texts), encode(dev_data.texts)
    train_y, dev_y = label_map.encode(train_data.labels), label_map.encode(dev_data.labels)
    train_y = np.concatenate([train_y, np.full(len(train_texts) - len(train_y), NO_LABEL, np.int32)])
    warn_unknown(
        unknown_share(train_ids, tokenizer.unk_id, tokenizer.special_ids), f"{train} (the teacher's tokenizer)"
    )

    config, source = student_config(student, teacher_model.config)
    if embedding_size is not None:
        config = with_embedding_size(config, embedding_size, source)
    quant = student_spec(quantize, block_size, config, continuing=source is not None)
    if vocab_extra is None:  # a continued student keeps its own vocabulary
        vocab_extra = NEW_STUDENT_VOCAB_EXTRA if source is None else 0
    plan = _vocab_plan(vocab, teacher, source, train_texts, vocab_extra)
    if plan is not None:
        config = replace(config, vocab_size=len(plan.keep), pad_token_id=int(plan.remap[config.pad_token_id]))
    mapping = parse_layer_map(layer_map, config.num_hidden_layers, teacher_model.config.num_hidden_layers)
    terms_on = {k for k, w in loop.weights.items() if w.ever_on}
    provider = (
        cache_targets(cache, train_texts, mapping, terms_on, targets)
        if cache is not None
        else live_targets(teacher_model, mapping, terms_on, resolve_shards(loop.cpu_shards, loop.batch_size))
    )

    if init == "auto":  # cut from the teacher when its shape allows, else its embeddings (PCA: not wider)
        init = _auto_init(config, teacher_model.config)
    shrink = None
    if init == "teacher" and source is None and _narrower(config, teacher_model.config):
        shrink = _plan_shrink(teacher_model, config, init_layers or list(mapping.values()), train_ids, tokenizer.pad_id)

    group = mlx_group()  # under mlx.launch: data parallel, each process in its own work directory
    rank = group.rank() if group is not None else 0
    progress = progress and rank == 0
    work = out.with_name(f".{out.name}.work" + (f"-rank{rank}" if rank else ""))
    settings = fingerprint(
        student, init, init_layers, mapping, max_length, loop, config, vocab, vocab_extra, freeze_embeddings,
        *((quant,) if quant is not None else ()),
    )  # fmt: skip
    inputs = _input_identity(teacher, train, dev, targets, rows.split, unlabeled, unlabeled_column)
    if plan is not None:  # the pieces a checkpoint's table rows are: a plan made otherwise cannot resume it
        inputs["student vocabulary"] = hashlib.sha256(plan.keep.tobytes()).hexdigest()
    setup = fingerprint(settings, inputs)
    resumed = _prepare_work(work, settings, inputs, restart)
    student_tokenizer = teacher
    if plan is not None:  # the student reads its own, pruned, tokenizer; the teacher keeps its own
        student_tokenizer = work / "tokenizer"
        write_pruned_tokenizer(teacher, student_tokenizer, plan)
        train_ids, dev_student_ids = _student_ids(
            student_tokenizer, train_ids, train_texts, dev_data.texts, plan, max_length, terms_on
        )
        provider = to_teacher_ids(provider, plan) if cache is None else provider
    else:
        dev_student_ids = dev_ids
    mx.random.seed(loop.seed)  # the projections (and MLX's default layer init) draw from the global key
    model = init_student(
        config,
        mode="student" if source is not None else init,
        seed=loop.seed,
        teacher=teacher_model,
        teacher_layers=init_layers,
        source=source,
        keep=None if plan is None else plan.keep,
        shrink=shrink,
        row_weights=piece_weights(train_ids, config.vocab_size) if config.embedding_size is not None else None,
    )
    if quant is not None:  # the weights train as the app will hold them
        fake_quantize_model(model, quant)
    trainable = Trainable(model, teacher_model.config.hidden_size, "hidden" in terms_on, "embedding" in terms_on)
    if freeze_embeddings:
        model.bert.embeddings.word_embeddings.freeze()
    if shrink is not None:  # the projections start by putting each kept channel back where it came from
        for proj in (trainable.hidden_proj, trainable.embedding_proj):
            if proj is not None:
                proj.weight = mx.array(selection_matrix(shrink.channels, teacher_model.config.hidden_size))
                proj.bias = mx.zeros_like(proj.bias)

    teacher_logits = _teacher_logits(teacher, teacher_model, dev_ids, tokenizer.pad_id)
    teacher_pred = teacher_logits.argmax(axis=-1)

    student_pad = tokenizer.pad_id if plan is None else int(plan.remap[tokenizer.pad_id])
    soften = 1.0
    held_out = teacher_held_out(teacher, rows)
    if loop.calibrate and len(dev_y):  # the student learns the teacher's logits / soften: as sure as it is right
        confidence = teacher_confidence(teacher_pred, dev_y, held_out)
        soften = softening_temperature(_learned_logits(provider, train_ids, student_pad), confidence)
        provider = _softened(provider, soften) if soften > 1.0 else provider

    def evaluate() -> dict:
        pred = predict_ids(model, dev_student_ids, student_pad)[1]
        return {
            "dev_accuracy": accuracy(pred, dev_y),
            "dev_macro_f1": macro_f1(pred, dev_y, len(labels)),
            "teacher_agreement": accuracy(pred, teacher_pred),
        }

    def save_best() -> None:
        save_model(model if quant is None else to_quantized(model), work / "best", tokenizer_from=student_tokenizer)

    result = run_loop(
        trainable=trainable,
        config=loop,
        layer_map=mapping,
        terms_on=terms_on,
        train_ids=train_ids,
        train_labels=train_y,
        pad_id=student_pad,
        max_width=max_length,
        targets=provider,
        evaluate=evaluate,
        save_best=save_best,
        work=work,
        progress=progress,
        on_step=on_step if rank == 0 else None,
        on_epoch=on_epoch if rank == 0 else None,
        group=group,
    )
    if rank:  # only rank 0 writes the student; the others' weights are the same
        shutil.rmtree(work)
        mx.clear_cache()
        return None

    report = run_report(
        out=out,
        work=work,
        teacher=teacher,
        teacher_model=teacher_model,
        teacher_ids=dev_ids,
        teacher_pad=tokenizer.pad_id,
        teacher_pred=teacher_pred,
        student_ids=dev_student_ids,
        student_pad=student_pad,
        dev_y=dev_y,
        result=result,
        resumed=resumed,
        dev_source=rows.dev_source,
        measure_speed=measure_speed,
        transfer_rows=len(extra.texts) if extra else 0,
        teacher_probs=softmax(teacher_logits),
        train_y=train_y,
        soft_label_temperature=soften,
        teacher_held_out=held_out,
    )
    _finish(
        work,
        out,
        report,
        setup,
        teacher=teacher,
        train=train,
        dev=dev,
        split=rows.split,
        unlabeled=unlabeled,
        targets=targets,
        mapping=mapping,
        loop=loop,
        init=init,
        max_length=max_length,
        student=student,
        vocab=None if plan is None else plan.to_dict(),
    )
    mx.clear_cache()
    return report


def teacher_confidence(pred: np.ndarray, gold: np.ndarray, held_out: tuple[float, int] | None) -> float:
    """How often the teacher is right on new text, for calibration: its smoothed accuracy on the dev
    rows, or, given `held_out` (`teacher_held_out`: rows a refit teacher went on to learn), its first
    fit's on them."""
    if held_out is None:
        return smoothed_accuracy(pred, gold)
    accuracy_there, rows = held_out
    return smoothed_share(accuracy_there * rows, rows)


def teacher_held_out(teacher: Path, rows: StudentRows) -> tuple[float, int] | None:
    """(dev accuracy, dev rows) of a refit teacher's first fit when the student's dev rows are the
    teacher's own (its split, or its dev file by hash): the rows the refit went on to learn. Else None."""
    held = held_out_accuracy(teacher)
    if held is None or rows.split is not None:
        return held
    record = ((read_manifest(Path(teacher)) or {}).get("data") or {}).get("dev")
    same = bool(record) and rows.dev_path is not None and sha256_file(Path(rows.dev_path)) == record.get("sha256")
    return held if same else None


@dataclass(frozen=True)
class StudentRows:
    train: LabeledData
    dev: LabeledData
    dev_path: Path | None  # the dev file read; None for a split of the training file
    dev_source: str  # where the dev rows came from, for the report
    split: tuple[float, int] | None  # the split's (fraction, seed) when cut from the training file


def student_rows(
    teacher: Path, train, dev, labels: list[str], dev_fraction: float, seed: int, text_column=None, label_column=None
) -> StudentRows:
    """The rows a student learns from and is chosen on (the best epoch is the best on dev).

    With no dev file the teacher's choice is reused: its dev file while it still holds the same rows,
    else, when it was trained on a split of this very training file, that split (rows the teacher never
    learned). A split of rows the teacher trained on would choose the epoch on sentences both models
    know, which flatters early epochs: that case is warned about."""
    columns = {"text_column": text_column, "label_column": label_column}
    train_data = read_labeled(train, **columns)
    _check_teacher_knows(train_data, labels, "training")
    split, source = None, None
    if dev is None:
        dev, split, source = _teachers_dev(Path(teacher), Path(train), dev_fraction, seed)
    if dev is not None:
        dev_data = read_labeled(dev, **columns)
        _check_teacher_knows(dev_data, labels, "dev")
        warn_overlap(train_data, dev_data)
        return StudentRows(train_data, dev_data, Path(dev), source or str(dev), None)
    train_data, dev_data = split_dev(train_data, fraction=split[0], seed=split[1])
    return StudentRows(train_data, dev_data, None, source, split)


def data_record(
    train: Path, dev: Path | None, split: tuple[float, int] | None, unlabeled: list[Path] | None = None
) -> dict:
    """The manifest's record of what a student learned from and was chosen on."""
    record = {"train": file_fingerprint(train), "dev": file_fingerprint(dev) if dev else None}
    if unlabeled:
        record["unlabeled"] = [file_fingerprint(Path(p)) for p in unlabeled]
    return record | ({"dev_fraction": split[0], "seed": split[1]} if split else {})


def _teachers_dev(teacher: Path, train: Path, fraction: float, seed: int):
    """(dev file, None, source) or (None, (fraction, seed), source) for a run given no dev file."""
    data = (read_manifest(teacher) or {}).get("data") or {}
    record, same_train = data.get("dev"), (data.get("train") or {}).get("sha256") == sha256_file(train)
    if record and Path(record["path"]).is_file() and sha256_file(Path(record["path"])) == record["sha256"]:
        return Path(record["path"]), None, f"{record['path']} (the teacher's dev file)"
    if same_train and data.get("dev_fraction"):
        split = (float(data["dev_fraction"]), int(data.get("seed", 0)))
        return None, split, f"{split[0]:.0%} of {train} (the teacher's split, seed {split[1]})"
    if same_train:
        warnings.warn(
            MlxEdgeWarning(
                f"the dev rows are cut from {train}, which the teacher trained on: the best epoch is chosen "
                "on sentences both models know; pass --dev (the teacher's dev file) for a fair choice"
            ),
            stacklevel=4,
        )
    return None, (fraction, seed), f"{fraction:.0%} of {train} (seed {seed})"


def _check_teacher_knows(data, labels: list[str], split: str) -> None:
    unknown = sorted(set(data.labels) - set(labels))
    if unknown:
        raise DataError(
            f"{split} file {data.source} has labels the teacher was not trained on: {', '.join(unknown)}",
            f"the teacher knows {', '.join(labels)}: fine-tune a teacher on this label set",
        )


def _auto_init(student, teacher) -> str:
    if _cuttable(student, teacher):
        return "teacher"
    return "embeddings" if student.hidden_size <= teacher.hidden_size else "random"


def _cuttable(student, teacher) -> bool:
    """Whether `--init teacher` can make this student: the teacher's own shape, or one cut from it."""
    if not _narrower(student, teacher):
        return student.num_attention_heads == teacher.num_attention_heads
    try:
        check_shrinkable(student, teacher)
    except DistillError:
        return False
    return True


def _narrower(student, teacher) -> bool:
    return (student.hidden_size, student.intermediate_size) != (teacher.hidden_size, teacher.intermediate_size)


def _plan_shrink(teacher_model, config, layers, teacher_ids, pad_id, rows: int = 256) -> ShrinkPlan:
    """Rank the teacher's parts on a seeded sample of the training texts (shrink.py)."""
    pick = np.random.default_rng(0).permutation(len(teacher_ids))[:rows]
    input_ids, mask = collate([teacher_ids[i] for i in sorted(pick)], pad_id=pad_id)
    return plan_shrink(teacher_model, config, layers, input_ids, mask)


def _vocab_plan(vocab: str, teacher: Path, source: Path | None, texts: list[str], extra: int) -> VocabPlan | None:
    """None: the student reads the teacher's whole vocabulary."""
    if vocab == "all":  # the tokenizer's rows: a table padded past them (e5's 35 rows) has rows no text reaches
        plan = plan_vocab(teacher, [], "all")
        return plan if len(plan.keep) < load_config(teacher).vocab_size else None
    if extra and source is not None:
        raise DistillError("--vocab-extra with a student to continue", "it keeps its own vocabulary: omit it")
    if source is not None:  # continuing a student: its own vocabulary (pruned or not)
        if vocab not in ("auto", "student"):
            raise DistillError(
                f"--vocab {vocab} with a student to continue", "it keeps its own vocabulary: omit --vocab"
            )
        plan = plan_matching(teacher, source)
        return None if len(plan.keep) == plan.full_size else plan
    return new_student_plan(teacher, texts, vocab, extra)


def new_student_plan(teacher: Path, texts: list[str], vocab: str, extra: int) -> VocabPlan:
    """A new student's pruned vocabulary (`vocab` auto: PRUNE_DEFAULT), its English rows' share of the
    `extra` pieces ranked by WordNet's example sentences (models/prune.py)."""
    reference = broad_english(WORDNET_SENTENCES) if extra else []
    return plan_vocab(teacher, texts, PRUNE_DEFAULT if vocab == "auto" else vocab, extra, reference)


def _student_ids(tokenizer_dir, teacher_train_ids, train_texts, dev_texts, plan, max_length, terms_on):
    """The student's token ids: the training corpus renumbered (its segmentation is the teacher's), dev
    re-tokenized with the pruned tokenizer (unseen text may split differently, as it will in the app)."""
    tokenizer = load_tokenizer(tokenizer_dir)
    remap = plan.remap
    train = [remap[x] for x in teacher_train_ids]
    if any((x < 0).any() for x in train):  # only a continued student can lack training pieces
        if terms_on & {"hidden", "attention", "embedding"}:
            raise DistillError(
                "the student's vocabulary lacks pieces of this training data, so its tokens cannot line up "
                "with the teacher's hidden states",
                "distill a new student, or use only the kd/ce losses",
            )
        train = [np.asarray(x, np.int32) for x in tokenizer.encode_batch(train_texts, max_length=max_length)]
    dev = [np.asarray(x, np.int32) for x in tokenizer.encode_batch(dev_texts, max_length=max_length)]
    return [np.asarray(x, np.int32) for x in train], dev


def check_run_inputs(teacher: Path, out: Path, force: bool, *inputs) -> None:
    """Before any work: a teacher with a trained head, and an `out` that is no input (--force would
    delete it) and, without --force, does not exist yet."""
    if head_labels(check_local_model(teacher)) is None:
        raise DistillError(f"{teacher} has no trained classification head", "fine-tune it with mlx-edge teacher train")
    refuse_overwriting_inputs(out, teacher, *inputs)
    if out.exists() and not force:
        raise DistillError(f"{out} already exists", "pass --force to replace it, or choose another --out")


def run_report(
    *,
    out,
    work,
    teacher,
    teacher_model,
    teacher_ids,
    teacher_pad,
    teacher_pred,
    student_ids,
    student_pad,
    dev_y,
    result,
    resumed: bool,
    dev_source: str = "",
    measure_speed: bool = True,
    transfer_rows: int = 0,
    teacher_probs: np.ndarray | None = None,
    train_y: np.ndarray | None = None,
    soft_label_temperature: float = 1.0,
    teacher_held_out: tuple[float, int] | None = None,
) -> DistillReport:
    """The report of a finished run (BERT or static student): the best student (`work`/best) against the
    teacher on dev (accuracy, agreement), parameters, file sizes, and the speed-up on the same dev rows
    and batch sizes with the two models' passes interleaved (compare_speed; 0 when not `measure_speed`).
    Given `teacher_held_out` (dev rows a refit teacher went on to learn), the teacher's dev accuracy is
    its first fit's."""
    best = load_model(work / "best", require_head=True)
    best_pred = predict_ids(cpu_float(best), student_ids, student_pad)[1]  # compare_speed times `best` itself
    sample = list(range(min(len(teacher_ids), SPEED_SAMPLE)))
    student_seconds, teacher_seconds, speedup = math.inf, math.inf, 0.0  # not measured: 0 samples/s
    if measure_speed:
        student_seconds, teacher_seconds, speedup = compare_speed(
            lambda: predict_ids(best, [student_ids[i] for i in sample], student_pad),
            lambda: predict_ids(teacher_model, [teacher_ids[i] for i in sample], teacher_pad),
            pairs=SPEED_PAIRS,
        )
    teacher_acc, student_acc = accuracy(teacher_pred, dev_y), accuracy(best_pred, dev_y)
    if teacher_held_out is not None:
        teacher_acc = teacher_held_out[0]
    gold = None if train_y is None else np.asarray(train_y)[np.asarray(train_y) >= 0]
    majority = majority_accuracy(gold, dev_y) if gold is not None and len(gold) else 0.0
    labels = len(teacher_model.config.labels)
    notes = [
        trivial_note("teacher", teacher_acc, majority=majority, num_labels=labels),
        trivial_note("student", student_acc, majority=majority, num_labels=labels),
        flat_soft_labels_note(teacher_probs) if teacher_probs is not None else None,
    ]
    return DistillReport(
        out_dir=str(out),
        teacher_dev_accuracy=teacher_acc,
        student_dev_accuracy=student_acc,
        retained=student_acc / teacher_acc if teacher_acc else 0.0,
        agreement=accuracy(best_pred, teacher_pred),
        # a quantized student's codes count as the weights they stand for
        teacher_parameters=parameter_count(teacher_model),
        student_parameters=parameter_count(best),
        teacher_file_bytes=_weights_bytes(teacher),
        student_file_bytes=_weights_bytes(work / "best"),
        teacher_samples_per_second=len(sample) / teacher_seconds,
        student_samples_per_second=len(sample) / student_seconds,
        speedup=speedup,
        best_epoch=result.best_epoch,
        epochs_run=result.epochs_run,
        steps=result.steps,
        train_samples_per_second=result.samples_per_second,
        stopped_early=result.stopped_early,
        resumed=resumed,
        dev=dev_source,
        transfer_rows=transfer_rows,
        soft_label_temperature=soft_label_temperature,
        kept=result.kept,
        notes=[n for n in notes if n],
    )


CALIBRATION_ROWS = 2048  # training rows whose teacher logits set the softening temperature (evenly spaced)


def _learned_logits(provider, train_ids: list[np.ndarray], pad_id: int, batch: int = 64) -> np.ndarray:
    """The teacher's logits the student would learn, on up to CALIBRATION_ROWS of its training rows."""
    rows = np.unique(np.linspace(0, len(train_ids) - 1, min(len(train_ids), CALIBRATION_ROWS)).astype(int))
    out = []
    for start in range(0, len(rows), batch):
        part = rows[start : start + batch]
        ids, mask = collate([train_ids[i] for i in part], pad_id=pad_id)
        out.append(np.array(provider(part, ids, mask)["logits"], np.float64))
    return np.concatenate(out)


def _softened(provider, temperature: float):
    """`provider` with the teacher's logits divided by `temperature` (an over-confident teacher's)."""

    def provide(rows, input_ids, mask):
        out = provider(rows, input_ids, mask)
        return {**out, "logits": out["logits"] / temperature}

    return provide


# The teacher's dev logits, by the state of the teacher's weights file (teacher.source.file_state)
# and the dev token ids: the ladder's distillations (student, int8 split, int4 student, split, QAT)
# share one teacher and one dev set, and each pass of e5-small over it cost 2-3 s.
_TEACHER_LOGITS: dict[tuple, np.ndarray] = {}


def _teacher_logits(teacher: Path, teacher_model, ids: list[np.ndarray], pad_id: int) -> np.ndarray:
    weights = Path(teacher) / "model.safetensors"
    digest = hashlib.sha256(b"".join(np.asarray(x, np.int32).tobytes() + b"\xff\xff\xff\xff" for x in ids))
    key = (file_state(weights), digest.hexdigest()) if weights.is_file() else None
    if key is None or key not in _TEACHER_LOGITS:
        _TEACHER_LOGITS.clear()  # one teacher at a time is all a run needs
        _TEACHER_LOGITS[key] = predict_ids(teacher_model, ids, pad_id)[0]
    return _TEACHER_LOGITS[key]


def _weights_bytes(directory: Path) -> int:
    return sum(p.stat().st_size for p in Path(directory).glob("model*.safetensors"))


def _input_identity(
    teacher: Path, train: Path, dev: Path | None, targets: Path | None, split=None, unlabeled=None, column=None
) -> dict:
    """What the run learns from, by content: a teacher retrained in place, or a cache labeled again
    under the same path, is another input (a resume key of paths would continue the old run)."""
    extra = {"unlabeled data": [sha256_file(Path(p)) for p in unlabeled] + [column]} if unlabeled else {}
    return extra | {
        "teacher weights": file_hash_of_weights(teacher),
        "teacher tokenizer": tokenizer_hash(teacher),
        "teacher config": sha256_file(teacher / "config.json"),
        "training data": sha256_file(Path(train)),
        "dev data": sha256_file(Path(dev)) if dev is not None else f"split {split}",
        "targets": _files_hash(Path(targets), (MANIFEST_NAME, "index.json")) if targets is not None else None,
    }


def _files_hash(directory: Path, names) -> str:
    return fingerprint(*[sha256_file(directory / n) if (directory / n).is_file() else None for n in names])


def _prepare_work(work: Path, settings: str, inputs: dict, restart: bool) -> bool:
    """True when resuming an interrupted run of this very setup. An interrupted run whose inputs
    changed since is discarded with a warning that names them; one with other settings is an error
    (the user may want it back: re-run with its options, or --restart)."""
    marker = work / "setup.json"
    if work.exists() and (restart or not marker.is_file()):
        shutil.rmtree(work)
    if work.exists():
        saved = json.loads(marker.read_text())
        if saved.get("inputs") != inputs:
            changed = [k for k in inputs if (saved.get("inputs") or {}).get(k) != inputs[k]]
            warnings.warn(
                MlxEdgeWarning(
                    f"{', '.join(changed)} changed since the interrupted run in {work} started: "
                    "starting over instead of resuming it"
                ),
                stacklevel=3,
            )
            shutil.rmtree(work)
        elif saved.get("setup") != settings:
            raise WorkMismatch(
                f"{work} holds an interrupted run with other settings",
                "re-run with the same options to resume it, or pass --restart to discard it",
            )
        else:
            return (work / "ckpt").exists() or (work / "ckpt-old").exists()
    work.mkdir(parents=True)
    marker.write_text(json.dumps({"setup": settings, "inputs": inputs}))
    return False


def _finish(work: Path, out: Path, report: DistillReport, setup: str, **inputs) -> None:
    best = work / "best"
    shutil.copyfile(work / "metrics.jsonl", best / "metrics.jsonl")
    (best / "report.json").write_text(json.dumps(asdict(report), indent=2) + "\n")
    loop = inputs.pop("loop")
    write_manifest(
        best,
        "student",
        setup_hash=setup,
        labels=json.loads((best / "config.json").read_text())["id2label"],
        teacher=str(inputs["teacher"]),
        max_length=inputs["max_length"],
        student=inputs["student"],
        init=inputs["init"],
        vocab=inputs["vocab"],
        layer_map={str(k): v for k, v in inputs["mapping"].items()},
        data=data_record(inputs["train"], inputs["dev"], inputs["split"], inputs["unlabeled"]),
        targets=str(inputs["targets"]) if inputs["targets"] else None,
        loop={**asdict(loop), "weights": {k: asdict(v) for k, v in loop.weights.items()}},
        report=asdict(report),
    )
    if out.exists():
        shutil.rmtree(out)
    os.replace(best, out)
    shutil.rmtree(work)


__all__ = ["distill", "DistillReport", "LoopConfig", "Schedule"]
