"""The bundle ladder: fp16, int8, int4 and static bundles from one teacher and its targets cache.

Each kind is a short list of steps (`steps(kind)`), each a distillation or an export into its own
workspace directory; `mlx-edge run` runs them as stages (skipped when up to date, resumed when
interrupted) and checks every bundle. The recipes are the ones measured in docs/quantization.md and
docs/distill.md, on the demo's teacher; they are derived from the teacher's and the student's shapes
so that any BERT-family teacher gets the same kind of bundle:

- fp16: the distilled student (the [distill] settings), exported with the [export] settings.
- int8: that student's word table split to 160 wide (a frequency-weighted SVD), fine-tuned 3 epochs at
  1e-5 on soft and hard labels and the teacher's attention maps, exported int8 in blocks of at most 64
  weights. No quantization-aware training is needed at int8.
- int4: [distill]'s student when it is `auto` (the default: 4 layers as wide as both MLX's groups of 32
  and the teacher's heads divide, 288 for a 12-head teacher of 384 or more), else a student of its own
  of that shape, cut from the teacher and distilled with the [distill] settings for at most 8 epochs;
  its table split to 160 and fine-tuned 1 epoch at 1e-5 on soft and hard labels; then 2 epochs of
  quantization-aware fine-tuning at 1e-5 in blocks of 32 (attention maps kept, hidden states not: the
  continued student's projection would start from random); its int4 codes go into the program as
  they are.
- static: a token table from the teacher's embeddings, mean-pooled (distill/static.py's defaults).

Every new student learns from the whole transfer set; the fine-tunes after a split or QAT read it
without its broad text (Inputs.broad).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from mlx_edge.distill.api import distill
from mlx_edge.distill.config import LoopConfig
from mlx_edge.distill.static import distill_static, static_loop
from mlx_edge.distill.static_settings import STATIC
from mlx_edge.distill.student import AUTO_GROUP, auto_shape
from mlx_edge.errors import ConfigError, WorkMismatch
from mlx_edge.export import export_bundle
from mlx_edge.fileio import atomic_write_json
from mlx_edge.models.bert import BertConfig
from mlx_edge.models.checkpoint import load_config
from mlx_edge.settings import BUNDLE_KINDS, DistillSettings, ExportSettings, PipelineSettings

SPLIT_WIDTH = 160  # the word table's width after the split (int8 and int4)
# The brief fine-tune after a split: KD + CE, and the attention maps (they need no projection, so they
# carry over as in QAT): the int8 student 92.17 -> 92.50% dev on the demo's, 92.67 -> 93.00% on an earlier
# demo's (test 91.33 -> 91.33%, 92.3 -> 92.5%)
SPLIT = {"epochs": 3, "learning_rate": 1e-5, "attention_weight": "1"}
INT4_SPLIT = {"epochs": 1, "learning_rate": 1e-5}  # int4's split: its QAT fine-tunes the same student after it
INT8_BLOCK = 64  # int8: at most this many weights per scale (export's block size is an upper bound)
INT4_BLOCK = AUTO_GROUP  # int4: MLX's group size, which must divide the student's widths
INT4_EPOCHS = 8  # an int4 student of its own: at most 8 epochs (6 cost a point of dev accuracy)
QAT = {"epochs": 2, "learning_rate": 1e-5}  # int4's quantization-aware fine-tune (the demo's peaked at 2 of 3)
QUANTIZED_TARGET = "iOS18"  # block-wise codes need iOS 18's constexpr ops


@dataclass
class Inputs:
    """What every step reads: the teacher, its targets cache, the data, the stage settings."""

    teacher: Path
    targets: Path
    train: Path
    dev: Path | None
    workspace: Path
    distill: DistillSettings
    export: ExportSettings
    text_column: str | None = None
    label_column: str | None = None
    unlabeled: tuple[Path, ...] = ()  # the transfer set's files: every new student learns from them
    # of those, broad text (pipeline's broad.jsonl): the fine-tunes after a split or QAT skip it. Its
    # 10,000 sentences are for the words a student learns once; read again they made the demo's int8 and
    # int4 fine-tunes four times as long
    broad: tuple[Path, ...] = ()
    unlabeled_column: str | None = None
    held_out: tuple[str, ...] = ()  # texts a transfer set must not hold (the test set's)
    progress: bool = True


@dataclass(frozen=True)
class Step:
    name: str  # the stage's name in pipeline.json and the report, e.g. "int4 qat"
    output: str  # its directory in the workspace
    recipe: dict  # what it does beyond the stage settings (part of its fingerprint)
    run: Callable[[Inputs, Path], None]  # (inputs, output directory)
    export: bool = False  # an export (reads [export]); else a distillation (reads [distill], writes metrics)


@dataclass(frozen=True)
class Rung:
    kind: str
    steps: tuple[Step, ...]
    student: str  # the directory of the student the bundle holds
    bundle: str  # the bundle's directory


def int4_shape(teacher: BertConfig) -> dict:
    """The int4 student's config: the `auto` student's (distill/student.py auto_shape); ConfigError when
    the teacher has no cut whose widths MLX's groups of 32 and its heads both divide."""
    shape = auto_shape(teacher)
    if shape is None:
        raise ConfigError(
            f"bundles: int4 needs a student cut from the teacher whose widths {INT4_BLOCK} and the teacher's "
            f"{teacher.num_attention_heads} heads divide, and a teacher {teacher.hidden_size} wide "
            f"(FFN {teacher.intermediate_size}) has none",
            "drop int4 from [pipeline] bundles",
        )
    return shape


