"""The config `mlx-edge init` writes: every section and setting of a `mlx-edge run` CONFIG.toml with
its default and a short comment.

The settings and their defaults come from the settings classes (mlx_edge/settings.py) through
`dataclasses.fields`, so a new setting or a changed default shows up here without an edit; only its
comment is written here (tests/test_init.py fails on a setting without one). examples/pipeline.toml
is this text for the shipped data: `python scripts/write_example_config.py` writes it again.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any

from mlx_edge.settings import (
    AUGMENT_ANSWER_TOKENS,
    AUGMENT_LIST_TOKENS,
    BROAD_STEP_BUDGET,
    CONFIG_SECTIONS,
    DEMO_TEACHER,
    DISTILL_LEARNING_RATE,
    EDITS_LEARNING_RATE,
    EDITS_STEP_BUDGET,
    NEW_STUDENT_VOCAB_EXTRA,
)

LAYOUT = CONFIG_SECTIONS  # section -> (settings class or None, the keys only a pipeline has)
OPTIONAL = ("augment",)  # a stage that runs only when its section is there: written commented out
# A stage's seed and device follow [pipeline]'s unless its section sets them (pipeline.stage_settings),
# so they are written commented out: `seed = 0` in [teacher] would pin it against [pipeline] seed.
INHERITED = ("seed", "device")
COLUMN = 36  # where a setting's comment starts

HEADER = """\
# A `mlx-edge run` config, written by `mlx-edge init`: every setting with its default.
# Paths are relative to this file. A line that starts with # is a setting left at its default
# (or an optional one): remove the # to set it. Stages whose settings and inputs are unchanged
# are skipped on a re-run; an interrupted stage resumes. The settings: docs/pipeline.md.
"""

# A line under a section's name.
NOTES = {
    "teacher": "Either fine-tune `model`, or use a teacher you already trained with `dir`.",
    "augment": "Optional: synthetic rows per class, cleaned by the teacher; uncomment it to run (with no [data] dev, "
    "they are transfer text only).",
    "label": "The teacher layers to cache follow from [distill] (student, layer_map, loss weights).",
    "distill": "The student every bundle but static is made from (int4: when it is auto), and their settings.",
}

UNSET_SEED, UNSET_DEVICE = "unset: [pipeline] seed", "unset: [pipeline] device"
EPOCHS, BATCH, LR = "passes over the data", "examples per step", "peak learning rate (AdamW, warmup, linear decay)"
WARMUP, DECAY, ACCUM, CLIP = "share of steps with linear warmup", "AdamW weight decay", "batches per step", "clip norm"
DEV_SHARE = "dev share of train when [data] has no dev"

# Each setting's comment (tests/test_init.py: one for every setting, none for a setting that is gone).
COMMENTS: dict[str, dict[str, str]] = {
    "pipeline": {
        "out": "workspace: teacher/, targets/, student/, bundles, report.json",
        "device": "auto | cpu | gpu | cuda | mps: every stage's",
        "seed": "every stage's seed",
        "bundles": "the bundles to make, each its own stages: fp16 | int8 | int4 | static",
    },
    "data": {
        "train": "CSV, TSV or JSONL with text and label columns",
        "dev": "optional: else a stratified share of train",
        "test": "optional: scored in the final report",
        "text_column": "unset: found by name; or a name or 0-based index",
        "label_column": "unset: found by name; or a name or 0-based index",
        "unlabeled": "optional: files of text with no label, a transfer set the student learns the teacher on",
        "unlabeled_column": "unset: found by name; the text column of CSV/TSV/JSONL unlabeled files",
        "teacher_edits": "auto (20 under 1,000 rows, no unlabeled files) | N new sentences per row, words swapped, and 500 word bags per sentence up to 10,000 (0: none)",
        "broad_text": "auto (10,000 under 5,000 rows, a tenth English) | N: WordNet sentences for the transfer set (0: none)",
    },
    "teacher": {
        "model": "built in, offline; or a model dir, or a hub id such as bert-base-chinese",
        "dir": "a teacher from `mlx-edge teacher train`: no teacher stage",
        "epochs": EPOCHS,
        "min_steps": "at least this many steps: more epochs for a few hundred rows",
        "batch_size": BATCH,
        "learning_rate": LR,
        "max_length": "unset: the smallest of 64, 128, 256, 512 that holds 99% of train",
        "warmup_ratio": WARMUP,
        "weight_decay": DECAY,
        "grad_accum": ACCUM,
        "max_grad_norm": CLIP,
        "seed": UNSET_SEED,
        "device": UNSET_DEVICE,
        "dev_fraction": DEV_SHARE,
        "trust_remote_code": "let the model's own Python code run",
        "freeze_embeddings": "unset: word table kept as pretrained if 20M+ and most of the teacher, else trained",
        "freeze_layers": "bottom blocks (and all embeddings) kept as pretrained",
        "backend": "torch (CUDA, MPS, CPU; torchrun) | mlx (one process, Metal on a Mac)",
        "head": "auto (probe below 1,000 rows) | probe (mean pooling, starts as a linear probe) | new ([CLS] pooler)",
        "select": "auto (last when dev has < 200 rows) | best (on dev) | last: the epoch kept",
        "refit": "auto (no dev file, select keeps the last, < 150 training rows) | yes | no: train again on all rows",
        "blend": "auto (0.25 under 150 training rows, none when self-trained) | share of the fine-tune, the rest "
        "the probe's (WiSE-FT); 1: fine-tuned only",
        "self_train": "auto (below 1,000 labeled rows) | yes | no: learn again from its surest answers on [data] unlabeled",
    },
    "augment": {
        "per_class": "new examples per class: labeled rows, or transfer text with no [data] dev",
        "llm": "unset: token edits; a built-in name (mlx-edge doctor lists them), an mlx-lm dir or a hub id",
        "adapter": "a LoRA adapter of llm (`mlx-edge augment adapt`)",
        "min_confidence": "drop rows the teacher labels with less confidence",
        "relabel": "keep rows the teacher labels otherwise, under its label",
        "shots": "real examples shown per prompt",
        "per_prompt": "new examples asked for per prompt",
        "batch_size": "prompts generated together",
        "max_rounds": "stop after this many rounds even if a class is short",
        "max_tokens": f"unset: {AUGMENT_ANSWER_TOKENS} for a chat model, {AUGMENT_LIST_TOKENS} for a base model (a list)",
        "temperature": "sampling temperature",
        "top_p": "nucleus sampling mass",
        "seed": UNSET_SEED,
        "near_duplicate": "Jaccard similarity at which two texts count as the same",
        "min_chars": "drop shorter examples",
        "max_chars": "drop longer examples",
    },
    "label": {
        "backend": "mlx (fastest on a Mac) | torch",
        "device": UNSET_DEVICE,
        "batch_size": "examples per forward pass",
        "max_length": "unset: the teacher's training max length",
        "shard_size": "examples per shard file (a resume starts after the last)",
    },
    "distill": {
        "student": "auto | tiny | small | small-512 | half | static | a config .json | a student dir",
        "init": "auto | teacher | embeddings | random: where the weights start",
        "vocab": "auto | seen | seen+chars | seen+script | all: the pieces kept",
        "vocab_extra": f"unset: {NEW_STUDENT_VOCAB_EXTRA} for a new student; more teacher pieces (English, likeliest)",
        "freeze_embeddings": "keep the word-embedding table as init made it",
        "embedding_size": "unset: none; factorize the word embeddings to this width",
        "quantize": "unset: none; int8 | int4: quantization-aware distillation",
        "block_size": "weights per scale with quantize (32, 64 or 128)",
        "layer_map": "unset: uniform; student:teacher layer pairs, 0-based",
        "max_length": "unset: the targets cache's, else the teacher's",
        "epochs": f"{EPOCHS}, at most (step_budget may stop it sooner)",
        "min_steps": "at least this many steps: more epochs for a few hundred rows",
        "step_budget": f"unset: {EDITS_STEP_BUDGET} with teacher edits, {BROAD_STEP_BUDGET} with broad text alone, "
        "else none; fewer epochs past it",
        "batch_size": BATCH,
        "learning_rate": f"unset: {EDITS_LEARNING_RATE:g} with edits and a blended teacher, else {DISTILL_LEARNING_RATE:g}",
        "warmup_ratio": WARMUP,
        "weight_decay": DECAY,
        "grad_accum": ACCUM,
        "max_grad_norm": CLIP,
        "temperature": "soft-target temperature T (the KD term is multiplied by T²)",
        "calibrate": "soften an over-confident teacher's soft labels to its dev accuracy",
        "kd_weight": "soft-target KL weight: W, or START:END linear over the run",
        "ce_weight": "hard-label cross-entropy weight",
        "hidden_weight": "hidden-state MSE weight (mapped layers)",
        "attention_weight": "attention-map loss weight",
        "embedding_weight": "embedding-output MSE weight",
        "attention_loss": "mse | kl: how attention maps are compared",
        "two_stage": "TinyBERT: epochs of intermediate losses before prediction losses",
        "patience": "unset: no early stop; epochs without dev gain before stopping",
        "select": "auto (last when dev has < 200 rows) | best (on dev) | last: the epoch kept",
        "checkpoint_every": "steps between resume checkpoints",
        "max_steps": "unset: every epoch; stop after this many steps",
        "cpu_shards": "unset: one per core, at most 8; MLX CPU streams per batch",
        "seed": UNSET_SEED,
        "dev_fraction": DEV_SHARE,
        "device": UNSET_DEVICE,
    },
    "export": {
        "seq_len": 'unset: the student\'s max length; "128", "16-128" or "32,64,128" (iOS18)',
        "precision": "fp16 | fp32: compute precision of the models",
        "compute_units": "CPU_AND_GPU | ALL | CPU_AND_NE | CPU_ONLY: for the app",
        "min_target": "iOS16 | iOS17 | iOS18: minimum deployment target",
        "quantize": "none | int8 | int8-block | int4-block | palettize",
        "block_size": "the most weights per scale with int8-block / int4-block",
        "palettize_bits": "bits per weight with palettize: 2, 4, 6 or 8",
        "palettize_mode": "kmeans | uniform: how the palette is built",
        "head_optimizer": "sgd | adam: the updatable head's, on the device",
        "head_learning_rate": "the head's, baked in (apps may override); unset: 0.05 / the embeddings' mean squared norm",
        "head_batch_size": "the head's mini-batch: 1, 2, 4, 8, 16, 32 or 64",
        "head_epochs": "the head's epochs, baked in (apps may choose 1-200)",
        "author": "recorded in the models' metadata",
        "license": "recorded in the models' metadata",
        "model_version": "version string of the models",
        "description": "short description of the models",
        "n_texts": "dev texts for the checks before a bundle is written",
        "device": UNSET_DEVICE,
        "extras": "also write classifier | onnx | tokenizer-json (the app needs none)",
    },
    "check": {
        "enabled": "check every bundle after it is written",
    },
}

# What a line left unset shows (TOML has no null, so such a line is a comment): a value to start from.
EXAMPLES: dict[str, dict[str, Any]] = {
    "data": {
        "dev": "dev.csv",
        "test": "test.csv",
        "text_column": "text",
        "label_column": "label",
        "unlabeled": ["notes.txt"],
        "unlabeled_column": "text",
    },
    "teacher": {"dir": "teacher", "max_length": 128, "freeze_embeddings": False},
    "augment": {"llm": "smollm2-135m-instruct", "adapter": "adapter", "max_tokens": AUGMENT_LIST_TOKENS},
    "label": {"max_length": 128},
    "distill": {
        "vocab_extra": NEW_STUDENT_VOCAB_EXTRA,
        "step_budget": EDITS_STEP_BUDGET,
        "learning_rate": DISTILL_LEARNING_RATE,
        "embedding_size": 128,
        "quantize": "int8",
        "layer_map": "0:2,1:5,2:8,3:11",
        "max_length": 128,
        "patience": 2,
        "max_steps": 100,
        "cpu_shards": 2,
    },
    "export": {"seq_len": "128", "head_learning_rate": 0.05},
}


def write_config(*, train: Path, dev: Path | None = None, test: Path | None = None, config_path: Path) -> str:
    """The TOML text of a complete config for these data files, to be saved at `config_path`: the
    paths in it are relative to that file's folder, so it runs from any current directory."""
    base = Path(config_path).resolve().parent
    values = {
        "data": {
            "train": _relative(train, base),
            "dev": _relative(dev, base),
            "test": _relative(test, base),
            "text_column": None,
            "label_column": None,
            "unlabeled": None,
            "unlabeled_column": None,
            "teacher_edits": "auto",
            "broad_text": "auto",
        },
        "teacher": {"model": DEMO_TEACHER, "dir": None},
        "augment": {"per_class": 50, "llm": None, "adapter": None},
        "check": {"enabled": True},
    }
    return HEADER + "".join("\n" + _section(name, values.get(name, {})) for name in LAYOUT)


