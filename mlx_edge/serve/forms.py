"""The new-job forms: each field read, checked and turned into a job's params (plain JSON), or an error
per field that the page shows next to it. Files are stored by uploads.py; here they are only named."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path

from mlx_edge.datasets import WORDNET_SENTENCES
from mlx_edge.distill.student import STUDENT_SPECS
from mlx_edge.models.builtin import BUILTIN_TEACHERS, PACKAGED_TEACHERS
from mlx_edge.models.builtin_llm import BUILTIN_LLMS
from mlx_edge.runtime.devices import DEVICE_CHOICES
from mlx_edge.settings import ADAPT, BUNDLE_KINDS, DEMO_TEACHER, DISTILL, PIPELINE, TEACHER

KINDS = ("distill", "adapt")
STUDENTS = STUDENT_SPECS
TEACHER_NAMES = (*BUILTIN_TEACHERS, *PACKAGED_TEACHERS)
DEFAULT_LLM = next(iter(BUILTIN_LLMS))

# What a new form shows: the demo's recipe (mlx_edge/demo.py; importing it here would pull torch into the
# server, so tests/test_serve_forms.py keeps the two equal), and `augment adapt`'s own defaults.
# One name per setting: "<section>_<key>" for a stage's setting, the bare key for a [pipeline] one, and the
# demo's own names (`mlx-edge demo --teacher / --limit`) for `teacher` and `limit`; `data` picks the files.
DISTILL_DEFAULTS = {
    "data": "todo",
    "limit": "",
    "teacher": DEMO_TEACHER,
    "distill_student": DISTILL.student,
    "teacher_epochs": str(TEACHER.epochs),
    "distill_epochs": str(DISTILL.epochs),
    "teacher_max_length": "",  # empty: auto (the smallest length that holds 99% of the training texts)
    "teacher_learning_rate": str(TEACHER.learning_rate),
    "distill_learning_rate": "",  # empty: auto (lower for teacher edits and a blended teacher: pipeline.distill_settings)
    "augment_per_class": "20",
    "augment_llm": DEFAULT_LLM,
    "teacher_edits": "auto",
    "broad_text": "auto",
    "device": PIPELINE.device,
    "bundles": list(PIPELINE.bundles),
}
# The job form's box for each kind of the ladder (docs/bundles.md has the recipes).
BUNDLE_HINTS = {
    "fp16": "the distilled student, 16-bit weights (iOS 16)",
    "int8": "the same student, its word table split, 8-bit codes (iOS 18)",
    "int4": "a student of its own, trained quantized, 4-bit codes (iOS 18)",
    "static": "a token table, mean-pooled, no layers (iOS 16)",
}
# A job's params from before the renames (and the ladder: those jobs made the fp16 bundle only).
LEGACY_PARAMS = {
    "student": "distill_student",
    "max_length": "teacher_max_length",
    "teacher_lr": "teacher_learning_rate",
    "student_lr": "distill_learning_rate",
    "augment": "augment_per_class",
}
ADAPT_DEFAULTS = {
    "model": DEFAULT_LLM,
    **{k: str(v) for k, v in ADAPT.kwargs("rank", "epochs", "batch_size", "learning_rate", "max_seq_length").items()},
}


class FormErrors(Exception):
    """Field name → what is wrong with it (one line each)."""

    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in errors.items()))
        self.errors = errors


class _Reader:
    def __init__(self, form: Mapping[str, str | list[str]], defaults: dict, models_dir: Path | None = None):
        self.form, self.defaults, self.errors = form, defaults, {}
        self.models_dir = Path(models_dir).expanduser().resolve() if models_dir else None

    def model(self, name: str, builtins: tuple[str, ...], fits: Callable[[Path], bool], what: str) -> str | None:
        """A built-in name, or `what` inside the server's models folder (a relative path starts there).
        Any other path gets one answer whether it exists or not: the form is no probe of the server's disk."""
        value = self.text(name)
        if value in builtins:
            return value
        names = ", ".join(builtins)
        if self.models_dir is None:
            self.errors[name] = f"{value!r} is not a built-in name ({names}); the server takes no model paths"
            return None
        path = (self.models_dir / value).resolve()
        if not value or not path.is_relative_to(self.models_dir) or path == self.models_dir:
            self.errors[name] = f"{value!r} is neither a built-in name ({names}) nor a path in the models folder"
        elif not fits(path):
            self.errors[name] = f"{value!r} in the models folder is not {what}"
        else:
            return str(path)
        return None

    def text(self, name: str) -> str:
        value = self.form.get(name)
        return (value if isinstance(value, str) else self.defaults.get(name, "")).strip()

    def choices(self, name: str, allowed: tuple[str, ...]) -> list[str] | None:
        """A set of checkboxes: the ticked values, in `allowed`'s order. The page sends an empty value beside
        the boxes, so none ticked is [""]; a form without the field at all (a script's) takes the default."""
        value = self.form.get(name, self.defaults.get(name, []))
        ticked = [v for v in ([value] if isinstance(value, str) else value) if v]
        unknown = [v for v in ticked if v not in allowed]
        if unknown or not ticked:
            what = f"{unknown[0]!r} is not one of" if unknown else "tick at least one of"
            self.errors[name] = f"{what} {', '.join(allowed)}"
            return None
        return [v for v in allowed if v in ticked]

    def number(self, name: str, kind: type, low: float, high: float, *, optional: bool = False):
        raw = self.text(name)
        if raw == "" and optional:
            return None
        try:
            value = kind(raw)
        except ValueError:
            self.errors[name] = f"{raw!r} is not {'a whole number' if kind is int else 'a number'}"
            return None
        if not (math.isfinite(value) and low <= value <= high):
            self.errors[name] = f"{raw} is out of range: use {low:g} to {high:g}"
            return None
        return value

    def auto_or_count(self, name: str, high: int) -> str | int | None:
        """ "auto", or a whole number from 0 to `high` (a [data] count that `auto` decides by default)."""
        return "auto" if self.text(name) == "auto" else self.number(name, int, 0, high)


