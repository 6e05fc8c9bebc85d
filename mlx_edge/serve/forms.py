"""The new-job forms: each field read, checked and turned into a job's params (plain JSON), or an error
per field that the page shows next to it. Files are stored by uploads.py; here they are only named."""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path

from mlx_edge.distill.student import PRESETS
from mlx_edge.models.builtin import BUILTIN_TEACHERS, PACKAGED_TEACHERS
from mlx_edge.models.builtin_llm import BUILTIN_LLMS
from mlx_edge.runtime.devices import DEVICE_CHOICES
from mlx_edge.settings import ADAPT, DEMO_TEACHER

KINDS = ("distill", "adapt")
STUDENTS = (*PRESETS, "half")
TEACHER_NAMES = (*BUILTIN_TEACHERS, *PACKAGED_TEACHERS)
DEFAULT_LLM = next(iter(BUILTIN_LLMS))

# What a new form shows: the demo's recipe (mlx_edge/demo.py; importing it here would pull torch into the
# server, so tests/test_serve_forms.py keeps the two equal), and `augment adapt`'s own defaults.
DISTILL_DEFAULTS = {
    "data": "todo",
    "limit": "",
    "teacher": DEMO_TEACHER,
    "student": "tiny",
    "teacher_epochs": "3",
    "distill_epochs": "10",
    "max_length": "64",
    "teacher_lr": "5e-05",
    "student_lr": "0.0002",
    "augment_per_class": "20",
    "augment_llm": DEFAULT_LLM,
    "device": "auto",
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
    def __init__(self, form: Mapping[str, str], defaults: dict[str, str]):
        self.form, self.defaults, self.errors = form, defaults, {}

    def text(self, name: str) -> str:
        value = self.form.get(name)
        return (value if isinstance(value, str) else self.defaults.get(name, "")).strip()

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


def distill_params(form: Mapping[str, str], files: Mapping[str, str]) -> dict:
    """A distillation job's params; `files`: the form's file fields that hold a file → its upload name."""
    r = _Reader(form, DISTILL_DEFAULTS)
    data = r.text("data")
    if data not in ("todo", "upload"):
        r.errors["data"] = "pick the shipped to-do data or upload files"
    elif data == "upload" and "train_file" not in files:
        r.errors["train_file"] = "choose a training file (CSV, TSV or JSONL), or pick the shipped data"
    params = {
        "data": data,
        "limit": r.number("limit", int, 20, 10_000_000, optional=True),
        "teacher": _teacher(r),
        "student": _student(r),
        "teacher_epochs": r.number("teacher_epochs", int, 1, 100),
        "distill_epochs": r.number("distill_epochs", int, 1, 1000),
        "max_length": r.number("max_length", int, 8, 512),
        "teacher_lr": r.number("teacher_lr", float, 1e-7, 1.0),
        "student_lr": r.number("student_lr", float, 1e-7, 1.0),
        "augment": r.number("augment_per_class", int, 1, 10_000) if r.form.get("augment") else None,
        "augment_llm": r.text("augment_llm") or DEFAULT_LLM,
        "device": _device(r),
    }
    if params["augment"] and data == "upload" and "dev_file" not in files:
        r.errors["augment"] = "augment needs a dev file of real examples: upload one, or turn augment off"
    if r.errors:
        raise FormErrors(r.errors)
    return params


def adapt_params(form: Mapping[str, str], files: Mapping[str, str]) -> dict:
    """A LoRA fine-tuning job's params (the data file is the form's `data_file` upload)."""
    r = _Reader(form, ADAPT_DEFAULTS)
    if "data_file" not in files:
        r.errors["data_file"] = "choose a labeled file (JSONL, CSV or TSV) for the LLM to learn from"
    model = r.text("model")
    if not (model in BUILTIN_LLMS or Path(model).expanduser().is_dir()):
        r.errors["model"] = f"{model!r} is neither a built-in LLM ({', '.join(BUILTIN_LLMS)}) nor a directory here"
    params = {
        "model": model if model in BUILTIN_LLMS else str(Path(model).expanduser().resolve()),
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
    return f"{Path(params['teacher']).name} → {Path(params['student']).name} on {data}"


def _teacher(r: _Reader) -> str | None:
    teacher = r.text("teacher")
    if teacher in TEACHER_NAMES:
        return teacher
    path = Path(teacher).expanduser()
    if teacher and (path / "config.json").is_file():
        return str(path.resolve())
    r.errors["teacher"] = (
        f"{teacher!r} is neither a built-in teacher ({', '.join(TEACHER_NAMES)}) nor a model directory here"
    )
    return None


def _student(r: _Reader) -> str | None:
    student = r.text("student")
    if student in STUDENTS:
        return student
    path = Path(student).expanduser()
    if student and path.exists():
        return str(path.resolve())
    r.errors["student"] = f"{student!r} is neither a size ({', '.join(STUDENTS)}) nor a config .json or student here"
    return None


def _device(r: _Reader) -> str | None:
    device = r.text("device")
    if device not in DEVICE_CHOICES:
        r.errors["device"] = f"pick one of {', '.join(DEVICE_CHOICES)}"
        return None
    return device
