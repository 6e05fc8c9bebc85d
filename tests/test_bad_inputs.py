"""Every bad input a clear error, nothing lost (issue 19): one table of bad command lines across
the commands. Each must exit with its error class's code, print exactly one `Error:` line that says
what is wrong, and no traceback; where an input is at stake, it must be there unchanged afterwards.

Models and data are the session's tiny fixtures (tests/conftest.py); a case that could harm one
works on a copy in its own tmp_path. Most cases fail before any model is loaded.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
import re
import shlex
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from mlx_edge.cli import main
from mlx_edge.errors import (
    AugmentError,
    BenchError,
    BundleError,
    ConfigError,
    DataError,
    DistillError,
    ExportError,
    ModelError,
    OutputError,
    TargetsError,
    TeacherError,
)
from mlx_edge.fileio import remove_stale_staging, staging_dir
from tests.helpers.cli import assert_one_line_error
from tests.helpers.exports import exported, tiny_student

USAGE = 2  # click's own: an unknown option or a value the option's type refuses
DEAD_PID = 99999999  # above any pid_max: the process that made a folder with it is gone


class Places:
    """What a case's `{name}`s stand for, made on first use: tmp itself, the session's fixtures, and
    copies of them in tmp for the cases that could delete or overwrite them."""

    def __init__(self, request, tmp: Path):
        self._request, self.tmp, self._made = request, tmp, {}

    def __getitem__(self, name: str) -> Path:
        if name not in self._made:
            self._made[name] = getattr(self, f"_{name}")()
        return self._made[name]

    def fill(self, text: str) -> str:
        """`{teacher}` -> the trained teacher's path, ...; other braces (JSON's) are left alone."""
        return re.sub(r"\{(\w+)\}", lambda m: str(self[m[1]]) if hasattr(self, f"_{m[1]}") else m[0], text)

    def _tmp(self):
        return self.tmp

    def _base(self):  # a bare encoder, as a pretrained checkpoint is
        return self._request.getfixturevalue("base_dir")

    def _teacher(self):
        return self._request.getfixturevalue("trained_teacher")

    def _train(self):
        return self._request.getfixturevalue("toy_data")[0]

    def _dev(self):
        return self._request.getfixturevalue("toy_data")[1]

    def _student(self):
        return tiny_student()

    def _bundle(self):
        return Path(shutil.copytree(exported(), self.tmp / "bundle"))

    def _base_copy(self):
        return Path(shutil.copytree(self["base"], self.tmp / "base"))

    def _teacher_copy(self):
        return Path(shutil.copytree(self["teacher"], self.tmp / "teacher"))

    def _student_copy(self):
        return Path(shutil.copytree(self["student"], self.tmp / "proj" / "student"))

    def _train_copy(self):
        (self.tmp / "data").mkdir()
        return Path(shutil.copyfile(self["train"], self.tmp / "data" / "train.jsonl"))


@dataclass(frozen=True)
class Case:
    id: str
    command: str  # `{name}`s are Places'
    code: int
    fragments: tuple[str, ...]  # each must be in the one Error line
    files: tuple[tuple[str, str | bytes], ...] = ()  # (path under tmp, content; text is filled in)
    prepare: Callable[[Places], None] | None = None  # damaged models and the like
    absent: tuple[str, ...] = ()  # nothing written there (or a stale leftover removed)
    keep: tuple[str, ...] = ()  # inputs that must be there, unchanged, afterwards
    xfail: str | None = None  # a bug in a file this test's author does not own: the reason


# --- what the cases' files and models are made of ------------------------------------------------

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "special_tokens_map.json")


def _edit_json(path: Path, **changes) -> None:
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc.update(changes)
    path.write_text(json.dumps(doc), encoding="utf-8")


def without_tokenizer(name: str) -> Callable[[Places], None]:
    def prepare(places):
        for file in TOKENIZER_FILES:
            (places[name] / file).unlink(missing_ok=True)

    return prepare


def damaged_tokenizer(name: str) -> Callable[[Places], None]:
    return lambda places: (places[name] / "tokenizer.json").write_text('{"model": ', encoding="utf-8")


def truncated_weights(name: str) -> Callable[[Places], None]:
    def prepare(places):
        path = places[name] / "model.safetensors"
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    return prepare


def flipped_header(name: str) -> Callable[[Places], None]:
    def prepare(places):  # bits flipped in the 8-byte header length: a copy damaged on its way
        path = places[name] / "model.safetensors"
        data = bytearray(path.read_bytes())
        data[3] ^= 0x40
        path.write_bytes(bytes(data))

    return prepare


def wider_config(name: str) -> Callable[[Places], None]:
    return lambda places: _edit_json(places[name] / "config.json", hidden_size=64, intermediate_size=96)


class _NotATensor:
    def __reduce__(self):  # harmless if it ever loaded; PyTorch's weights_only loader refuses any such global
        return (Path, ("unsafe",))


def pickled_weights(name: str) -> Callable[[Places], None]:
    def prepare(places):
        (places[name] / "model.safetensors").unlink()
        with open(places[name] / "pytorch_model.bin", "wb") as f:
            pickle.dump({"bert.embeddings.word_embeddings.weight": _NotATensor()}, f, protocol=2)

    return prepare


def other_labels(name: str) -> Callable[[Places], None]:
    labels = ["a", "b", "c"]
    return lambda places: _edit_json(
        places[name] / "config.json",
        id2label=dict(enumerate(labels)),
        label2id={label: i for i, label in enumerate(labels)},
    )


def stale_staging(out: str) -> Callable[[Places], None]:
    """What killed runs left beside {tmp}/OUT (a dead pid, the older unnumbered name, a set-aside
    old copy), and a live run's folder (this process) that must be kept."""

    def prepare(places):
        for name in (f".{out}.{DEAD_PID}.abcdefgh.partial", f".{out}.abcdefgh.partial", f".{out}.old-{DEAD_PID}"):
            (places.tmp / name / "model.safetensors").parent.mkdir()
            (places.tmp / name / "model.safetensors").write_bytes(b"half")
        (places.tmp / f".{out}.{os.getpid()}.livelive.partial").mkdir()

    return prepare