def distill_params(
    form: Mapping[str, str | list[str]], files: Mapping[str, str], *, models_dir: Path | None = None
) -> dict:
    """A distillation job's params; `files`: the form's file fields that hold a file → its upload name;
    `form["bundles"]`: the ticked bundle kinds (a list). Model fields take built-in names, or paths inside
    `models_dir` (serve --models) when there is one."""
    r = _Reader(form, DISTILL_DEFAULTS, models_dir)
    data = r.text("data")
    if data not in ("todo", "upload"):
        r.errors["data"] = "pick the shipped to-do data or upload files"
    elif data == "upload" and "train_file" not in files:
        r.errors["train_file"] = "choose a training file (CSV, TSV or JSONL), or pick the shipped data"
    params = {
        "data": data,
        "limit": r.number("limit", int, 20, 10_000_000, optional=True),
        "teacher": r.model("teacher", TEACHER_NAMES, lambda p: (p / "config.json").is_file(), "a model folder"),
        "distill_student": r.model(
            "distill_student", STUDENTS, Path.exists, "a student config .json or student folder"
        ),
        "teacher_epochs": r.number("teacher_epochs", int, 1, 100),
        "distill_epochs": r.number("distill_epochs", int, 1, 1000),
        "teacher_max_length": r.number("teacher_max_length", int, 8, 512, optional=True),
        "teacher_learning_rate": r.number("teacher_learning_rate", float, 1e-7, 1.0),
        "distill_learning_rate": r.number("distill_learning_rate", float, 1e-7, 1.0, optional=True),
        "augment_per_class": r.number("augment_per_class", int, 1, 10_000) if r.form.get("augment") else None,
        "augment_llm": r.model("augment_llm", tuple(BUILTIN_LLMS), Path.is_dir, "an MLX LLM folder")
        if r.text("augment_llm")
        else DEFAULT_LLM,
        "teacher_edits": r.auto_or_count("teacher_edits", 100),
        "broad_text": r.auto_or_count("broad_text", WORDNET_SENTENCES),
        "device": _device(r),
        "bundles": r.choices("bundles", BUNDLE_KINDS),
    }
    if r.errors:
        raise FormErrors(r.errors)
    return params


def adapt_params(form: Mapping[str, str], files: Mapping[str, str], *, models_dir: Path | None = None) -> dict:
    """A LoRA fine-tuning job's params (the data file is the form's `data_file` upload)."""
    r = _Reader(form, ADAPT_DEFAULTS, models_dir)
    if "data_file" not in files:
        r.errors["data_file"] = "choose a labeled file (JSONL, CSV or TSV) for the LLM to learn from"
    params = {
        "model": r.model("model", tuple(BUILTIN_LLMS), Path.is_dir, "an MLX LLM folder"),
        "rank": r.number("rank", int, 1, 256),
        "epochs": r.number("epochs", int, 1, 100),
        "batch_size": r.number("batch_size", int, 1, 256),
        "learning_rate": r.number("learning_rate", float, 1e-8, 1.0),
        "max_seq_length": r.number("max_seq_length", int, 32, 8192),
    }
    if r.errors:
        raise FormErrors(r.errors)
    return params


def title_of(kind: str, params: dict, files: Mapping[str, str], given: str = "") -> str:
    if given.strip():
        return given.strip()[:120]
    if kind == "adapt":
        return f"LoRA r{params['rank']}: {Path(params['model']).name} on {files.get('data_file', 'data')}"
    data = files.get("train_file", "to-do data") if params["data"] == "upload" else "to-do data"
    return f"{Path(params['teacher']).name} → {Path(params['distill_student']).name} on {data}"


def current_params(params: dict) -> dict:
    """A distillation job's params under today's names (a job queued before the renames can be resumed)."""
    renamed = {LEGACY_PARAMS.get(k, k): v for k, v in params.items()}
    return {"bundles": ["fp16"], "teacher_max_length": None, "teacher_edits": 0, "broad_text": 0, **renamed}


def _device(r: _Reader) -> str | None:
    device = r.text("device")
    if device not in DEVICE_CHOICES:
        r.errors["device"] = f"pick one of {', '.join(DEVICE_CHOICES)}"
        return None
    return device