def shares_student(settings: DistillSettings) -> bool:
    """Whether the int4 kind splits and quantizes [distill]'s student instead of distilling its own:
    when that student is `auto` (int4's own shape) and trained as a plain float student."""
    return settings.student == "auto" and settings.embedding_size is None and settings.quantize is None


def needs_student(bundles: tuple[str, ...], settings: DistillSettings) -> bool:
    """Whether the pipeline distills [distill]'s student: fp16 and int8 are made from it, int4 when shared."""
    return bool({"fp16", "int8"} & set(bundles)) or ("int4" in bundles and shares_student(settings))


def rungs(bundles: tuple[str, ...], settings: DistillSettings, *, student_width: int | None = None) -> list[Rung]:
    """The rung of each kind in `bundles`, in order, for these [distill] settings (`rung`'s arguments)."""
    shared = shares_student(settings)
    return [rung(kind, student_width=student_width, shared=shared) for kind in bundles]


def check_ladder(bundles: tuple[str, ...], distill_settings: DistillSettings, teacher: BertConfig | None) -> None:
    """Refuse, before any work, a ladder entry this setup cannot make (ConfigError, one line)."""
    PipelineSettings(bundles=tuple(bundles))  # known kinds, each once (ConfigError otherwise)
    layered = {"fp16", "int8"} & set(bundles)
    if distill_settings.student == "static" and layered:
        raise ConfigError(
            f'bundles: {sorted(layered)[0]} is made from [distill]\'s student, and student = "static" has no layers',
            'the static bundle is a kind of its own: write bundles = ["static"] and leave [distill] student as is',
        )
    if "int8" in bundles and distill_settings.quantize:
        raise ConfigError(
            f"bundles: int8 splits [distill]'s student, which is trained quantized (quantize = "
            f'"{distill_settings.quantize}")',
            "drop quantize from [distill]: the int8 and int4 kinds quantize their own students",
        )
    if "int4" in bundles and teacher is not None:
        int4_shape(teacher)