def stale_left(out: str) -> tuple[str, ...]:
    return (
        f"{{tmp}}/.{out}.{DEAD_PID}.abcdefgh.partial",
        f"{{tmp}}/.{out}.abcdefgh.partial",
        f"{{tmp}}/.{out}.old-{DEAD_PID}",
    )


CSV_ONE_CLASS = "text,label\n" + "".join(f"text {i},work\n" for i in range(5))
OTHER_LABELS_CSV = "text,label\nhello there,work\nnice to see you,life\n"
UNKNOWN_LABEL_CSV = "text,label\npay the bill,finance\nrun in the park,space\n"
TOML_HEAD = '[data]\ntrain = "{train}"\n[teacher]\ndir = "{teacher}"\n[pipeline]\nout = "ws"\n'

TRAIN = "teacher train --model {base} --train {train} --dev {dev} --max-length 32 --epochs 1 --quiet"
LABEL = "teacher label --teacher {teacher} --data {train} --quiet"
DISTILL = "distill --teacher {teacher} --train {train} --dev {dev} --max-steps 1 --quiet"
EXPORT = "export {student} --seq-len 32 --n-texts 4 --quiet"
AUGMENT = "augment --seeds {train} --per-class 1 --quiet"

# --- the table ------------------------------------------------------------------------------------