def _relative(path: Path | None, base: Path) -> str | None:
    if path is None:
        return None
    try:
        return Path(os.path.relpath(Path(path).resolve(), base)).as_posix()
    except ValueError:  # another drive (Windows): no relative path exists
        return Path(path).resolve().as_posix()


def _section(name: str, extras: dict[str, Any]) -> str:
    """One section: its note, its header, then each key; an optional section wholly commented out."""
    cls, _ = LAYOUT[name]
    settings = {f.name: _default(f) for f in dataclasses.fields(cls)} if cls else {}
    off = "# " if name in OPTIONAL else ""
    lines = [f"# {NOTES[name]}"] if name in NOTES else []
    lines.append(f"{off}[{name}]")
    for key, value in {**extras, **settings}.items():
        unset = value is None or (name != "pipeline" and key in INHERITED)
        text = _toml(value) if value is not None else _toml(EXAMPLES.get(name, {}).get(key, ...))
        setting = f"{off}{'# ' if unset else ''}{key} = {text}"
        comment = COMMENTS.get(name, {}).get(key)
        lines.append(f"{setting.ljust(COLUMN - 2)}  # {comment}" if comment else setting)
    return "\n".join(lines) + "\n"


def _default(field: dataclasses.Field) -> Any:
    return field.default_factory() if field.default is dataclasses.MISSING else field.default


def _toml(value: Any) -> str:
    """A TOML value: the settings hold booleans, numbers, strings and tuples of them."""
    if value is ...:  # an unset setting without an example
        return "..."
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (tuple, list)):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return json.dumps(str(value), ensure_ascii=False)  # a JSON string is a TOML basic string