def split_width(hidden_size: int) -> int:
    """The split table's width: 160, or half the student's width when it is not wider than 160."""
    return SPLIT_WIDTH if hidden_size > SPLIT_WIDTH else max(1, hidden_size // 2)


def rung(kind: str, *, student_width: int | None = None, shared: bool = False) -> Rung:
    """The steps that make bundle `kind` (`student_width`: [distill]'s student's, for the int8 split;
    `shared`: int4 starts from [distill]'s student, `shares_student`)."""
    if kind == "fp16":
        return Rung(kind, (Step("export", "bundle", {}, _export_float, export=True),), "student", "bundle")
    if kind == "int8":
        width = split_width(student_width or SPLIT_WIDTH * 2)
        split = {"embedding_size": width, **SPLIT}
        export = {"quantize": "int8-block", "block_size": INT8_BLOCK, "min_target": QUANTIZED_TARGET}
        return Rung(
            kind,
            (
                Step("int8 split", "student-int8", split, lambda i, o: _split(i, i.workspace / "student", o, width)),
                Step(
                    "int8 export",
                    "bundle-int8",
                    export,
                    lambda i, o: _export(i, i.workspace / "student-int8", o, export),
                    export=True,
                ),
            ),
            "student-int8",
            "bundle-int8",
        )
    if kind == "int4":
        export = {"quantize": "int4-block", "block_size": INT4_BLOCK, "min_target": QUANTIZED_TARGET}
        own = Step("int4 student", "student-int4-float", {"shape": "int4", "epochs": INT4_EPOCHS}, _int4_student)
        source = "student" if shared else own.output
        return Rung(
            kind,
            (
                *(() if shared else (own,)),
                Step(
                    "int4 split",
                    "student-int4-split",
                    {"embedding_size": "half, at most 160", "from": source, **INT4_SPLIT},
                    lambda i, o: _int4_split(i, i.workspace / source, o),
                ),
                Step("int4 qat", "student-int4", {"quantize": "int4", "block_size": INT4_BLOCK, **QAT}, _int4_qat),
                Step(
                    "int4 export",
                    "bundle-int4",
                    export,
                    lambda i, o: _export(i, i.workspace / "student-int4", o, export),
                    export=True,
                ),
            ),
            "student-int4",
            "bundle-int4",
        )
    if kind == "static":
        return Rung(
            kind,
            (
                Step("static student", "student-static", {"static": STATIC.__dict__}, _static_student),
                Step(
                    "static export",
                    "bundle-static",
                    {},
                    lambda i, o: _export(i, i.workspace / "student-static", o, {}),
                    export=True,
                ),
            ),
            "student-static",
            "bundle-static",
        )
    raise ConfigError(f"bundles: {kind!r} is not a bundle kind", f"use any of {', '.join(BUNDLE_KINDS)}")


# ---- the steps ----


def distill_student(inputs: Inputs, out: Path) -> None:
    """[distill]'s student: the fp16 bundle's, and the one the int8 kind splits."""
    _distill(inputs, out, inputs.distill.student, inputs.distill, measure_speed=True)


def _distill(
    inputs: Inputs, out: Path, student: str, settings: DistillSettings, *, measure_speed=False, fine_tune=False
) -> None:
    """One distillation into `out`; only [distill]'s own student times itself against the teacher for the
    report (about 15 s a run, and an int4 student's MLX kernels are slow on a CPU). A `fine_tune` of a
    distilled student reads the transfer set without its broad text (Inputs.broad)."""
    unlabeled = [p for p in inputs.unlabeled if not (fine_tune and p in inputs.broad)]
    kwargs = dict(
        measure_speed=measure_speed,
        teacher=inputs.teacher,
        train=inputs.train,
        dev=inputs.dev,
        targets=inputs.targets,
        out=out,
        loop=LoopConfig.from_settings(settings),
        text_column=inputs.text_column,
        label_column=inputs.label_column,
        unlabeled=unlabeled or None,
        unlabeled_column=inputs.unlabeled_column,
        held_out=list(inputs.held_out) or None,
        force=True,
        progress=inputs.progress,
        **replace(settings, student=student).kwargs(
            "student", "init", "vocab", "vocab_extra", "freeze_embeddings", "embedding_size", "quantize",
            "block_size", "layer_map", "max_length", "dev_fraction", "device",
        ),
    )  # fmt: skip
    try:
        distill(**kwargs)  # resumes an interrupted run of this very setup
    except WorkMismatch:  # an interrupted run of older settings: discard it
        distill(**kwargs, restart=True)


def _continued(settings: DistillSettings, **changes) -> DistillSettings:
    """A fine-tune of a distilled student: KD + CE only (a split or quantized student's new hidden-state
    projection would start from random), its own vocabulary, no early stop, its epochs exactly."""
    base = dict(hidden_weight="0", attention_weight="0", embedding_weight="0", two_stage=0, vocab="auto",
                vocab_extra=None, embedding_size=None, quantize=None, patience=None, max_steps=None,
                min_steps=0, step_budget=0)  # fmt: skip
    return replace(settings, **{**base, **changes})


def _split(inputs: Inputs, student: Path, out: Path, width: int | None) -> None:
    _distill(inputs, out, str(student), _continued(inputs.distill, embedding_size=width, **SPLIT), fine_tune=True)


def _int4_student(inputs: Inputs, out: Path) -> None:
    shape = out.parent / "student-int4.json"
    atomic_write_json(shape, int4_shape(load_config(inputs.teacher)))
    settings = replace(inputs.distill, init="teacher", embedding_size=None, quantize=None, layer_map=None,
                       epochs=min(inputs.distill.epochs, INT4_EPOCHS))  # fmt: skip
    _distill(inputs, out, str(shape), settings)


def _int4_split(inputs: Inputs, float_student: Path, out: Path) -> None:
    width = split_width(load_config(float_student).hidden_size) // INT4_BLOCK * INT4_BLOCK  # int4 groups divide it
    # too narrow to split: the same brief fine-tune
    settings = _continued(inputs.distill, embedding_size=width or None, **INT4_SPLIT)
    _distill(inputs, out, str(float_student), settings, fine_tune=True)


def _int4_qat(inputs: Inputs, out: Path) -> None:
    settings = _continued(inputs.distill, quantize="int4", block_size=INT4_BLOCK, attention_weight="1", **QAT)
    _distill(inputs, out, str(inputs.workspace / "student-int4-split"), settings, fine_tune=True)


def _static_student(inputs: Inputs, out: Path) -> None:
    d = inputs.distill
    loop = static_loop(LoopConfig.from_settings(d))
    distill_static(
        teacher=inputs.teacher,
        train=inputs.train,
        dev=inputs.dev,
        targets=inputs.targets,
        out=out,
        dim=STATIC.dim,
        vocab_extra=STATIC.vocab_extra,
        max_length=d.max_length,
        loop=loop,
        dev_fraction=d.dev_fraction,
        text_column=inputs.text_column,
        label_column=inputs.label_column,
        device=d.device,
        force=True,
        progress=inputs.progress,
        measure_speed=False,
    )


def _export_float(inputs: Inputs, out: Path) -> None:
    _export(inputs, inputs.workspace / "student", out, {})


def _export(inputs: Inputs, student: Path, out: Path, recipe: dict) -> None:
    settings = inputs.export
    if recipe:  # a block-wise kind: its own quantization, block size and target; the rest as [export] says
        settings = replace(settings, **recipe)
    export_bundle(student_dir=student, out_dir=out, force=True, progress=inputs.progress, **settings.kwargs())