D, M, O = DataError.exit_code, ModelError.exit_code, OutputError.exit_code
CASES = [
    # data: the labeled file itself
    Case("data-missing-file", "data {tmp}/nope.csv", D, ("nope.csv does not exist",)),
    Case("data-directory-instead-of-file", "data {tmp}", D, ("is a directory, not a data file",)),
    Case("data-empty-file", "data {tmp}/e.csv", D, ("e.csv is empty",), files=(("e.csv", ""),)),
    Case("data-header-only", "data {tmp}/h.csv", D, ("h.csv is empty",), files=(("h.csv", "text,label\n"),)),
    Case(
        "data-csv-wrong-field-count",
        "data {tmp}/a.csv",
        D,
        ("line 2 has 3 columns, the header has 2",),
        files=(("a.csv", "text,label\na,b,c\nd,e\n"),),
    ),
    Case(
        "data-tsv-wrong-field-count",
        "data {tmp}/a.tsv",
        D,
        ("line 2 has 3 columns, the header has 2", "TSV"),
        files=(("a.tsv", "text\tlabel\nhello\tx\textra\nworld\ty\n"),),
    ),
    Case(
        "data-jsonl-broken-line",
        "data {tmp}/a.jsonl",
        D,
        ("line 2 is not valid JSON",),
        files=(("a.jsonl", '{"text": "a", "label": "x"}\n{broken\n'),),
    ),
    Case(
        "data-empty-label",
        "data {tmp}/a.csv",
        D,
        ("line 2: empty label",),
        files=(("a.csv", "text,label\nhello,\nworld,b\n"),),
    ),
    Case(
        "data-empty-text", "data {tmp}/a.csv", D, ("line 2: empty text",), files=(("a.csv", "text,label\n,a\nb,b\n"),)
    ),
    Case(
        "data-no-label-column",
        "data {tmp}/a.jsonl",
        D,
        ("cannot tell which column is the label",),
        files=(("a.jsonl", '{"text": "a"}\n{"text": "b"}\n'),),
    ),
    Case(
        "data-unknown-text-column",
        "data {tmp}/a.csv --text-column body",
        D,
        ("no column 'body'",),
        files=(("a.csv", OTHER_LABELS_CSV),),
    ),
    Case("data-one-class", "data {tmp}/a.csv", D, ("one class only",), files=(("a.csv", CSV_ONE_CLASS),)),
    Case(
        "data-unknown-label-in-dev",
        "data {tmp}/t.csv --dev {tmp}/d.csv",
        D,
        ("not seen in training: space",),
        files=(("t.csv", "text,label\na,work\nb,life\n"), ("d.csv", "text,label\nc,work\nd,space\n")),
    ),
    Case(
        "data-not-utf8",
        "data {tmp}/gbk.csv",
        D,
        ("line 3 is not UTF-8",),
        files=(("gbk.csv", "text,label\n买菜,life\n".encode() + "交房租,finance\n".encode("gbk")),),
    ),
    Case(
        "data-dev-fraction-nan", "data {train} --dev-fraction nan", USAGE, ("'--dev-fraction'", "not a finite number")
    ),
    Case("data-dev-fraction-too-big", "data {train} --dev-fraction 0.9", USAGE, ("'--dev-fraction'", "0.01<=x<=0.5")),
    Case("data-tokenizer-not-a-model", "data {train} --tokenizer {tmp}", M, ("has no tokenizer",)),
    # teacher train: settings
    Case(
        "teacher-lr-inf",
        TRAIN + " --out {tmp}/t --learning-rate inf",
        USAGE,
        ("'--learning-rate'", "not a finite number"),
        absent=("{tmp}/t",),
    ),
    Case(
        "teacher-lr-nan",
        TRAIN + " --out {tmp}/t --learning-rate nan",
        USAGE,
        ("'--learning-rate'", "not a finite number"),
    ),
    Case("teacher-lr-zero", TRAIN + " --out {tmp}/t --learning-rate 0", USAGE, ("'--learning-rate'", "x>0")),
    Case(
        "teacher-loss-goes-nan",  # finite but absurd: the guard stops it, and a killed run's leftovers are gone
        TRAIN + " --out {tmp}/t --learning-rate 1e30",
        TeacherError.exit_code,
        ("(epoch 1): loss went bad", "lower --learning-rate"),
        prepare=stale_staging("t"),
        absent=("{tmp}/t", *stale_left("t")),
        keep=(f"{{tmp}}/.t.{os.getpid()}.livelive.partial",),
    ),
    Case("teacher-negative-epochs", TRAIN + " --out {tmp}/t --epochs -1", USAGE, ("'--epochs'", "x>=1")),
    Case("teacher-max-length-too-small", TRAIN + " --out {tmp}/t --max-length 4", USAGE, ("'--max-length'",)),
    Case("teacher-warmup-nan", TRAIN + " --out {tmp}/t --warmup-ratio nan", USAGE, ("'--warmup-ratio'", "finite")),
    Case("teacher-weight-decay-inf", TRAIN + " --out {tmp}/t --weight-decay inf", USAGE, ("'--weight-decay'",)),
    Case("teacher-grad-accum-zero", TRAIN + " --out {tmp}/t --grad-accum 0", USAGE, ("'--grad-accum'",)),
    Case("teacher-unknown-device", TRAIN + " --out {tmp}/t --device tpu", USAGE, ("'--device'", "'tpu'")),
    # teacher train: the model
    Case(
        "teacher-model-missing",
        "teacher train --model {tmp}/nomodel --train {train} --out {tmp}/t",
        M,
        ("nomodel does not exist",),
    ),
    Case(
        "teacher-model-without-tokenizer",
        "teacher train --model {base_copy} --train {train} --out {tmp}/t --quiet",
        M,
        ("has no tokenizer files", "[UNK]"),
        prepare=without_tokenizer("base_copy"),
        absent=("{tmp}/t",),
    ),
    Case(
        "teacher-model-tokenizer-damaged",
        "teacher train --model {base_copy} --train {train} --out {tmp}/t --quiet",
        M,
        ("cannot read", "tokenizer.json"),
        prepare=damaged_tokenizer("base_copy"),
    ),
    Case(
        "teacher-model-not-bert",
        "teacher train --model {tmp}/llama --train {train} --out {tmp}/t",
        M,
        ("'llama' model, not a BERT-family encoder",),
        files=(("llama/config.json", '{"model_type": "llama", "hidden_size": 64}'),),
    ),
    Case(
        "teacher-model-config-not-json",
        "teacher train --model {base_copy} --train {train} --out {tmp}/t",
        M,
        ("config.json is not valid JSON",),
        prepare=lambda places: (places["base_copy"] / "config.json").write_text("{not json"),
    ),
    Case(
        "teacher-weights-truncated",
        "teacher train --model {base_copy} --train {train} --out {tmp}/t --quiet",
        M,
        ("cannot read the weights", "damaged or truncated"),
        prepare=truncated_weights("base_copy"),
        absent=("{tmp}/t",),
    ),
    Case(
        "teacher-weights-bit-flipped",
        "teacher train --model {base_copy} --train {train} --out {tmp}/t --quiet",
        M,
        ("cannot read the weights",),
        prepare=flipped_header("base_copy"),
    ),
    Case(
        "teacher-config-disagrees-with-weights",
        "teacher train --model {base_copy} --train {train} --out {tmp}/t --quiet",
        M,
        ("shapes disagree with its config.json",),
        prepare=wider_config("base_copy"),
    ),
    Case(
        "teacher-pickle-weights-blocked",
        "teacher train --model {base_copy} --train {train} --out {tmp}/t --quiet",
        M,
        ("pytorch_model.bin", "safe loader refuses it"),
        prepare=pickled_weights("base_copy"),
    ),
    Case(
        "teacher-head-labels-differ",
        "teacher train --model {teacher} --train {tmp}/a.csv --out {tmp}/t --quiet",
        M,
        ("differ from the data's labels",),
        files=(("a.csv", OTHER_LABELS_CSV),),
    ),
    # teacher train: data and output
    Case("teacher-train-missing", "teacher train --model {base} --train {tmp}/no.csv --out {tmp}/t", D, ("no.csv",)),
    Case(
        "teacher-dev-unknown-label",
        "teacher train --model {base} --train {train} --dev {tmp}/d.csv --out {tmp}/t",
        D,
        ("not seen in training: space",),
        files=(("d.csv", UNKNOWN_LABEL_CSV),),
    ),
    Case(
        "teacher-out-exists",
        TRAIN + " --out {tmp}/t",
        O,
        ("already exists", "--force"),
        files=(("t/notes.txt", "mine"),),
        keep=("{tmp}/t/notes.txt",),
    ),
    Case(
        "teacher-force-out-holds-train-file",
        "teacher train --model {base} --train {train_copy} --out {tmp}/data --force",
        O,
        ("holds the input", "would delete"),
        keep=("{tmp}/data/train.jsonl",),
    ),
    Case(
        "teacher-force-out-is-model",
        "teacher train --model {base_copy} --train {train} --out {base_copy} --force",
        O,
        ("is the input",),
        keep=("{tmp}/base",),
    ),
    Case(
        "teacher-out-inside-model-dir",
        "teacher train --model {base_copy} --train {train} --out {base_copy}/t",
        O,
        ("inside the input directory",),
    ),
    Case(
        "teacher-out-under-a-file",
        TRAIN + " --out {tmp}/afile/t",
        O,
        ("cannot write", "afile"),
        files=(("afile", "x"),),
        keep=("{tmp}/afile",),
    ),
    # teacher label
    Case(
        "label-force-out-is-teacher",
        "teacher label --teacher {teacher_copy} --data {train} --out {teacher_copy} --force --quiet",
        O,
        ("is the input",),
        keep=("{tmp}/teacher",),
    ),
    Case(
        "label-force-out-holds-data",
        "teacher label --teacher {teacher} --data {train_copy} --out {tmp}/data --force --quiet",
        O,
        ("holds the input",),
        keep=("{tmp}/data/train.jsonl",),
    ),
    Case(
        "label-teacher-without-tokenizer",
        "teacher label --teacher {teacher_copy} --data {train} --out {tmp}/l --quiet",
        M,
        ("has no tokenizer",),
        prepare=without_tokenizer("teacher_copy"),
        absent=("{tmp}/l",),
    ),
    Case(
        "label-bare-encoder",
        "teacher label --teacher {base} --data {train} --out {tmp}/l",
        M,
        ("no trained classification head",),
    ),
    Case(
        "label-hidden-layer-out-of-range",
        LABEL + " --out {tmp}/l --hidden-layers 9",
        ConfigError.exit_code,
        ("--hidden-layers [9] out of range",),
    ),
    Case(
        "label-attention-layer-zero",
        LABEL + " --out {tmp}/l --attention-layers 0",
        ConfigError.exit_code,
        ("--attention-layers [0] out of range",),
    ),
    Case(
        "label-whitespace-text",
        "teacher label --teacher {teacher} --data {tmp}/a.jsonl --out {tmp}/l",
        D,
        ("line 2: empty text",),
        files=(("a.jsonl", '{"text": "pay it", "label": "finance"}\n{"text": " \\t ", "label": "health"}\n'),),
    ),
    Case(
        "distill-whitespace-text",
        "distill --teacher {teacher} --train {tmp}/a.csv --dev {dev} --max-steps 1 --quiet --out {tmp}/s",
        D,
        ("line 3: empty text",),
        files=(("a.csv", "text,label\npay it,finance\n   ,health\n"),),
    ),
    Case("label-layers-not-numbers", LABEL + " --out {tmp}/l --hidden-layers a,b", USAGE, ("'--hidden-layers'",)),
    Case(
        "label-data-label-unknown-to-teacher",
        "teacher label --teacher {teacher} --data {tmp}/a.csv --out {tmp}/l",
        M,
        ("space unknown to the teacher",),
        files=(("a.csv", UNKNOWN_LABEL_CSV),),
    ),
    Case(
        "label-out-not-a-cache",
        LABEL + " --out {tmp}/l",
        TargetsError.exit_code,
        ("is not a targets cache",),
        files=(("l/notes.txt", "mine"),),
        keep=("{tmp}/l/notes.txt",),
    ),
    Case(
        "label-torch-weights-truncated",
        "teacher label --teacher {teacher_copy} --data {train} --out {tmp}/l --backend torch --quiet",
        M,
        ("cannot read the weights",),
        prepare=truncated_weights("teacher_copy"),
    ),
    Case(
        "label-torch-config-disagrees",
        "teacher label --teacher {teacher_copy} --data {train} --out {tmp}/l --backend torch --quiet",
        M,
        ("shapes disagree with its config.json",),
        prepare=wider_config("teacher_copy"),
    ),
    Case(
        "label-pickle-weights-only",
        "teacher label --teacher {teacher_copy} --data {train} --out {tmp}/l --backend torch --quiet",
        M,
        ("no safetensors weights",),
        prepare=pickled_weights("teacher_copy"),
    ),
    Case(
        "label-mlx-weights-bit-flipped",
        "teacher label --teacher {teacher_copy} --data {train} --out {tmp}/l --backend mlx --quiet",
        M,
        ("cannot read",),
        prepare=flipped_header("teacher_copy"),
    ),
    Case(
        "label-out-under-a-file", LABEL + " --out {tmp}/afile/l", O, ("cannot write", "afile"), files=(("afile", "x"),)
    ),
    Case("label-batch-size-zero", LABEL + " --out {tmp}/l --batch-size 0", USAGE, ("'--batch-size'",)),
    # distill
    Case(
        "distill-all-loss-weights-zero",
        DISTILL + " --out {tmp}/s --kd-weight 0 --ce-weight 0",
        DistillError.exit_code,
        ("every prediction loss weight is 0",),
        absent=("{tmp}/s", "{tmp}/.s.work"),
    ),
    Case(
        "distill-student-negative-layers",
        DISTILL + " --out {tmp}/s --student {tmp}/neg.json",
        DistillError.exit_code,
        ("num_hidden_layers -2", "whole numbers >= 1"),
        files=(("neg.json", '{"num_hidden_layers": -2, "hidden_size": 32, "num_attention_heads": 4}'),),
        absent=("{tmp}/s",),
    ),
    Case(
        "distill-student-json-not-object",
        DISTILL + " --out {tmp}/s --student {tmp}/list.json",
        DistillError.exit_code,
        ("not a JSON object",),
        files=(("list.json", "[1, 2]"),),
    ),
    Case(
        "distill-student-heads-do-not-divide",
        DISTILL + " --out {tmp}/s --student {tmp}/odd.json",
        DistillError.exit_code,
        ("hidden_size 30 is not divisible by num_attention_heads 4",),
        files=(("odd.json", '{"hidden_size": 30, "num_attention_heads": 4, "num_hidden_layers": 2}'),),
    ),
    Case(
        "distill-unknown-student-preset",
        DISTILL + " --out {tmp}/s --student huge",
        DistillError.exit_code,
        ("unknown student 'huge'",),
    ),
    Case(
        "distill-layer-map-out-of-range",
        DISTILL + " --out {tmp}/s --layer-map 0:9",
        DistillError.exit_code,
        ("0:9 out of range",),
    ),
    Case(
        "distill-layer-map-malformed",
        DISTILL + " --out {tmp}/s --layer-map x",
        DistillError.exit_code,
        ("is not like '0:2,1:5'",),
    ),
    Case(
        "distill-weight-not-a-number",
        DISTILL + " --out {tmp}/s --kd-weight abc",
        DistillError.exit_code,
        ("--kd-weight 'abc'",),
    ),
    Case(
        "distill-weight-negative",
        DISTILL + " --out {tmp}/s --ce-weight -1",
        DistillError.exit_code,
        ("--ce-weight '-1'", "non-negative"),
    ),
    Case(
        "distill-weight-nan",
        DISTILL + " --out {tmp}/s --kd-weight nan",
        DistillError.exit_code,
        ("--kd-weight 'nan'", "finite"),
    ),
    Case(
        "distill-two-stage-without-intermediate-weights",
        DISTILL + " --out {tmp}/s --two-stage 2 --hidden-weight 0 --attention-weight 0",
        DistillError.exit_code,
        ("--two-stage 2", "all of their weights are 0"),
    ),
    Case(
        "distill-two-stage-whole-run",
        DISTILL + " --out {tmp}/s --two-stage 5 --epochs 5 --hidden-weight 1",
        DistillError.exit_code,
        ("leaves none of the 5 epochs",),
    ),
    Case(
        "distill-vocab-with-continued-student",
        DISTILL + " --out {tmp}/s --student {teacher} --vocab seen",
        DistillError.exit_code,
        ("--vocab seen with a student to continue",),
    ),
    Case(
        "distill-continued-student-of-other-labels",
        DISTILL + " --out {tmp}/s --student {teacher_copy}",
        DistillError.exit_code,
        ("does not fit this teacher",),
        prepare=other_labels("teacher_copy"),
    ),
    Case(
        "distill-teacher-bare-encoder",
        "distill --teacher {base} --train {train} --out {tmp}/s",
        DistillError.exit_code,
        ("no trained classification head",),
    ),
    Case(
        "distill-targets-not-a-cache",
        DISTILL + " --out {tmp}/s --targets {tmp}/cache",
        TargetsError.exit_code,
        ("is not a targets cache",),
        files=(("cache/notes.txt", "not a cache"),),
    ),
    Case("distill-temperature-zero", DISTILL + " --out {tmp}/s --temperature 0", USAGE, ("'--temperature'",)),
    Case(
        "distill-train-label-unknown-to-teacher",
        "distill --teacher {teacher} --train {tmp}/a.csv --out {tmp}/s",
        D,
        ("space",),
        files=(("a.csv", UNKNOWN_LABEL_CSV),),
    ),
    Case(
        "distill-train-label-unknown-names-the-teacher",
        "distill --teacher {teacher} --train {tmp}/a.csv --out {tmp}/s",
        D,
        ("teacher",),
        files=(("a.csv", UNKNOWN_LABEL_CSV),),
    ),
    Case(
        "distill-lr-inf",
        DISTILL + " --out {tmp}/s --learning-rate inf",
        USAGE,
        ("'--learning-rate'", "not a finite number"),
    ),
    Case(
        "distill-force-out-is-teacher",
        "distill --teacher {teacher_copy} --train {train} --out {teacher_copy} --force --max-steps 1 --quiet",
        O,
        ("is the input",),
        keep=("{tmp}/teacher/config.json",),
    ),
    Case(
        "distill-out-under-a-file",
        DISTILL + " --out {tmp}/afile/s",
        O,
        ("cannot write", "afile"),
        files=(("afile", "x"),),
    ),
    # export
    Case(
        "export-out-exists",
        EXPORT + " --out {tmp}/b",
        ExportError.exit_code,
        ("already exists", "--force"),
        files=(("b/notes.txt", "mine"),),
        keep=("{tmp}/b/notes.txt",),
    ),
    Case("export-not-a-student", "export {tmp} --out {tmp}/b", M, ("not a model directory (no config.json)",)),
    Case("export-student-missing", "export {tmp}/nope --out {tmp}/b", M, ("nope does not exist",)),
    Case(
        "export-bare-encoder",  # fails after it cleaned what a killed export left beside --out
        "export {base} --out {tmp}/b --seq-len 32 --quiet",
        M,
        ("no trained classifier head",),
        prepare=stale_staging("b"),
        absent=("{tmp}/b", *stale_left("b")),
        keep=(f"{{tmp}}/.b.{os.getpid()}.livelive.partial",),
    ),
    Case("export-bad-seq-len", EXPORT + " --out {tmp}/b --seq-len abc", USAGE, ("'--seq-len'",)),
    Case(
        "export-enumerated-lengths-below-ios18",
        "export {student} --out {tmp}/b --seq-len 32,64 --quiet",
        ExportError.exit_code,
        ("need --min-target iOS18",),
    ),
    Case(
        "export-out-inside-student",
        "export {student_copy} --out {student_copy}/bundle --seq-len 32 --quiet",
        ExportError.exit_code,
        ("inside the student directory",),
        absent=("{tmp}/proj/student/bundle",),
    ),
    Case(
        "export-head-lr-out-of-range",
        EXPORT + " --out {tmp}/b --head-learning-rate 5",
        USAGE,
        ("'--head-learning-rate'",),
    ),
    Case("export-unknown-min-target", EXPORT + " --out {tmp}/b --min-target iOS12", USAGE, ("'--min-target'",)),
    Case(
        "export-force-out-holds-student",
        "export {student_copy} --out {tmp}/proj --force --seq-len 32 --n-texts 4 --quiet",
        O,
        ("holds the input",),
        keep=("{tmp}/proj/student/config.json",),
    ),
    # check
    Case("check-not-a-bundle", "check {tmp}", BundleError.exit_code, ("has no manifest.json",)),
    Case("check-missing-dir", "check {tmp}/nope", BundleError.exit_code, ("is not a directory",)),
    Case(
        "check-manifest-not-json",
        "check {bundle}",
        BundleError.exit_code,
        ("manifest.json is not valid JSON",),
        prepare=lambda places: (places["bundle"] / "manifest.json").write_text("{x"),
    ),
    Case(
        "check-manifest-points-outside",
        "check {bundle} --n-texts 2",
        BundleError.exit_code,
        ("tokenizer.vocab_file '../vocab.txt' is a path with a '..' part",),
        prepare=lambda places: _edit_json(
            places["bundle"] / "manifest.json",
            tokenizer={
                **json.loads((places["bundle"] / "manifest.json").read_text())["tokenizer"],
                "vocab_file": "../vocab.txt",
            },
        ),
    ),
    Case(
        "check-student-not-a-model",
        "check {bundle} --student {tmp}/empty --n-texts 2",
        BundleError.exit_code,
        ("--student", "is not a model directory"),
        files=(("empty/notes.txt", "x"),),
    ),
    Case("check-texts-zero", "check {tmp} --n-texts 0", USAGE, ("'--n-texts'",)),
    # predict
    Case("predict-not-a-model", "predict {tmp} hello", M, ("not a model directory (no config.json)",)),
    Case("predict-bare-encoder", "predict {base} hello", M, ("no trained classifier head",)),
    Case("predict-max-length-too-small", "predict {teacher} hello --max-length 2", USAGE, ("'--max-length'",)),
    Case("predict-no-texts", "predict {teacher}", USAGE, ("Missing argument 'TEXTS...'",)),
    Case("predict-empty-text", "predict {teacher} hello ''", D, ("text 2 of 2 is empty or only spaces",)),
    Case("predict-blank-text", "predict {teacher} '  \t '", D, ("text 1 of 1 is empty or only spaces",)),
    Case(
        "predict-weights-truncated",
        "predict {teacher_copy} hello",
        M,
        ("cannot read",),
        prepare=truncated_weights("teacher_copy"),
    ),
    Case(
        "predict-zero-attention-heads",
        "predict {teacher_copy} hello",
        M,
        ("num_attention_heads",),
        prepare=lambda places: _edit_json(places["teacher_copy"] / "config.json", num_attention_heads=0),
    ),
    # run: the pipeline config
    Case("run-missing-config", "run {tmp}/nope.toml", ConfigError.exit_code, ("nope.toml does not exist",)),
    Case(
        "run-invalid-toml",
        "run {tmp}/r.toml",
        ConfigError.exit_code,
        ("is not valid TOML",),
        files=(("r.toml", "[data\n"),),
    ),
    Case(
        "run-unknown-section",
        "run {tmp}/r.toml",
        ConfigError.exit_code,
        ("unknown section(s) extra",),
        files=(("r.toml", TOML_HEAD + "[extra]\n"),),
    ),
    Case(
        "run-setting-typo",
        "run {tmp}/r.toml",
        ConfigError.exit_code,
        ("unknown setting 'epoch'", "did you mean 'epochs'"),
        files=(("r.toml", '[data]\ntrain = "{train}"\n[teacher]\nmodel = "{base}"\nepoch = 3\n'),),
    ),
    Case(
        "run-wrong-type",
        "run {tmp}/r.toml",
        ConfigError.exit_code,
        ("batch_size = 'many'",),
        files=(("r.toml", TOML_HEAD + '[label]\nbatch_size = "many"\n'),),
    ),
    Case(
        "run-no-train-file",
        "run {tmp}/r.toml",
        ConfigError.exit_code,
        ('[data] needs train = "FILE"',),
        files=(("r.toml", '[teacher]\nmodel = "m"\n'),),
    ),
    Case(
        "run-negative-learning-rate",
        "run {tmp}/r.toml",
        ConfigError.exit_code,
        ("learning_rate = -1.0 in [teacher]", "out of range", "> 0"),
        files=(("r.toml", '[data]\ntrain = "{train}"\n[teacher]\nmodel = "{base}"\nlearning_rate = -1\n'),),
        absent=("{tmp}/mlx-edge-run",),
    ),
    Case(
        "run-nan-learning-rate",
        "run {tmp}/r.toml",
        ConfigError.exit_code,
        ("learning_rate = nan in [distill]",),
        files=(("r.toml", TOML_HEAD + "[distill]\nlearning_rate = nan\n"),),
        absent=("{tmp}/ws",),
    ),
    Case(
        "run-warmup-out-of-range",
        "run {tmp}/r.toml",
        ConfigError.exit_code,
        ("warmup_ratio = 2.0 in [distill]", "from 0 to 1"),
        files=(("r.toml", TOML_HEAD + "[distill]\nwarmup_ratio = 2\n"),),
    ),
    Case(
        "run-unknown-vocab",
        "run {tmp}/r.toml",
        ConfigError.exit_code,
        ("vocab = 'some' in [distill]",),
        files=(("r.toml", TOML_HEAD + '[distill]\nvocab = "some"\n'),),
    ),
    Case(
        "run-unknown-label-backend",
        "run {tmp}/r.toml",
        ConfigError.exit_code,
        ("backend = 'tf' in [label]",),
        files=(("r.toml", TOML_HEAD + '[label]\nbackend = "tf"\n'),),
    ),
    Case(
        "run-train-file-missing",
        "run {tmp}/r.toml --quiet",
        D,
        ("does not exist",),
        files=(("r.toml", '[data]\ntrain = "no.csv"\n[teacher]\ndir = "{teacher}"\n[pipeline]\nout = "ws"\n'),),
    ),
    Case(
        "run-student-negative-layers",
        "run {tmp}/r.toml --quiet",
        DistillError.exit_code,
        ("num_hidden_layers -2",),
        files=(
            ("neg.json", '{"num_hidden_layers": -2}'),
            ("r.toml", TOML_HEAD + '[distill]\nstudent = "{tmp}/neg.json"\nhidden_weight = "1"\n'),
        ),
        absent=("{tmp}/ws/targets",),
    ),
    Case(
        "run-all-loss-weights-zero",
        "run {tmp}/r.toml --quiet",
        DistillError.exit_code,
        ("every prediction loss weight is 0",),
        files=(("r.toml", TOML_HEAD + '[distill]\nkd_weight = "0"\nce_weight = "0"\n'),),
        absent=("{tmp}/ws/targets",),
    ),
    # bench
    Case("bench-seq-lens-zero", "bench --seq-lens 0", USAGE, ("'--seq-lens'", "positive integers")),
    Case("bench-unknown-backend", "bench --backends foo", USAGE, ("'--backends'", "unknown foo")),
    Case("bench-budget-nan", "bench --budget-s nan", USAGE, ("'--budget-s'", "not a finite number")),
    Case(
        "bench-model-neither-preset-nor-dir",
        "bench --model {tmp}/nope --workloads infer --backends mlx-cpu",
        BenchError.exit_code,
        ("neither a preset nor a directory",),
    ),
    Case("bench-teacher-missing", "bench --teacher {tmp}/nope", USAGE, ("'--teacher'", "does not exist")),
    Case(
        "bench-model-dir-not-a-model",
        "bench --model {tmp} --workloads infer --backends mlx-cpu",
        M,
        ("not a model directory",),
    ),
    # augment
    Case("augment-seeds-missing", "augment --seeds {tmp}/no.csv --out {tmp}/a.jsonl --per-class 1", D, ("no.csv",)),
    Case("augment-per-class-zero", AUGMENT + " --out {tmp}/a.jsonl --per-class 0", USAGE, ("'--per-class'",)),
    Case(
        "augment-min-confidence-above-1",
        AUGMENT + " --out {tmp}/a.jsonl --min-confidence 2",
        USAGE,
        ("'--min-confidence'",),
    ),
    Case(
        "augment-temperature-inf",
        AUGMENT + " --out {tmp}/a.jsonl --temperature inf",
        USAGE,
        ("'--temperature'", "finite"),
    ),
    Case(
        "augment-unknown-class", AUGMENT + " --out {tmp}/a.jsonl --classes space", D, ("class 'space' has no examples",)
    ),
    Case("augment-out-is-a-directory", AUGMENT + " --out {tmp}", AugmentError.exit_code, ("is a directory",)),
    Case(
        "augment-out-is-the-seeds",
        "augment --seeds {train_copy} --out {train_copy} --per-class 1 --quiet",
        AugmentError.exit_code,
        ("was not written by mlx-edge augment",),
        keep=("{tmp}/data/train.jsonl",),
    ),
    Case(
        "augment-force-out-is-the-seeds",
        "augment --seeds {train_copy} --out {train_copy} --per-class 1 --force --quiet",
        O,
        ("is the input",),
        keep=("{tmp}/data/train.jsonl",),
    ),
    Case(
        "augment-teacher-bare-encoder",
        AUGMENT + " --out {tmp}/a.jsonl --teacher {base}",
        M,
        ("no trained classifier head",),
    ),
    # the command line itself
    Case("doctor-unknown-option", "doctor --bogus", USAGE, ("No such option '--bogus'",)),
    Case("unknown-command", "trian", USAGE, ("No such command 'trian'",)),
]


