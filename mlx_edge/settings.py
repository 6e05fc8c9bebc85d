"""Each stage's settings and their defaults, written once.

The library functions (`train_teacher`, `label_targets`, `distill`, `export_bundle`, `augment`,
`bench`) take these as keyword arguments with these defaults; the CLI options take their defaults
from here; a `mlx-edge run` CONFIG.toml section is read into the stage's class, which refuses an
unknown key. tests/test_settings.py fails if a default differs anywhere. Each class refuses a value
out of its range (`LIMITS`, `CHOICES`) when it is made, so a config's `learning_rate = -1` stops
before any work starts.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

from mlx_edge.errors import ConfigError


class Limit(NamedTuple):
    """The numbers a setting takes: `low` <= value <= `high`, or value > `above`; None: no bound.
    Every number must also be finite (nan and inf pass comparisons that should stop them)."""

    low: float | None = None
    high: float | None = None
    above: float | None = None

    def allows(self, value: float) -> bool:
        return (
            math.isfinite(value)
            and (self.low is None or value >= self.low)
            and (self.high is None or value <= self.high)
            and (self.above is None or value > self.above)
        )

    def __str__(self) -> str:
        if self.above is not None:
            return f"a finite number > {self.above:g}"
        if self.high is None:
            return f"a number >= {self.low:g}"
        return f"a number from {self.low:g} to {self.high:g}"


POSITIVE, AT_LEAST_1, NOT_NEGATIVE, SHARE = Limit(above=0), Limit(1), Limit(0), Limit(0, 1)
MAX_LENGTH, DEV_FRACTION = Limit(8, 4096), Limit(0.01, 0.5)


class StageSettings:
    """Shared reading of a config section: known keys only, values of the field's type, in range."""

    LIMITS: ClassVar[dict[str, Limit]] = {}  # numeric settings (each item of a tuple); None passes
    CHOICES: ClassVar[dict[str, tuple[str, ...]]] = {}

    def __post_init__(self):
        for name, limit in self.LIMITS.items():
            value = getattr(self, name)
            for item in value if isinstance(value, tuple) else (value,):
                if isinstance(item, str):  # a number-or-"auto" setting's word: its class checks it
                    continue
                if item is not None and not limit.allows(item):
                    raise _BadValue(f"{name} = {value!r}", "is out of range", f"use {limit}")
        for name, allowed in self.CHOICES.items():
            if getattr(self, name) not in allowed:
                raise _BadValue(f"{name} = {getattr(self, name)!r}", f"is not one of {', '.join(allowed)}")

    @classmethod
    def from_section(cls, section: dict[str, Any], where: str = "config"):
        """The settings of a TOML section; `where` names it in errors (e.g. "[teacher] of run.toml")."""
        fields = {f.name: f for f in dataclasses.fields(cls)}
        values = {}
        for key, value in section.items():
            if key not in fields:  # a typo would otherwise fall back to the default without a word
                close = difflib.get_close_matches(key, sorted(fields), n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise ConfigError(f"unknown setting {key!r} in {where}", f"{hint}known: {', '.join(sorted(fields))}")
            values[key] = _coerce(value, fields[key], cls, where)
        try:
            return cls(**values)
        except _BadValue as exc:
            raise ConfigError(f"{exc.setting} in {where} {exc.problem}", exc.hint) from None

    def kwargs(self, *names: str) -> dict[str, Any]:
        """The settings as keyword arguments (all of them, or only `names`)."""
        out = dataclasses.asdict(self)
        return {k: out[k] for k in names} if names else out


class _BadValue(ConfigError):
    """A setting out of its range; `from_section` says where it was written."""

    def __init__(self, setting: str, problem: str, hint: str | None = None):
        super().__init__(f"{setting} {problem}", hint)
        self.setting, self.problem = setting, problem


def _coerce(value: Any, field: dataclasses.Field, cls: type, where: str) -> Any:
    hint = typing.get_type_hints(cls)[field.name]
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    if value is None and type(None) in options:
        return None
    for kind in options:
        if kind is bool and isinstance(value, bool):
            return value
        if kind is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if kind is str and isinstance(value, (str, int, float)) and not isinstance(value, bool):
            return str(value)  # a loss weight may be written 1 or "0.5:1"
        if typing.get_origin(kind) is tuple and isinstance(value, (list, tuple)):
            return tuple(value)
    wanted = " or ".join(_KIND_NAMES.get(k, getattr(k, "__name__", str(k))) for k in options if k is not type(None))
    unset = " (or leave it out for the default)" if type(None) in options else ""
    raise ConfigError(f"{field.name} = {value!r} in {where} is not {wanted}{unset}")


# How a setting's type reads in an error line (a TOML writer's words, not Python's).
_KIND_NAMES = {
    bool: "true or false",
    int: "a whole number",
    float: "a number",
    str: "a string",
}


# [teacher] self_train = "auto": a teacher of fewer labeled training rows than this, given unlabeled text,
# self-trains (teacher/self_train.py); the probe head's few-label regime (teacher/train.PROBE_HEAD_BELOW)
SELF_TRAIN_BELOW = 1000
# [teacher] refit = "auto" and blend = "auto": a probe-head teacher of fewer labeled training rows than this
# that does not self-train trains again on every labeled row and is written as FEW_LABELS_BLEND of its
# fine-tuned weights plus the rest of its linear probe. At 100 to-do rows (90 training rows) the blend
# beat the fine-tune by +3.6/+2.2/-0.7 points and the probe in every draw; at 200 (180) the fine-tune beat
# the blend by 1.7 and 0.0 (seeds 0, 1), at 300 (270) the probe by 1.5 to 4.2 alone (docs/teacher.md)
FEW_LABELS_BELOW = 150
FEW_LABELS_BLEND = 0.25
# [data] broad_text = "auto": a run of fewer than BROAD_TEXT_BELOW labeled rows, at least BROAD_TEXT_SHARE
# of them English, adds BROAD_TEXT of WordNet's example sentences to its transfer set (or makes one of
# them). 10,000 moved the students of five few-label draws with a transfer set by -0.3 to +1.4 points
# (to-do 100 and 300 rows, vader-sentiment 300), vader-sentiment's 2,000-row draws by +1.3 and +2.5 with
# the rest of its file unlabeled and by +2.0 and +1.4 with labels only (seeds 0, 1), and the demo's 3,000
# to-do rows by +0.9 dev, +0.8 test (docs/distill.md#broad-english-text). Above a few thousand rows it was
# not measured: your rows and text cover the words, and the minutes grow
BROAD_TEXT = 10_000
BROAD_TEXT_BELOW = 5_000
BROAD_TEXT_SHARE = 0.1


@dataclass(frozen=True)
class TeacherTrainSettings(StageSettings):
    """`mlx-edge teacher train` / `train_teacher` / [teacher]."""

    LIMITS = {
        "epochs": AT_LEAST_1,
        "batch_size": AT_LEAST_1,
        "learning_rate": POSITIVE,
        "max_length": MAX_LENGTH,
        "warmup_ratio": SHARE,
        "weight_decay": NOT_NEGATIVE,
        "grad_accum": AT_LEAST_1,
        "max_grad_norm": POSITIVE,
        "dev_fraction": DEV_FRACTION,
        "freeze_layers": NOT_NEGATIVE,
        "min_steps": NOT_NEGATIVE,
        "blend": SHARE,
    }
    CHOICES = {
        "backend": ("torch", "mlx"),
        "head": ("auto", "probe", "new"),
        "select": ("auto", "best", "last"),
        "refit": ("auto", "yes", "no"),
        "self_train": ("auto", "yes", "no"),
    }

    # 2 epochs at 1e-4: the demo's teacher reached the dev accuracy of 3 at 5e-5 (95.17%) in 2/3 of the time
    # (seeds 0-2: 95.17, 96.00, 95.00%)
    epochs: int = 2
    # at least this many optimizer steps: a few hundred labeled rows get the epochs they need. 300 to-do
    # rows: 2 epochs (20 steps) 40.0% test, 150 steps 87.3%, 300 steps 88.2% (a probe on the frozen
    # embeddings: 88.2%); 3,000 rows run 188 steps in their 2 epochs, unchanged
    min_steps: int = 150
    batch_size: int = 32
    learning_rate: float = 1e-4
    max_length: int | None = None  # None: the smallest of AUTO_LENGTHS that holds 99% of the training texts
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    grad_accum: int = 1
    max_grad_norm: float = 1.0
    seed: int = 0
    device: str = "auto"
    dev_fraction: float = 0.1
    trust_remote_code: bool = False
    # the word-embedding table stays as pretrained; None: when it holds most of the teacher's parameters (and 20M+)
    # (multilingual-e5-small's 250k rows are 82%: AdamW over them was 60% of a CPU step, at the same dev accuracy)
    freeze_embeddings: bool | None = None
    freeze_layers: int = 0  # the bottom blocks (and all embeddings) kept as pretrained; 0: every block trains
    backend: str = "torch"  # or "mlx": the MLX BERT with distillation's compiled step (one process)
    # "new": BERT's [CLS] pooler and a new random head; "probe": the head reads the mean of the last hidden
    # states and starts as a linear probe on the frozen model, judged on dev as epoch 0 (teacher/probe.py);
    # "auto": probe below PROBE_HEAD_BELOW training rows, else new. `mlx-edge run` on 300 to-do rows
    # (seeds 0-2, the pipeline's 270 training rows, the last epoch): probe 89.7/89.8/91.0% test, new
    # 88.5/88.0/86.3%, the frozen-embedding probe on all 300 rows 88.2/87.0/86.8% (docs/teacher.md). Its
    # soft labels are steep (logits to 28): distill's `calibrate` softens them, without which its
    # students' int8 bundles failed `check`. A teacher trained before keeps its own head.
    head: str = "auto"
    # the epoch kept: "best" on dev, "last", or "auto": last when the dev split has fewer than
    # SMALL_DEV rows (30 dev rows move 3.3 points a row). `mlx-edge run` on 300 to-do rows, seeds 0/1:
    # the best-on-dev epoch scored 86.5/87.5% test, the last 88.5/88.0% (docs/teacher.md)
    select: str = "auto"
    # train a second time on every labeled row, dev included, once the first fit is measured on dev:
    # "yes", "no", or "auto": with no dev file, when the last epoch is kept, below FEW_LABELS_BELOW labeled
    # training rows and when the teacher does not self-train (a dev split of a dozen rows can judge
    # nothing; its rows are worth more as training rows). The teacher's dev figures are the first fit's.
    # With `blend = "auto"` it is the few-label teacher below; alone, on 100 to-do rows (seeds 0-2):
    # 80.2/83.7/77.5% against 78.7/80.3/79.5% without (docs/teacher.md)
    refit: str = "auto"
    # the probe head's teacher is written as this share of its fine-tuned weights plus the rest of the
    # linear probe it started as (WiSE-FT); 1: the fine-tuned weights alone. Dev judges the blend. "auto":
    # FEW_LABELS_BLEND below FEW_LABELS_BELOW labeled training rows when the teacher does not self-train,
    # else 1. With the refit, `mlx-edge run` on 100 to-do rows, seeds 0-2 (teacher edits and broad text
    # as the transfer set): teachers 82.3/82.5/78.8% test against the frozen-embedding probe's
    # 81.2/82.0/78.0% (fine-tuned alone: 78.7/80.3/79.5%), students 70.2/71.2/70.0% against the fine-tuned
    # teacher's 68.7/68.8/70.2% (docs/teacher.md)
    blend: float | str = "auto"
    # given unlabeled text, train a second time on the labeled rows plus the first fit's surest answers
    # on that text (of each label it answered, the more confident half: teacher/self_train.py): "yes",
    # "no", or "auto": below SELF_TRAIN_BELOW labeled training rows. `mlx-edge run` on 100 to-do rows with
    # the rest of the training file unlabeled and 20 edits per row (seeds 0-2): teachers 86.2/82.8/83.5%
    # test against 78.7/80.3/79.5% (the frozen-embedding probe 81.2/82.0/78.0%), students 85.2/78.8/83.3%
    # against 78.0/79.0/79.2%; on 300 rows teachers 90.3/89.7/90.8% against 89.7/89.8/91.0%, students
    # 87.5/88.5/86.7% against 86.8/88.2/86.5% (docs/teacher.md)
    self_train: str = "auto"

    def __post_init__(self):
        super().__post_init__()
        if isinstance(self.blend, str) and self.blend != "auto":
            raise _BadValue(f"blend = {self.blend!r}", "is neither a number nor auto", f"use auto or {SHARE}")


@dataclass(frozen=True)
class LabelSettings(StageSettings):
    """`mlx-edge teacher label` / `label_targets` / [label]. The MLX backend is the faster one here and on a Mac."""

    LIMITS = {"batch_size": AT_LEAST_1, "max_length": MAX_LENGTH, "shard_size": AT_LEAST_1}
    CHOICES = {"backend": ("torch", "mlx")}

    backend: str = "mlx"
    device: str = "auto"
    batch_size: int = 64
    max_length: int | None = None  # None: the teacher's training max length
    shard_size: int = 1024


@dataclass(frozen=True)
class DistillSettings(StageSettings):
    """`mlx-edge distill` / `distill` (and its LoopConfig) / [distill]."""

    LIMITS = {
        "vocab_extra": NOT_NEGATIVE,
        "embedding_size": AT_LEAST_1,
        "max_length": MAX_LENGTH,
        "epochs": AT_LEAST_1,
        "batch_size": AT_LEAST_1,
        "learning_rate": POSITIVE,
        "warmup_ratio": SHARE,
        "weight_decay": NOT_NEGATIVE,
        "grad_accum": AT_LEAST_1,
        "max_grad_norm": POSITIVE,
        "temperature": POSITIVE,
        "two_stage": NOT_NEGATIVE,
        "min_steps": NOT_NEGATIVE,
        "step_budget": NOT_NEGATIVE,
        "patience": AT_LEAST_1,
        "checkpoint_every": AT_LEAST_1,
        "max_steps": AT_LEAST_1,
        "cpu_shards": Limit(1, 64),
        "dev_fraction": DEV_FRACTION,
    }
    CHOICES = {
        "init": ("auto", "teacher", "embeddings", "random"),
        "vocab": ("auto", "seen", "seen+chars", "seen+script", "all"),
        "attention_loss": ("mse", "kl"),
        "select": ("auto", "best", "last"),
    }

    student: str = "auto"  # 4 layers cut to int4's widths (distill/student.py auto_shape): one student, every bundle
    init: str = "auto"  # auto: cut from the teacher when its shape allows (heads, widths), else embeddings
    vocab: str = "auto"  # auto: seen+script for a new student, the student's own when continuing one
    vocab_extra: int | None = None  # teacher pieces kept beyond the vocab mode's (models/prune.py: English ones for
    # the English rows' share, by WordNet's use; the rest by score);
    # None: NEW_STUDENT_VOCAB_EXTRA for a new student, none for one continued (it keeps its own vocabulary)
    freeze_embeddings: bool = False  # the word-embedding table stays as initialized
    embedding_size: int | None = None  # factorize the word embeddings to this width (distill/factorize.py)
    quantize: str | None = None  # "int8" / "int4": quantization-aware distillation (distill/quant.py)
    block_size: int = 32  # weights per scale with quantize (an MLX group size: 32, 64, 128)
    layer_map: str | None = None
    max_length: int | None = None  # None: the targets cache's, else the teacher's
    epochs: int = 10
    # at least this many optimizer steps: a few hundred labeled rows and no transfer set get the epochs
    # they need (270 rows are 9 steps an epoch). 300 to-do rows (seed 0, probe-head teacher): 10 epochs
    # 69.2% test, 30 epochs 73.7%; 100 rows (seed 1): 10 epochs 32.5%, 100 epochs 54.3%. A transfer set
    # of a few thousand rows runs more than this in its 10 epochs, unchanged
    min_steps: int = 300
    # at most about this many optimizer steps: more than `epochs` would make, the nearest whole number of
    # epochs to it (at least 1); 0: no cut. None: EDITS_STEP_BUDGET in a pipeline whose transfer set is its
    # teacher's edits, BROAD_STEP_BUDGET where it is broad text alone, else no cut: on real text the
    # student keeps learning (vader-sentiment, 300 rows with the rest unlabeled and broad text, 15,000
    # rows: 3 epochs 85.4% test, 10 epochs 87.9%)
    step_budget: int | None = None
    batch_size: int = 32
    # peak rate; None: DISTILL_LEARNING_RATE, or EDITS_LEARNING_RATE in a pipeline whose transfer set is its
    # teacher's edits and whose teacher is blended toward its probe
    learning_rate: float | None = None
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    grad_accum: int = 1
    max_grad_norm: float = 1.0
    temperature: float = 2.0
    # soften an over-confident teacher's soft labels before the student learns them: its mean top
    # probability on the training rows brought down to its dev accuracy (metrics.softening_temperature)
    calibrate: bool = True
    kd_weight: str = "1.0"  # W, or START:END (linear over the run)
    ce_weight: str = "0.1"
    hidden_weight: str = "1"
    attention_weight: str = "1"
    embedding_weight: str = "0"
    attention_loss: str = "mse"
    two_stage: int = 0
    patience: int | None = None
    # the epoch kept: "best" on dev, "last", or "auto": last when the dev split has fewer than
    # metrics.SMALL_DEV rows, as the teacher's select (the pipeline's dev of 100 labeled rows is 10 rows).
    # `mlx-edge run` on 100 and 300 to-do rows, seeds 0-2, with a transfer set: the last epoch 78.0/79.0/
    # 79.2% and 86.8/88.2/86.5% test, the best on dev 78.0/76.2/79.5% and 86.8/87.2/86.5% (docs/distill.md)
    select: str = "auto"
    checkpoint_every: int = 200
    max_steps: int | None = None
    cpu_shards: int | None = None
    seed: int = 0
    dev_fraction: float = 0.1
    device: str = "auto"


@dataclass(frozen=True)
class ExportSettings(StageSettings):
    """`mlx-edge export` / `export_bundle` / [export]."""

    LIMITS = {
        "palettize_bits": Limit(1, 8),
        "head_learning_rate": Limit(1e-5, 1.0),
        "head_batch_size": AT_LEAST_1,
        "head_epochs": AT_LEAST_1,
        "n_texts": Limit(1, 600),
        "block_size": Limit(1, 4096),
    }
    # Artifacts a bundle holds only when asked for: the app needs neither (see bundle/layout.py).
    EXTRAS: ClassVar[tuple[str, ...]] = ("classifier", "onnx", "tokenizer-json")
    # Keys of mlx-edge 0.1's [export] -> (what to write instead, what it means): a config that still has
    # one gets a line that says so (pipeline.PipelineConfig.from_toml), not "unknown setting".
    RENAMED: ClassVar[dict[str, tuple[str, str]]] = {
        "optimizer": ("head_optimizer", "the device head's optimizer"),
        "learning_rate": ("head_learning_rate", "the device head's rate"),
        "batch_size": ("head_batch_size", "the device head's mini-batch"),
        "epochs": ("head_epochs", "the device head's epochs"),
        "version": ("model_version", "the models' version string"),
    }

    seq_len: str | None = None  # None: the student's distilled max length
    precision: str = "fp16"
    compute_units: str = "CPU_AND_GPU"
    min_target: str = "iOS16"
    quantize: str = "none"
    block_size: int = 32  # the most weights per scale along a weight's input axis (int8-block / int4-block)
    palettize_bits: int = 6
    palettize_mode: str = "kmeans"
    # The updatable head's on-device training (MLUpdateTask), baked into Head.mlmodel.
    head_optimizer: str = "sgd"
    # None: HEAD_STEP (0.5) over the top eigenvalue of the second moment of the student's embeddings on
    # the check texts (a quarter of the largest stable SGD step), so that a correction is learned in the
    # default epochs whatever the student's scale: fixed rates, or one over the mean squared norm,
    # left students of 100, 300 and 3,000 rows short of `check`'s 8 corrections in 200 epochs (docs/export.md)
    head_learning_rate: float | None = None
    head_batch_size: int = 8
    head_epochs: int = 20
    author: str = ""
    license: str = ""
    model_version: str = "1.0"
    description: str = ""
    n_texts: int = 32
    device: str = "auto"
    extras: tuple[str, ...] = ()  # of EXTRAS: "classifier" (Classifier.mlpackage), "onnx" (model.onnx),
    # "tokenizer-json" (a Unigram student's tokenizer.json beside the spec the app reads)

    def __post_init__(self):
        super().__post_init__()
        unknown = [e for e in self.extras if e not in self.EXTRAS]
        if unknown:
            raise _BadValue(
                f"extras = {list(self.extras)!r}",
                f"names {unknown[0]!r}, which is not an extra",
                f"use {', '.join(self.EXTRAS)}",
            )


@dataclass(frozen=True)
class AugmentSettings(StageSettings):
    """`mlx-edge augment` / `augment`."""

    LIMITS = {
        "min_confidence": SHARE,
        "shots": AT_LEAST_1,
        "per_prompt": AT_LEAST_1,
        "batch_size": AT_LEAST_1,
        "max_rounds": AT_LEAST_1,
        "max_tokens": AT_LEAST_1,
        "temperature": NOT_NEGATIVE,
        "top_p": SHARE,
        "near_duplicate": SHARE,
        "min_chars": AT_LEAST_1,
        "max_chars": AT_LEAST_1,
    }

    min_confidence: float = 0.0
    relabel: bool = False
    shots: int = 5
    per_prompt: int = 10
    batch_size: int = 8
    max_rounds: int = 50
    max_tokens: int | None = None  # None: AUGMENT_ANSWER_TOKENS for a chat model, AUGMENT_LIST_TOKENS for a base one
    temperature: float = 0.8
    top_p: float = 0.95
    seed: int = 0
    near_duplicate: float = 0.8
    min_chars: int = 3
    max_chars: int = 300


@dataclass(frozen=True)
class AdaptSettings(StageSettings):
    """`mlx-edge augment adapt` / `adapt`: LoRA on the augment LLM (mlx-lm's trainer and its defaults
    where it has one: num_layers 16, -1 for every layer)."""

    LIMITS = {
        "rank": AT_LEAST_1,
        "epochs": AT_LEAST_1,
        "batch_size": AT_LEAST_1,
        "learning_rate": POSITIVE,
        "max_seq_length": Limit(32),
        "num_layers": Limit(-1),
    }

    rank: int = 8
    epochs: int = 3
    batch_size: int = 2
    learning_rate: float = 1e-4
    max_seq_length: int = 512
    num_layers: int = 16
    seed: int = 0

    def __post_init__(self):
        super().__post_init__()
        if self.num_layers == 0:
            raise _BadValue("num_layers = 0", "adapts no layer", "use -1 (every layer) or a number >= 1")


@dataclass(frozen=True)
class BenchSettings(StageSettings):
    """`mlx-edge bench` / `bench`."""

    LIMITS = {
        "seq_lens": AT_LEAST_1,
        "infer_batches": AT_LEAST_1,
        "train_batch": AT_LEAST_1,
        "train_seq": Limit(2),
        "warmup": NOT_NEGATIVE,
        "repeats": AT_LEAST_1,
        "budget_s": Limit(0.1),
        "min_s": NOT_NEGATIVE,
        "matmul_n": Limit(16),
        "threads": AT_LEAST_1,
    }

    model: str = "tiny"
    seq_lens: tuple[int, ...] = (32, 128)
    infer_batches: tuple[int, ...] = (1, 32)
    train_batch: int = 32
    train_seq: int | None = None
    warmup: int = 2
    repeats: int = 5
    budget_s: float = 6.0
    min_s: float = 1.0
    matmul_n: int | None = None
    threads: int | None = None
    seed: int = 0


# Token limits `max_length = None` (auto) chooses from: the smallest that holds 99% of the training texts
# (the demo's to-do texts: 64; the bundle's input length follows the teacher's).
AUTO_LENGTHS = (64, 128, 256, 512)
# Extra pieces a new student keeps beyond the data's own (docs/distill.md "Vocabulary pruning").
NEW_STUDENT_VOCAB_EXTRA = 4000
# `teacher edits --per-text`: new sentences per training row (TinyBERT made 20). [data] teacher_edits = "auto":
# a run of fewer than SELF_TRAIN_BELOW labeled rows and no unlabeled files makes this many, a transfer set of
# its own, which broad text then joins. To-do set, 300 rows, seed 0, one teacher: student 73.3% with
# neither, 78.2% with broad text alone, 82.3% with both, for 0.7 / 7.2 / 10.7 distill minutes (10 epochs;
# 83.5% in 3.4 under EDITS_STEP_BUDGET); 100 rows 59.0% -> 69.2% (68.7%); thucnews-titles 300 rows (edits
# only) 68.9% -> 75.0% (docs/distill.md)
TEACHER_EDITS = 20
# `teacher edits --bags`: word bags the edits stage adds, spread over the training rows (augment/bags.py): a
# row's words among broad words of its script, so the student meets the teacher on words and characters its
# rows never combine. A pipeline makes WORD_BAGS at TEACHER_EDITS per row or more, in proportion below. To-do set, labels only
# (edits and broad text as well), the same teachers: 100 rows, seeds 0-2, students 73.7 / 73.2 / 70.5%
# against 70.2 / 71.2 / 70.0%; 300 rows, seed 0, 84.8% against 83.3%; about 1 more label minute (docs/distill.md)
WORD_BAGS = 10_000
# augment's max_tokens = None: a chat model's answer (a JSON list of per_prompt examples) may take this many
# tokens; a base model continuing a list of seeds gets AUGMENT_LIST_TOKENS, a few lines (gemma3-270m's kept
# to-do lines: 9 tokens median, 15 at the 90th percentile; given 512 it wrote about 40 lines, drifting off the list)
AUGMENT_ANSWER_TOKENS = 512
AUGMENT_LIST_TOKENS = 64
# [distill] step_budget of a pipeline run whose transfer set is the teacher's edits (no unlabeled files) and
# whose [distill] sets none: a student matches the teacher on those near-copies of its rows within a few
# epochs, then memorizes them. To-do set, 300 rows with the default edits and broad text (15,300 rows, 488
# steps an epoch), same teacher and targets: 10 epochs 82.3% / 82.5% test (seeds 0 / 1) in 10.7 minutes,
# 3 epochs (this budget) 83.5% / 83.5% in 3.4, 2 epochs 83.3% / 82.5%; 100 rows (seed 0): 69.2% in 8.4
# minutes, 4 epochs 68.7% in 3.5 (docs/distill.md)
EDITS_STEP_BUDGET = 1500
# [distill] learning_rate when nothing sets one; a student cut from its teacher learns its new task at it
DISTILL_LEARNING_RATE = 2e-4
# [distill] learning_rate of a pipeline run whose transfer set is the teacher's edits (no unlabeled files),
# whose teacher is blended toward its linear probe (FEW_LABELS_BELOW: its layers mostly the pretrained
# ones) and whose [distill] sets none: at half the rate the student cut from those layers keeps more of
# what they knew of other text. To-do set, 100 rows, labels only (edits, word bags, broad text), the same
# teachers: seeds 0-2 73.7 / 73.2 / 70.5% test at 2e-4, 74.3 / 74.2 / 71.7% at 1e-4, 74.2 / 73.3% (seeds
# 0-1) at 5e-5; thucnews-titles 100 (seed 0) 67.9 -> 70.2%; vader-sentiment 100 (seeds 0-2) 80.2 / 80.7 /
# 76.3 -> 78.8 / 80.3 / 78.2% (no change on average). Not for a teacher that is its fine-tune alone: 300
# rows (seed 0), to-do 84.8 -> 84.2%, thucnews-titles 74.7 -> 74.6%, vader-sentiment 83.6 -> 83.0% at 1e-4
# (docs/distill.md)
EDITS_LEARNING_RATE = 1e-4
# [distill] step_budget of a pipeline run whose only transfer set is broad text (no unlabeled files, no
# edits) and whose [distill] sets none: 3 epochs from 1,000 to 5,000 labeled rows (10,000 sentences).
# The demo's 3,000 rows, one teacher: 3 epochs dev 92.7% / test 93.3% (the demo's 10 epochs without broad
# text 91.8% / 92.5%), 5 epochs 92.0% / 93.8%; vader-sentiment 2,000 rows, seeds 0 / 1: 3 epochs 85.4% /
# 85.6% against 83.4% / 84.2% without broad text (docs/distill.md#broad-english-text)
BROAD_STEP_BUDGET = 1200
# The bundles `mlx-edge run` / `demo` / serve can make, in the order of the ladder (mlx_edge/ladder.py).
BUNDLE_KINDS = ("fp16", "int8", "int4", "static")


@dataclass(frozen=True)
class PipelineSettings(StageSettings):
    """`mlx-edge run` / `demo` / [pipeline]: the workspace, and the bundles to make."""

    out: str = "mlx-edge-run"  # the workspace, relative to the config
    device: str = "auto"
    seed: int = 0
    bundles: tuple[str, ...] = BUNDLE_KINDS  # each its own stages: see docs/pipeline.md "The bundle ladder"

    def __post_init__(self):
        super().__post_init__()
        for kind in self.bundles:
            if kind not in BUNDLE_KINDS:
                close = difflib.get_close_matches(str(kind), BUNDLE_KINDS, n=1)
                hint = f"did you mean {close[0]!r}? " if close else ""
                raise _BadValue(
                    f"bundles = {list(self.bundles)!r}",
                    f"names {kind!r}, which is not a bundle kind",
                    f"{hint}use any of {', '.join(BUNDLE_KINDS)}",
                )
        if not self.bundles:
            raise _BadValue("bundles = []", "makes no bundle", f"use any of {', '.join(BUNDLE_KINDS)}")
        if len(set(self.bundles)) != len(self.bundles):
            raise _BadValue(f"bundles = {list(self.bundles)!r}", "names a kind twice", "list each once")


# A `mlx-edge run` config's sections, in the order a run meets them: each stage's settings class (None:
# no class) and the keys only a pipeline has (pipeline.py reads configs by it; config_file.py writes them).
CONFIG_SECTIONS: dict[str, tuple[type | None, tuple[str, ...]]] = {
    "pipeline": (PipelineSettings, ()),
    "data": (
        None,
        (
            "train",
            "dev",
            "test",
            "text_column",
            "label_column",
            "unlabeled",
            "unlabeled_column",
            "teacher_edits",
            "broad_text",
        ),
    ),
    "teacher": (TeacherTrainSettings, ("model", "dir")),
    "augment": (AugmentSettings, ("per_class", "llm", "adapter")),
    "label": (LabelSettings, ()),
    "distill": (DistillSettings, ()),
    "export": (ExportSettings, ()),
    "check": (None, ("enabled",)),
}

# `mlx-edge demo`'s teacher: a built-in name (models/builtin.py); all-minilm-l6-v2 also works offline.
DEMO_TEACHER = "multilingual-e5-small"

TEACHER, LABEL, DISTILL, EXPORT, AUGMENT, BENCH = (
    TeacherTrainSettings(),
    LabelSettings(),
    DistillSettings(),
    ExportSettings(),
    AugmentSettings(),
    BenchSettings(),
)
ADAPT = AdaptSettings()
PIPELINE = PipelineSettings()
