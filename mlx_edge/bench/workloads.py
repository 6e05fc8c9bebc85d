"""What is measured: the models, the inputs every backend gets, the workloads and their FLOP counts."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from mlx_edge.distill.student import PRESETS
from mlx_edge.errors import BenchError
from mlx_edge.models.bert import BertConfig, BertForSequenceClassification, init_weights
from mlx_edge.models.checkpoint import load_config, load_model, save_model

# `distill` is the product's loop (KD + CE from a targets cache, as `mlx-edge run` distills);
# `distill-live` computes the teacher's forward in the step, as `distill` without --targets does.
KINDS = ("infer", "train", "teacher-train", "distill", "distill-live", "label", "pipeline")
# `pipeline`: the demo's stages end to end on the shipped to-do data (the product's minutes; MLX and the
# teacher's own backend, not compared per backend), asked for by name: the whole demo takes 13-16 minutes.
DEFAULT_KINDS = ("infer", "train", "teacher-train", "distill", "label")
ALIASES = {"distill-cached": "distill"}  # the cached row's name before it became the default distill row
LABELS = ["finance", "health", "life", "study", "travel", "work"]
MINILM_VOCAB = 30522
# The default teacher of the distillation and labeling workloads: the MiniLM-L6 shape (6 x 384), its head
# on the mean of every row as the built-in teachers' (e5, MiniLM: sentence encoders) is, so the `label`
# row computes every row of the last layer as their labeling does (a [CLS] head would skip all but one).
TEACHER_SHAPE = dict(
    num_hidden_layers=6,
    hidden_size=384,
    num_attention_heads=12,
    intermediate_size=1536,
    hidden_act="gelu",
    classifier_pooling="mean",
)
BASE_SHAPE = dict(
    num_hidden_layers=12, hidden_size=768, num_attention_heads=12, intermediate_size=3072, hidden_act="gelu"
)
# Training rows time the step the product runs, with the models' own dropout (the presets' and BERT's
# 0.1); each backend's outputs are compared with dropout off (the runners' `check` runs in eval mode),
# where the steps are deterministic.
KD_TEMPERATURE, CE_WEIGHT = 2.0, 0.1
LEARNING_RATE, WEIGHT_DECAY = 1e-4, 0.01


@dataclass(frozen=True)
class Workload:
    """One measured thing. `kind`: infer (student forward), train (student forward, backward, AdamW),
    teacher-train (the same for the teacher: `teacher train`'s step), distill (train with KD + CE from
    the teacher's logits precomputed, as a targets cache holds them), distill-live (the same with the
    teacher's forward in the step), label (teacher forward)."""

    kind: str
    batch: int
    seq: int

    @property
    def name(self) -> str:
        return f"{self.kind} b{self.batch} L{self.seq}"

    @property
    def trains(self) -> bool:
        return self.kind in ("train", "teacher-train", "distill", "distill-live")

    def to_dict(self) -> dict:
        return {"name": self.name, **asdict(self)}


def plan(
    kinds=DEFAULT_KINDS, *, seq_lens=(32, 128), infer_batches=(1, 32), train_batch=32, train_seq: int | None = None
) -> list[Workload]:
    """The workloads for `kinds`: inference at every (batch, length), the others at one size."""
    kinds = [ALIASES.get(k, k) for k in kinds]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise BenchError(f"unknown workload {', '.join(unknown)}", f"choose from {', '.join(KINDS)}")
    train_seq = train_seq or max(seq_lens)
    out = []
    for kind in kinds:
        if kind == "pipeline":  # not a per-backend step: bench runs it apart (pipeline_minutes)
            continue
        if kind == "infer":
            out += [Workload("infer", b, s) for b in infer_batches for s in seq_lens]
        else:
            out.append(Workload(kind, train_batch, train_seq))
    return out


def make_inputs(workload: Workload, vocab_size: int, num_labels: int, seed: int = 0) -> dict[str, np.ndarray]:
    """The one batch every backend gets: ids int32 (B, L) starting with [CLS], a mask with a
    padded tail on every other row, labels int32 (B,)."""
    rng = np.random.default_rng([seed, workload.batch, workload.seq])
    b, n = workload.batch, workload.seq
    ids = rng.integers(min(1000, vocab_size // 2), vocab_size, size=(b, n)).astype(np.int32)
    ids[:, 0] = min(101, vocab_size - 1)
    mask = np.ones((b, n), dtype=np.int32)
    mask[1::2, max(2, (3 * n) // 4) :] = 0  # padding, as real batches have
    ids[mask == 0] = 0
    labels = rng.integers(0, num_labels, size=b).astype(np.int32)
    return {"input_ids": ids, "attention_mask": mask, "labels": labels}


# ------------------------------------------------------------------------------------------ FLOPs


def forward_flops(config, batch: int, seq: int, *, logits_only: bool = False) -> float:
    """Multiply-adds x 2 of one forward pass: the projections, FFN, attention matmuls, pooler, head.
    Padded positions count (every backend computes them); softmax/LayerNorm/GELU do not.
    `logits_only` (inference): a [CLS]-pooled model's last layer runs its query side (Q, attention,
    output, FFN) for the [CLS] row alone, as every backend's inference path does; its K and V still
    cover every token."""
    h, f, layers = config.hidden_size, config.intermediate_size, config.num_hidden_layers
    tokens = batch * seq

    def layer(rows: int) -> int:  # query rows per sentence: seq, or 1 for [CLS] alone
        queries = batch * rows
        return 2 * tokens * 2 * h * h + 2 * queries * (2 * h * h + 2 * h * f) + 2 * 2 * queries * seq * h

    cls_only = logits_only and getattr(config, "classifier_pooling", "cls") == "cls"
    body = (layers - 1) * layer(seq) + layer(1 if cls_only else seq)
    return float(body + 2 * batch * (h * h + h * config.num_labels))


def workload_flops(workload: Workload, student, teacher) -> float:
    """Backward = 2x forward (the usual estimate); the AdamW update's elementwise work is not counted."""
    b, s = workload.batch, workload.seq
    if workload.kind == "infer":
        return forward_flops(student, b, s, logits_only=True)
    if workload.kind == "label":
        return forward_flops(teacher, b, s, logits_only=True)
    if workload.kind == "teacher-train":
        return 3 * forward_flops(teacher, b, s)
    flops = 3 * forward_flops(student, b, s)
    if workload.kind == "distill-live":
        flops += forward_flops(teacher, b, s)
    return flops


# ----------------------------------------------------------------------------------------- models


@dataclass
class Models:
    """The student and teacher as HF directories (every backend loads these same weights)."""

    student_dir: Path
    teacher_dir: Path
    student: object  # BertConfig
    teacher: object
    description: str

    def params(self, which: str) -> int:
        c = getattr(self, which)
        h, f = c.hidden_size, c.intermediate_size
        per_layer = 4 * h * h + 4 * h + 2 * h * f + f + h + 4 * h
        emb = (c.vocab_size + c.max_position_embeddings + c.type_vocab_size + 2) * h
        return c.num_hidden_layers * per_layer + emb + h * h + h + (h + 1) * c.num_labels


def prepare_models(model: str, work: Path, *, teacher: Path | None = None, seed: int = 0) -> Models:
    """`model`: tiny | small | base (random, seeded) or an HF BERT directory. The teacher: a random
    MiniLM-L6-shaped BERT with the student's vocabulary and labels, unless `teacher` names a directory."""

    if model in PRESETS or model == "base":
        shape = BASE_SHAPE if model == "base" else PRESETS[model]
        config = BertConfig(**shape, vocab_size=MINILM_VOCAB, id2label=dict(enumerate(LABELS)))
        student_dir = _save_random(config, work / "student", seed)
        description = f"{model} (random, seed {seed})"
    elif Path(model).is_dir():
        config = load_config(Path(model))
        student_dir = _resave(Path(model), config, work / "student", seed)
        description = str(model)
    else:
        raise BenchError(
            f"--model {model!r} is neither a preset nor a directory",
            f"use one of {', '.join([*PRESETS, 'base'])} or an HF BERT directory",
        )
    if teacher is not None:
        t_config = load_config(teacher)
        if t_config.vocab_size != config.vocab_size:
            raise BenchError(
                f"teacher vocab {t_config.vocab_size} != student vocab {config.vocab_size}",
                "pass a teacher with the student's tokenizer",
            )
        t_config.id2label = dict(config.id2label)
        teacher_dir = _resave(teacher, t_config, work / "teacher", seed + 1)
    else:
        t_config = BertConfig(
            **TEACHER_SHAPE,
            vocab_size=config.vocab_size,
            max_position_embeddings=config.max_position_embeddings,
            id2label=dict(config.id2label),
        )
        teacher_dir = _save_random(t_config, work / "teacher", seed + 1)
    return Models(student_dir, teacher_dir, config, t_config, description)


def _save_random(config, out: Path, seed: int) -> Path:
    model = BertForSequenceClassification(config)
    init_weights(model, seed=seed)
    return save_model(model, out)


def _resave(source: Path, config, out: Path, seed: int) -> Path:
    """Load a directory (a bare encoder gets a seeded head) and save it with `config`'s labels."""
    model = load_model(source, labels=config.labels, seed=seed)
    model.config = config
    return save_model(model, out)