def _snapshot(path: Path):
    """A file's or a folder's content, to compare before and after."""
    if path.is_file():
        return hashlib.sha256(path.read_bytes()).hexdigest()
    return {str(p.relative_to(path)): _snapshot(p) for p in sorted(path.rglob("*")) if p.is_file()}


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(c, id=c.id, marks=[pytest.mark.xfail(strict=True, reason=c.xfail)] if c.xfail else [])
        for c in CASES
    ],
)
def test_bad_input(case: Case, request, tmp_path):
    places = Places(request, tmp_path)
    for name, content in case.files:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content) if isinstance(content, bytes) else path.write_text(places.fill(content))
    if case.prepare is not None:
        case.prepare(places)
    args = shlex.split(places.fill(case.command))
    kept = {p: _snapshot(Path(places.fill(p))) for p in case.keep}
    assert all(Path(places.fill(p)).exists() for p in case.keep), "a kept input must exist before the run"

    result = CliRunner().invoke(main, args)

    assert result.exit_code == case.code, result.output
    assert_one_line_error(result, *case.fragments)
    for p in case.absent:
        assert not Path(places.fill(p)).exists(), f"{p} exists after the failed run"
    for p, before in kept.items():
        path = Path(places.fill(p))
        assert path.exists() and _snapshot(path) == before, f"the input {p} was changed or deleted"


