"""The new-job forms of `mlx-edge serve`: defaults are the demo's and `augment adapt`'s, each field is named
for the config key it sets, each bad field gets its own one-line message, the params become the pipeline
config `mlx-edge run` would run, and the worker reports the bundle ladder's stages."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from mlx_edge.demo import demo_config
from mlx_edge.pipeline import SECTIONS, STAGE_SETTINGS, stage_settings
from mlx_edge.serve.forms import (
    ADAPT_DEFAULTS,
    BUNDLE_HINTS,
    DISTILL_DEFAULTS,
    FormErrors,
    adapt_params,
    current_params,
    distill_params,
)
from mlx_edge.serve.reporter import Reporter
from mlx_edge.serve.worker import _named, epoch_files, pipeline_config, stage_names
from mlx_edge.settings import ADAPT, BUNDLE_KINDS

TEMPLATE = Path(__file__).resolve().parents[1] / "mlx_edge/serve/templates/new_job.html"
# Distill fields that name no config setting: the demo's own (`mlx-edge demo --teacher/--limit`), which data.
NOT_SETTINGS = {"data", "limit", "teacher"}
# The template's fields that are no job param: the form's plumbing, the uploads, augment's on/off box.
FORM_ONLY = {"csrf_token", "kind", "title", "train_file", "dev_file", "test_file", "unlabeled_file", "augment"}


def test_form_defaults_are_the_demo_recipe_and_adapts(tmp_path):
    demo = demo_config(out=tmp_path)
    params = distill_params(DISTILL_DEFAULTS, {})
    config = pipeline_config(params, tmp_path, {})
    assert config.teacher["model"] == demo.teacher["model"] and "max_length" not in config.teacher  # auto
    for section in ("teacher", "label", "distill", "export"):  # every setting as the demo has it
        assert stage_settings(config, section) == stage_settings(demo, section), section
    assert (config.bundles, config.device, config.augment) == (demo.bundles, demo.device, demo.augment)
    assert (config.train, config.dev, config.test) == (demo.train, demo.dev, demo.test)
    adapt = {k: str(v) for k, v in ADAPT.kwargs().items() if k in ADAPT_DEFAULTS}
    assert adapt == {k: v for k, v in ADAPT_DEFAULTS.items() if k != "model"}


def config_key(field: str) -> tuple[str, str] | None:
    """Where a field's value belongs by the naming rule: the bare key of a [pipeline] or [data] setting,
    or "<section>_<key>" for a setting of a stage's section (its settings class's fields or extra keys)."""
    if field in {f.name for f in dataclasses.fields(STAGE_SETTINGS["pipeline"])} | SECTIONS["data"]:
        return ("pipeline", field)
    section, _, key = field.partition("_")
    settings = STAGE_SETTINGS.get(section)
    known = SECTIONS.get(section, set()) | ({f.name for f in dataclasses.fields(settings)} if settings else set())
    return (section, key) if key in known else None


def test_each_distill_field_is_named_for_the_config_key_it_sets(tmp_path):
    """One name per setting: a form field is its config key (a misnamed one fails here), and its value lands there."""
    (tmp_path / "llm").mkdir()
    distill_part = TEMPLATE.read_text(encoding="utf-8").split("{% else %}")[0]
    in_template = set(re.findall(r'(?:field|file)\("(\w+)"|name="(\w+)"', distill_part)) - {("", "")}
    assert {a or b for a, b in in_template} - FORM_ONLY == set(DISTILL_DEFAULTS)
    fields = set(DISTILL_DEFAULTS) - NOT_SETTINGS
    assert sorted(f for f in fields if config_key(f) is None) == []
    changed = {
        "distill_student": "small",
        "teacher_epochs": "2",
        "distill_epochs": "3",
        "teacher_max_length": "128",
        "teacher_learning_rate": "0.0001",
        "distill_learning_rate": "0.0003",
        "augment_per_class": "7",
        "augment_llm": "llm",
        "teacher_edits": "5",
        "broad_text": "30",
        "device": "cpu",
        "bundles": ["static", "int8"],
    }
    assert set(changed) == fields  # a new field needs a value here
    form = {**DISTILL_DEFAULTS, **changed, "augment": "on"}
    params = distill_params(form, {}, models_dir=tmp_path)
    assert set(params) == set(DISTILL_DEFAULTS)  # a job's params carry the fields' names
    config = pipeline_config(params, tmp_path, {})
    for field in fields:
        section, key = config_key(field)
        value = getattr(config, key) if section == "pipeline" else getattr(config, section)[key]
        expected = tuple(params[field]) if isinstance(params[field], list) else params[field]
        assert value == expected and value != DISTILL_DEFAULTS[field], field
    assert config.bundles == ("int8", "static")  # in the ladder's order


def test_each_bad_field_says_what_is_wrong():
    form = {
        **DISTILL_DEFAULTS,
        "data": "upload",
        "teacher": "/nowhere/teacher",
        "distill_student": "giant",
        "teacher_epochs": "0",
        "distill_epochs": "two",
        "teacher_max_length": "4",
        "teacher_learning_rate": "nan",
        "device": "tpu",
        "bundles": ["fp16", "int3"],
    }
    with pytest.raises(FormErrors) as caught:
        distill_params(form, {})
    errors = caught.value.errors
    assert set(errors) == {
        "train_file",
        "teacher",
        "distill_student",
        "teacher_epochs",
        "distill_epochs",
        "teacher_max_length",
        "teacher_learning_rate",
        "device",
        "bundles",
    }
    assert "the server takes no model paths" in errors["teacher"] and "out of range" in errors["teacher_epochs"]
    assert "not a whole number" in errors["distill_epochs"] and "out of range" in errors["teacher_learning_rate"]
    assert errors["bundles"] == "'int3' is not one of fp16, int8, int4, static"
    with pytest.raises(FormErrors) as caught:  # no box ticked: the page sends only its empty value
        distill_params({**DISTILL_DEFAULTS, "bundles": [""]}, {})
    assert caught.value.errors == {"bundles": "tick at least one of fp16, int8, int4, static"}
    without = distill_params({k: v for k, v in DISTILL_DEFAULTS.items() if k != "bundles"}, {})
    assert without["bundles"] == list(BUNDLE_KINDS)  # a form with no such field (a script's): the default
    with pytest.raises(FormErrors) as caught:
        adapt_params({**ADAPT_DEFAULTS, "model": "no-such-llm", "rank": "-1"}, {})
    assert set(caught.value.errors) == {"data_file", "model", "rank"}


def test_the_worker_lists_the_ladders_stages_in_the_order_the_pipeline_runs_them(tmp_path):
    assert set(BUNDLE_HINTS) == set(BUNDLE_KINDS)  # the form has a box for each kind
    config = pipeline_config(distill_params(DISTILL_DEFAULTS, {}), tmp_path, {})
    assert stage_names(config) == [
        "teacher",
        "broad",  # the shipped 3,000 rows, half English: auto's broad text is their transfer set
        "label",
        "distill",
        "export",
        "int8 split",
        "int8 export",
        "int4 split",
        "int4 qat",
        "int4 export",
        "static student",
        "static export",
        "check",
    ]
    static = distill_params({**DISTILL_DEFAULTS, "bundles": ["static"], "augment": "on"}, {})
    assert stage_names(pipeline_config(static, tmp_path, {})) == [
        "teacher",
        "augment",
        "broad",
        "label",
        "static student",
        "static export",
        "check",
    ]
    edits = distill_params({**DISTILL_DEFAULTS, "bundles": ["static"], "teacher_edits": "3"}, {})
    # the shipped 3,000 rows with edits given: a transfer set under 5,000 rows, so auto's broad text joins it
    assert stage_names(pipeline_config(edits, tmp_path, {}))[:4] == ["teacher", "edits", "broad", "label"]
    no_broad = distill_params({**DISTILL_DEFAULTS, "bundles": ["static"], "teacher_edits": "3", "broad_text": "0"}, {})
    assert stage_names(pipeline_config(no_broad, tmp_path, {}))[:3] == ["teacher", "edits", "label"]
    broad = distill_params({**DISTILL_DEFAULTS, "bundles": ["static"], "teacher_edits": "3", "broad_text": "9"}, {})
    assert distill_params({**DISTILL_DEFAULTS, "teacher_edits": "3"}, {})["broad_text"] == "auto"
    assert stage_names(pipeline_config(broad, tmp_path, {}))[:4] == ["teacher", "edits", "broad", "label"]
    few = tmp_path / "few.jsonl"  # an upload of a few English rows: auto makes edits, and broad text joins them
    few.write_text("".join(json.dumps({"text": f"pay the bill {i}", "label": f"l{i % 2}"}) + "\n" for i in range(40)))
    upload = distill_params({**DISTILL_DEFAULTS, "data": "upload"}, {"train_file": "few.jsonl"})
    assert (upload["teacher_edits"], upload["broad_text"]) == ("auto", "auto")
    assert stage_names(pipeline_config(upload, tmp_path, {"train": str(few)}))[:4] == [
        "teacher",
        "edits",
        "broad",
        "label",
    ]
    assert epoch_files(config)["int4 qat"] == (".student-int4.work/metrics.jsonl", "student-int4/metrics.jsonl")
    assert "int4 export" not in epoch_files(config)


class _Db:
    def __init__(self):
        self.rows, self.fields = [], {}

    def add_metrics(self, job_id, attempt, rows):
        self.rows += rows

    def update_job(self, job_id, **fields):
        self.fields = fields


def test_the_reporter_follows_the_ladders_stages_and_their_epochs(tmp_path):
    config = pipeline_config(distill_params({**DISTILL_DEFAULTS, "bundles": ["int8"]}, {}), tmp_path, {})
    db = _Db()
    reporter = Reporter(db, 1, 1, stage_names(config), out=tmp_path, epoch_files=epoch_files(config))
    (tmp_path / ".student-int8.work").mkdir()
    (tmp_path / ".student-int8.work/metrics.jsonl").write_text('{"epoch": 1, "dev_accuracy": 0.5}\n')
    reporter.on_log("[distill] up to date: /w/student")
    reporter.on_log("[int8 split] running → /w/student-int8")
    assert db.fields["stage"] == "int8 split" and ("int8 split", "dev_accuracy", 1.0, 0.5) in db.rows
    assert db.fields["stages"]["distill"] == "skipped" and db.fields["stages"]["int8 split"] == "running"
    reporter.on_log("[int8 split] done in 3 s")
    assert db.fields["stages"]["int8 split"] == "done" and db.fields["stages"]["int8 export"] == "pending"


def test_a_job_queued_before_the_renames_still_runs(tmp_path):
    old = {  # the params of a job made before the renames and the ladder
        "data": "todo",
        "limit": None,
        "teacher": "multilingual-e5-small",
        "student": "small",
        "teacher_epochs": 3,
        "distill_epochs": 10,
        "max_length": 64,
        "teacher_lr": 1e-4,
        "student_lr": 3e-4,
        "augment": None,
        "augment_llm": DISTILL_DEFAULTS["augment_llm"],
        "device": "auto",
    }
    assert set(current_params(old)) == set(DISTILL_DEFAULTS)
    config = pipeline_config(old, tmp_path, {})
    assert config.distill["student"] == "small" and config.teacher["max_length"] == 64
    assert (config.teacher["learning_rate"], config.distill["learning_rate"]) == (1e-4, 3e-4)
    assert config.bundles == ("fp16",) and config.augment == {}  # the one bundle jobs made then


def test_model_fields_take_built_in_names_or_paths_inside_the_models_folder_only(tmp_path):
    models = tmp_path / "models"
    (models / "teacher").mkdir(parents=True)
    (models / "teacher" / "config.json").write_text("{}")
    (models / "student.json").write_text("{}")
    (models / "llm").mkdir()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "config.json").write_text("{}")
    (models / "escape").symlink_to(tmp_path / "outside")
    form = {
        **DISTILL_DEFAULTS,
        "teacher": "teacher",
        "distill_student": str(models / "student.json"),
        "augment_llm": "llm",
    }
    params = distill_params(form, {}, models_dir=models)
    assert params["teacher"] == str((models / "teacher").resolve())
    assert params["distill_student"] == str((models / "student.json").resolve())
    assert params["augment_llm"] == str((models / "llm").resolve())
    assert adapt_params({**ADAPT_DEFAULTS, "model": "llm"}, {"data_file": "d.jsonl"}, models_dir=models)["model"]

    def refused(field, value, models_dir=models):
        with pytest.raises(FormErrors) as caught:
            distill_params({**DISTILL_DEFAULTS, field: value}, {}, models_dir=models_dir)
        return caught.value.errors[field]

    # outside the folder: one answer whether the path exists or not (no probe of the server's disk)
    existing, missing = refused("distill_student", "/etc/passwd"), refused("distill_student", "/etc/nope")
    assert existing.replace("/etc/passwd", "X") == missing.replace("/etc/nope", "X")
    assert "nor a path in the models folder" in existing
    for field, value in [("teacher", "../outside"), ("teacher", "escape"), ("augment_llm", "/etc"), ("teacher", "")]:
        assert "nor a path in the models folder" in refused(field, value), (field, value)
    assert "is not a model folder" in refused("teacher", "llm")  # inside, but not what the field needs
    assert "takes no model paths" in refused("distill_student", str(models / "student.json"), models_dir=None)
    assert "takes no model paths" in refused("augment_llm", "/etc", models_dir=None)


def test_upload_jobs_read_the_uploads_and_augment_takes_either(tmp_path):
    uploads = {"train": str(tmp_path / "a.jsonl"), "dev": str(tmp_path / "b.jsonl")}
    params = distill_params({**DISTILL_DEFAULTS, "data": "upload"}, {"train_file": "t.csv", "dev_file": "d.csv"})
    config = pipeline_config(params, tmp_path, uploads)
    assert (config.train, config.dev, config.test) == (Path(uploads["train"]), Path(uploads["dev"]), None)
    on = distill_params({**DISTILL_DEFAULTS, "augment": "on", "augment_per_class": "7"}, {})
    augment = pipeline_config(on, tmp_path, {}).augment
    assert augment["per_class"] == 7 and augment["llm"] == DISTILL_DEFAULTS["augment_llm"]
    assert pipeline_config(params, tmp_path, uploads).augment == {}  # off unless asked for
    # no dev file: the pipeline takes the LLM's lines as transfer text only (tests/test_augment_llm.py)
    alone = distill_params({**DISTILL_DEFAULTS, "data": "upload", "augment": "on"}, {"train_file": "t.csv"})
    config = pipeline_config(alone, tmp_path, {"train": uploads["train"]})
    assert config.dev is None and config.augment["per_class"] == int(DISTILL_DEFAULTS["augment_per_class"])


def test_an_unlabeled_upload_is_the_transfer_set_with_either_data(tmp_path):
    uploads = {"unlabeled": str(tmp_path / "notes.txt")}
    for data in ("todo", "upload"):
        files = {"unlabeled_file": "notes.txt", **({"train_file": "t.csv"} if data == "upload" else {})}
        params = distill_params({**DISTILL_DEFAULTS, "data": data}, files)
        config = pipeline_config(params, tmp_path, {**uploads, "train": str(tmp_path / "t.csv")})
        assert config.unlabeled == (Path(uploads["unlabeled"]),)
    assert pipeline_config(distill_params(DISTILL_DEFAULTS, {}), tmp_path, {}).unlabeled == ()
    with pytest.raises(FormErrors, match="out of range"):
        distill_params({**DISTILL_DEFAULTS, "teacher_edits": "101"}, {})


def test_worker_errors_name_uploads_as_the_user_did():
    params = {"uploads": {"train": "/w/uploads/0a1b.jsonl"}, "files": {"train": "my rows.jsonl"}}
    assert _named("/w/uploads/0a1b.jsonl line 3: empty text", params) == "my rows.jsonl (train file) line 3: empty text"