def test_the_battery_is_large_and_distinct():
    assert len({c.id for c in CASES}) == len(CASES)
    inputs = {(c.command, c.files, c.prepare) for c in CASES}  # each prepare is its own function
    assert len(inputs) >= 60 and len(inputs) >= len(CASES) - 1  # one input is asked two things


def test_a_refused_write_is_one_line(monkeypatch, tmp_path, trained_teacher, toy_data):
    """PermissionError cannot be made as root: raise it where label creates --out."""
    out = tmp_path / "targets"
    real_mkdir = Path.mkdir

    def mkdir(self, *args, **kwargs):
        if self == out:
            raise PermissionError(errno.EACCES, "Permission denied", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", mkdir)
    args = ["teacher", "label", "--teacher", str(trained_teacher), "--data", str(toy_data[0]), "--out", str(out)]
    result = CliRunner().invoke(main, [*args, "--quiet"])
    assert result.exit_code == OutputError.exit_code, result.output
    assert_one_line_error(result, f"cannot write {out}: Permission denied", "no permission", "another --out")


def test_stale_staging_only_dead_runs(tmp_path):
    out = tmp_path / "bundle"
    live = staging_dir(out)
    others = [tmp_path / n for n in (".bundle.v2.12345678.partial", ".bundles.abcdefgh.partial", "bundle.partial")]
    for path in others:
        path.mkdir()
    dead = tmp_path / f".bundle.{DEAD_PID}.abcdefgh.partial"
    dead.mkdir()
    assert remove_stale_staging(out) == [dead]
    assert live.is_dir() and all(p.is_dir() for p in others)
    assert live.name.startswith(f".bundle.{os.getpid()}.")
    (tmp_path / "plain").mkdir()
    assert live.stat().st_mode == (tmp_path / "plain").stat().st_mode  # not mkdtemp's 0700: it becomes --out
